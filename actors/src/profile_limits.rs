//! What one profile may hold of the gateway at once: the limits an
//! operator configures per profile. `None` is "no limit of this kind". A
//! signed token's `limits` claim has the same shape but is the token's own
//! (`registry/ledger.rs`, `TokenLimits`): it never changes its profile's.
//!
//! This file is only the shape both sides agree on: the gateway's
//! configuration and a token's claims produce it, the actors enforce it.

use serde::Deserialize;

/// Per-profile limits; every field is optional.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileLimits {
    /// Sessions live (in memory, with or without peers) at once.
    pub live_sessions: Option<u32>,
    /// Turns running at once, across the profile's sessions.
    pub running_turns: Option<u32>,
    /// Turns queued at once, across the profile's sessions.
    pub queued_turns: Option<u32>,
    /// Requests per second, across all of the profile's connections.
    pub requests_per_s: Option<u32>,
    /// Connections open at once.
    pub connections: Option<u32>,
}

impl ProfileLimits {
    /// These limits, with each one `over` sets replacing this one's.
    pub fn overridden_by(&self, over: &ProfileLimits) -> ProfileLimits {
        ProfileLimits {
            live_sessions: over.live_sessions.or(self.live_sessions),
            running_turns: over.running_turns.or(self.running_turns),
            queued_turns: over.queued_turns.or(self.queued_turns),
            requests_per_s: over.requests_per_s.or(self.requests_per_s),
            connections: over.connections.or(self.connections),
        }
    }
}

/// The limits an operator configured: a default for every profile, and
/// per-profile tables that replace the default's fields they set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LimitTable {
    pub default: ProfileLimits,
    pub profiles: std::collections::HashMap<String, ProfileLimits>,
}

impl LimitTable {
    /// What `profile` may hold: the default, and its own table over it.
    pub fn of(&self, profile: &str) -> ProfileLimits {
        match self.profiles.get(profile) {
            Some(own) => self.default.overridden_by(own),
            None => self.default.clone(),
        }
    }

    /// Whether no profile has any limit (the ledger then counts nothing
    /// it would never refuse).
    pub fn is_empty(&self) -> bool {
        self.default == ProfileLimits::default()
            && self
                .profiles
                .values()
                .all(|l| *l == ProfileLimits::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_profile_table_sits_on_the_default() {
        let mut table = LimitTable {
            default: ProfileLimits {
                live_sessions: Some(100),
                connections: Some(10),
                ..Default::default()
            },
            ..Default::default()
        };
        table.profiles.insert(
            "small".into(),
            ProfileLimits {
                live_sessions: Some(5),
                ..Default::default()
            },
        );
        let other = table.of("other");
        assert_eq!(
            (other.live_sessions, other.connections),
            (Some(100), Some(10))
        );
        let small = table.of("small");
        assert_eq!(
            (small.live_sessions, small.connections),
            (Some(5), Some(10))
        );
        assert!(!table.is_empty());
        assert!(LimitTable::default().is_empty());
    }

    #[test]
    fn an_override_replaces_only_what_it_sets() {
        let base = ProfileLimits {
            live_sessions: Some(10),
            running_turns: Some(2),
            ..Default::default()
        };
        let over = ProfileLimits {
            running_turns: Some(1),
            connections: Some(3),
            ..Default::default()
        };
        let got = base.overridden_by(&over);
        assert_eq!(got.live_sessions, Some(10));
        assert_eq!(got.running_turns, Some(1));
        assert_eq!(got.connections, Some(3));
        assert_eq!(got.queued_turns, None);
    }

    #[test]
    fn unknown_limit_names_are_refused() {
        let r: Result<ProfileLimits, _> = serde_json::from_str(r#"{"live_session": 3}"#);
        assert!(r.is_err());
    }
}
