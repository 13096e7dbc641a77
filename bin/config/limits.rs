//! Per-profile limits (docs/PROTOCOL.md, "Profile limits"): the
//! `--profile-limit PROFILE:NAME=N,...` flags (repeatable; `;`-separated in
//! `TETHER_PROFILE_LIMIT`) and the config file's `[limits.PROFILE]` tables,
//! `*` naming every profile (the default a profile's own limits sit on).
//! A flag's limits replace the file's of the same profile, one by one.

use std::collections::HashMap;

use anyhow::{bail, Context};
use tether_actors::profile_limits::{LimitTable, ProfileLimits};

/// The profile name that stands for every profile.
pub const EVERY_PROFILE: &str = "*";

/// One `--profile-limit`: `PROFILE:NAME=N,NAME=N`.
pub fn parse_flag(spec: &str) -> anyhow::Result<(String, ProfileLimits)> {
    let (profile, list) = spec
        .split_once(':')
        .with_context(|| format!("--profile-limit {spec:?}: expected PROFILE:NAME=N,..."))?;
    let profile = profile.trim();
    if profile.is_empty() {
        bail!("--profile-limit {spec:?}: the profile is empty (`*` is every profile)");
    }
    let mut fields = serde_json::Map::new();
    for pair in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (name, value) = pair
            .split_once('=')
            .with_context(|| format!("--profile-limit {spec:?}: {pair:?} is not NAME=N"))?;
        let value: u32 = value.trim().parse().with_context(|| {
            format!("--profile-limit {spec:?}: {value:?} is not a whole number")
        })?;
        fields.insert(name.trim().to_string(), value.into());
    }
    if fields.is_empty() {
        bail!("--profile-limit {spec:?}: no limit given");
    }
    let limits = serde_json::from_value(fields.into()).with_context(|| {
        format!(
            "--profile-limit {spec:?}: limits are live_sessions, running_turns, queued_turns, \
             requests_per_s and connections"
        )
    })?;
    Ok((profile.to_string(), limits))
}

/// The file's tables with the flags over them.
pub fn table(flags: &[String], file: HashMap<String, ProfileLimits>) -> anyhow::Result<LimitTable> {
    let mut all = file;
    for spec in flags {
        let (profile, limits) = parse_flag(spec)?;
        let merged = match all.get(&profile) {
            Some(from_file) => from_file.overridden_by(&limits),
            None => limits,
        };
        all.insert(profile, merged);
    }
    let default = all.remove(EVERY_PROFILE).unwrap_or_default();
    Ok(LimitTable {
        default,
        profiles: all,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_name_a_profile_and_its_limits() {
        let (p, l) = parse_flag("alice:live_sessions=10, running_turns=2").expect("valid");
        assert_eq!(p, "alice");
        assert_eq!(l.live_sessions, Some(10));
        assert_eq!(l.running_turns, Some(2));
        assert_eq!(l.connections, None);
        for bad in [
            "alice",
            ":connections=1",
            "alice:",
            "alice:connections",
            "alice:connections=-1",
            "alice:connection=1",
        ] {
            assert!(parse_flag(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_flag_replaces_the_files_limits_one_by_one_and_star_is_the_default() {
        let mut file = HashMap::new();
        file.insert(
            "alice".to_string(),
            ProfileLimits {
                live_sessions: Some(5),
                connections: Some(3),
                ..Default::default()
            },
        );
        let t = table(
            &["alice:connections=1".into(), "*:requests_per_s=50".into()],
            file,
        )
        .expect("valid");
        assert_eq!(t.default.requests_per_s, Some(50));
        let alice = t.of("alice");
        assert_eq!(
            (alice.live_sessions, alice.connections, alice.requests_per_s),
            (Some(5), Some(1), Some(50))
        );
    }
}
