//! Retention settings: the `--retain-*` flags (the default rules), the
//! config file's `[retention]` table (the same keys) and its
//! `[profiles.NAME.retention]` tables (a profile's overrides). What the
//! rules do is `tether_actors`' `retention.rs`; docs/RELIABILITY.md,
//! "Retention", is the operator's page.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::bail;
use clap::parser::ValueSource;
use clap::ArgMatches;
use serde::Deserialize;
use tether_actors::{RetentionConfig, RetentionRules};

/// The default retention rules; every rule is off unless given.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct RetentionArgs {
    /// Erase sessions closed longer ago than this, in seconds.
    #[arg(long, env = "TETHER_RETAIN_CLOSED_S")]
    pub retain_closed_s: Option<f64>,
    /// Close parked sessions idle longer than this, in seconds (they are
    /// then erased by --retain-closed-s).
    #[arg(long, env = "TETHER_RETAIN_PARKED_S")]
    pub retain_parked_s: Option<f64>,
    /// Trim a session's events older than this, in seconds (never its
    /// current history segment).
    #[arg(long, env = "TETHER_RETAIN_EVENTS_S")]
    pub retain_events_s: Option<f64>,
    /// Trim all but this many of a session's latest events (never its
    /// current history segment).
    #[arg(long, env = "TETHER_RETAIN_MAX_EVENTS")]
    pub retain_max_events: Option<u64>,
    /// Time between two retention sweeps, in seconds.
    #[arg(long, env = "TETHER_RETENTION_INTERVAL_S", default_value_t = 60.0)]
    pub retention_interval_s: f64,
    /// A profile's overrides (`[profiles.NAME.retention]` of the file).
    #[arg(skip)]
    pub profiles: HashMap<String, FileRetention>,
}

/// `[retention]` and `[profiles.NAME.retention]` in the config file: the
/// flags' names without their `retain_` prefix.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileRetention {
    closed_s: Option<f64>,
    parked_s: Option<f64>,
    events_s: Option<f64>,
    max_events: Option<u64>,
    /// Only in `[retention]`.
    interval_s: Option<f64>,
}

impl RetentionArgs {
    /// Fills in, from the file, what flags and env left unset.
    pub(super) fn apply_file(
        &mut self,
        file: Option<FileRetention>,
        profiles: HashMap<String, FileRetention>,
        matches: &ArgMatches,
    ) {
        let from_default = |id: &str| {
            !matches!(
                matches.value_source(id),
                Some(ValueSource::CommandLine) | Some(ValueSource::EnvVariable)
            )
        };
        if let Some(f) = file {
            self.retain_closed_s = self.retain_closed_s.or(f.closed_s);
            self.retain_parked_s = self.retain_parked_s.or(f.parked_s);
            self.retain_events_s = self.retain_events_s.or(f.events_s);
            self.retain_max_events = self.retain_max_events.or(f.max_events);
            if let Some(v) = f.interval_s {
                if from_default("retention_interval_s") {
                    self.retention_interval_s = v;
                }
            }
        }
        self.profiles = profiles;
    }

    /// The gateway's retention configuration; a period that is not a
    /// positive number of seconds is a usage error.
    pub fn config(&self) -> anyhow::Result<RetentionConfig> {
        let default = rules(
            "--retain",
            self.retain_closed_s,
            self.retain_parked_s,
            self.retain_events_s,
            self.retain_max_events,
        )?;
        let mut profiles = HashMap::new();
        for (name, f) in &self.profiles {
            if f.interval_s.is_some() {
                bail!("[profiles.{name}.retention]: interval_s is only for [retention]");
            }
            let r = rules(
                &format!("[profiles.{name}.retention]"),
                f.closed_s,
                f.parked_s,
                f.events_s,
                f.max_events,
            )?;
            profiles.insert(name.clone(), r);
        }
        Ok(RetentionConfig {
            default,
            profiles,
            interval: seconds("--retention-interval-s", self.retention_interval_s)?,
            ..RetentionConfig::default()
        })
    }
}

fn rules(
    what: &str,
    closed: Option<f64>,
    parked: Option<f64>,
    events: Option<f64>,
    max_events: Option<u64>,
) -> anyhow::Result<RetentionRules> {
    let period =
        |name: &str, v: Option<f64>| v.map(|s| seconds(&format!("{what} {name}"), s)).transpose();
    Ok(RetentionRules {
        closed_after: period("closed", closed)?,
        parked_after: period("parked", parked)?,
        events_after: period("events", events)?,
        max_events,
    })
}

fn seconds(what: &str, s: f64) -> anyhow::Result<Duration> {
    if !(s.is_finite() && s > 0.0) {
        bail!("{what}: {s} is not a positive number of seconds");
    }
    Duration::try_from_secs_f64(s).map_err(|e| anyhow::anyhow!("{what}: {e}"))
}
