//! What one profile may hold of the gateway at once: the limits an
//! operator configures per profile, which a signed token may override for
//! the connections it opens. `None` is "no limit of this kind".
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

#[cfg(test)]
mod tests {
    use super::*;

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
