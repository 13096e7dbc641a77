//! Results of `gateway.ping` and `session.events.stats`.

use serde::{Deserialize, Serialize};

use crate::ids::{SessionId, TraceId, TurnId};

/// `gateway.ping`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PingResult {
    pub ok: bool,
}

/// The replay rings' footprint (in-memory copies of recent durable events).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RingStats {
    pub sessions: u64,
    pub events: u64,
    pub bytes: u64,
}

/// A turn running now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ActiveTurnStat {
    pub session_id: SessionId,
    pub turn_id: TurnId,
    pub trace_id: TraceId,
    pub elapsed_s: f64,
    pub host_id: u32,
}

/// A compute-host slot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostStat {
    pub host_id: u32,
    /// `null` while the slot has no process.
    pub pid: Option<u32>,
    /// e.g. `starting`, `up`, `down`.
    pub state: String,
    pub active_turns: u32,
    pub restarts: u32,
}

/// What peer outboxes did under pressure since the gateway started (1.8).
/// Process-wide: unlike the rest of the stats these are not per profile.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutboxStats {
    /// Deltas merged into the delta queued before them.
    pub coalesced: u64,
    /// Transient frames dropped because an outbox was full.
    pub dropped: u64,
    /// Peers closed with 1013 "slow consumer".
    pub slow_consumer_closes: u64,
}

/// `session.events.stats` (covers only the caller's profile).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatsResult {
    pub sessions_live: u64,
    pub peers: u64,
    pub ring: RingStats,
    pub active_turns: Vec<ActiveTurnStat>,
    pub hosts: Vec<HostStat>,
    /// Absent from older gateways' replies, hence the default.
    #[serde(default)]
    pub outbox: OutboxStats,
    /// On a cluster, the node that answered: `active_turns` and `hosts`
    /// are its own (the turns of the sessions it owns). Omitted on a single
    /// gateway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ping_round_trip() {
        let p = PingResult { ok: true };
        assert_eq!(serde_json::to_string(&p).unwrap(), r#"{"ok":true}"#);
        assert_eq!(
            serde_json::from_str::<PingResult>(r#"{"ok":true}"#).unwrap(),
            p
        );
    }

    #[test]
    fn stats_round_trip() {
        let s = StatsResult {
            sessions_live: 2,
            peers: 3,
            ring: RingStats {
                sessions: 2,
                events: 40,
                bytes: 4096,
            },
            active_turns: vec![ActiveTurnStat {
                session_id: "s_1".into(),
                turn_id: "t_1".into(),
                trace_id: "3f9c2a1b7d4e".into(),
                elapsed_s: 1.5,
                host_id: 0,
            }],
            hosts: vec![
                HostStat {
                    host_id: 0,
                    pid: Some(1234),
                    state: "up".into(),
                    active_turns: 1,
                    restarts: 0,
                },
                HostStat {
                    host_id: 1,
                    pid: None,
                    state: "down".into(),
                    active_turns: 0,
                    restarts: 3,
                },
            ],
            outbox: OutboxStats {
                coalesced: 5,
                dropped: 1,
                slow_consumer_closes: 2,
            },
            node_id: None,
        };
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(
            v,
            json!({"sessions_live":2,"peers":3,"ring":{"sessions":2,"events":40,"bytes":4096},
                "active_turns":[{"session_id":"s_1","turn_id":"t_1","trace_id":"3f9c2a1b7d4e",
                                 "elapsed_s":1.5,"host_id":0}],
                "hosts":[{"host_id":0,"pid":1234,"state":"up","active_turns":1,"restarts":0},
                         {"host_id":1,"pid":null,"state":"down","active_turns":0,"restarts":3}],
                "outbox":{"coalesced":5,"dropped":1,"slow_consumer_closes":2}})
        );
        let back: StatsResult = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(back, s);
    }
}
