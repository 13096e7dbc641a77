//! Params of the session methods (`session.*`, `prompt.submit`).
//!
//! Every struct ignores unknown fields (clients may be newer than we are)
//! and treats `null` like a missing field. Each session-naming one carries
//! `profile`, which scopes the call when the gateway runs without tokens.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{de, Params};
use crate::error::RpcError;
use crate::ids::SessionId;

/// `session.create`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CreateParams {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// Close the session as soon as it has no attached peer.
    #[serde(default, deserialize_with = "de::null_default")]
    pub close_on_disconnect: bool,
    /// Attach the caller (it then receives every event from seq 1).
    #[serde(default = "de::yes", deserialize_with = "de::null_true")]
    pub attach: bool,
    /// Seed transcript, persisted with the session in one transaction.
    #[serde(default, deserialize_with = "de::null_default")]
    pub messages: Vec<SeedMessage>,
    /// A per-session engine pin, passed to the compute host as config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<Map<String, Value>>,
    #[serde(default, deserialize_with = "de::null_default")]
    pub follow_profile_config: bool,
    /// How the caller, once attached, wants deltas delivered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery: Option<Delivery>,
}

impl Params for CreateParams {
    fn validate(&self) -> Result<(), RpcError> {
        self.delivery.as_ref().map_or(Ok(()), Delivery::validate)
    }
}

/// `delivery` of `session.create` / `session.resume` (PROTOCOL Part 4,
/// "Delivery budget"): for this peer and this session only.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delivery {
    /// How long a delta may wait for the deltas that continue it, so that
    /// they go out as one frame; 0 (the default) merges only what is
    /// already waiting. At most [`Delivery::MAX_DELAY_MS`].
    #[serde(default, deserialize_with = "de::null_default")]
    pub max_delay_ms: u32,
}

impl Delivery {
    /// The largest budget a client may ask for.
    pub const MAX_DELAY_MS: u32 = 1000;

    fn validate(&self) -> Result<(), RpcError> {
        if self.max_delay_ms <= Self::MAX_DELAY_MS {
            return Ok(());
        }
        Err(RpcError::invalid_params(
            "delivery.max_delay_ms",
            format!(
                "{} is out of range 0..={}",
                self.max_delay_ms,
                Self::MAX_DELAY_MS
            ),
        ))
    }
}

impl Default for CreateParams {
    fn default() -> Self {
        Self {
            title: None,
            profile: None,
            close_on_disconnect: false,
            attach: true,
            messages: Vec::new(),
            engine: None,
            follow_profile_config: false,
            delivery: None,
        }
    }
}

wire_enum! {
    /// The role of a seed message. Tool messages cannot be seeded: they only
    /// arise from a host's `tool.complete`.
    pub enum SeedRole {
        User = "user",
        Assistant = "assistant",
        System = "system",
    }
}

/// One entry of `session.create`'s seed transcript.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeedMessage {
    pub role: SeedRole,
    pub text: String,
}

/// `session.resume`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResumeParams {
    pub session_id: SessionId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// The client's watermark; when given, the reply carries the missed events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_seen: Option<u64>,
    #[serde(default, deserialize_with = "de::null_default")]
    pub omit_messages: bool,
    #[serde(default = "de::yes", deserialize_with = "de::null_true")]
    pub attach: bool,
    /// How the caller, once attached, wants deltas delivered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery: Option<Delivery>,
}

impl Params for ResumeParams {
    fn validate(&self) -> Result<(), RpcError> {
        self.delivery.as_ref().map_or(Ok(()), Delivery::validate)
    }
}

/// `session.detach`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DetachParams {
    pub session_id: SessionId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
}

impl Params for DetachParams {}

/// `session.close`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CloseParams {
    pub session_id: SessionId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
}

impl Params for CloseParams {}

/// `session.delete`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeleteParams {
    pub session_id: SessionId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// The gateway's own, never a client's (a peer drops it): the life of
    /// the id a delete was decided on (its session's `created_at_ms`), so
    /// that retention's erase of a closed session it listed never takes a
    /// new session created under the same id since. Carried with the
    /// request when a cluster forwards it to the session's owner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub life: Option<i64>,
}

impl Params for DeleteParams {}

/// `session.interrupt`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InterruptParams {
    pub session_id: SessionId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
}

impl Params for InterruptParams {}

/// `session.list`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListParams {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// Page size, 1..=500 (default 50).
    #[serde(default = "de::list_limit", deserialize_with = "de::null_list_limit")]
    pub limit: u32,
    /// Opaque cursor from a previous page's `next_cursor`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
    #[serde(default, deserialize_with = "de::null_default")]
    pub include_closed: bool,
}

impl Default for ListParams {
    fn default() -> Self {
        Self {
            profile: None,
            limit: de::LIST_LIMIT_DEFAULT,
            cursor: None,
            include_closed: false,
        }
    }
}

impl Params for ListParams {
    fn validate(&self) -> Result<(), RpcError> {
        check_range("limit", self.limit, de::LIST_LIMIT_MAX)
    }
}

/// `session.branch`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BranchParams {
    pub session_id: SessionId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// Copy events up to and including this seq (default: everything).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upto_seq: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
}

impl Params for BranchParams {}

/// `prompt.submit`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubmitParams {
    pub session_id: SessionId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    pub text: String,
    /// A turn this prompt replaces (a regenerated answer, an edited
    /// prompt): that turn and everything after it leave the history.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaces: Option<crate::ids::TurnId>,
    /// What this prompt does to a turn already running or queued
    /// (default `enqueue`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub multitask: Option<Multitask>,
    /// With `multitask: interrupt`: the queued prompts end `dequeued`
    /// too, instead of staying queued ahead of this one.
    #[serde(
        default,
        deserialize_with = "de::null_default",
        skip_serializing_if = "std::ops::Not::not"
    )]
    pub drop_queued: bool,
    /// A second prompt with the same key within the dedupe window is
    /// answered with the first one's turn instead of starting another.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dedupe_key: Option<String>,
}

/// The longest `dedupe_key`, in bytes.
pub const MAX_DEDUPE_KEY_BYTES: usize = 128;

wire_enum! {
    /// `prompt.submit`'s `multitask`: what a prompt does to the turn
    /// running and the prompts queued when it comes.
    pub enum Multitask {
        /// Wait behind them (the default).
        Enqueue = "enqueue",
        /// Fail with 4091 if any runs or waits; nothing is written.
        Reject = "reject",
        /// End the running turn `interrupted` / `superseded`; the queued
        /// prompts stay queued (unless `drop_queued`) and this one waits
        /// behind them.
        Interrupt = "interrupt",
        /// As `interrupt`, the queued prompts dropped, and the running
        /// turn (with what came after it) left out of the history from
        /// this prompt on, as `replaces` does.
        Rollback = "rollback",
    }
}

impl SubmitParams {
    /// The policy, its default filled in.
    pub fn policy(&self) -> Multitask {
        self.multitask.unwrap_or(Multitask::Enqueue)
    }
}

impl Params for SubmitParams {
    fn validate(&self) -> Result<(), RpcError> {
        if let Some(key) = &self.dedupe_key {
            if key.is_empty() || key.len() > MAX_DEDUPE_KEY_BYTES {
                return Err(RpcError::invalid_params(
                    "dedupe_key",
                    format!("must be 1 to {MAX_DEDUPE_KEY_BYTES} bytes"),
                ));
            }
        }
        let policy = self.policy();
        if self.drop_queued && policy != Multitask::Interrupt {
            return Err(RpcError::invalid_params(
                "drop_queued",
                "only with multitask `interrupt` (`rollback` always drops the queue)",
            ));
        }
        if self.replaces.is_some() && matches!(policy, Multitask::Interrupt | Multitask::Rollback) {
            return Err(RpcError::invalid_params(
                "multitask",
                "a prompt that replaces a turn waits for none: `enqueue` or `reject` only",
            ));
        }
        Ok(())
    }
}

/// `session.compress`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompressParams {
    pub session_id: SessionId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// What the summary should keep, passed to the host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub focus: Option<String>,
}

impl Params for CompressParams {}

/// `session.rename`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RenameParams {
    pub session_id: SessionId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// The new title (its bound in bytes is the gateway's `--max-title-bytes`).
    pub title: String,
}

impl Params for RenameParams {}

/// `session.events.since`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SinceParams {
    pub session_id: SessionId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// Required: return events with `seq > last_seen`.
    pub last_seen: u64,
    /// Page size, 1..=10000 (default 1000).
    #[serde(default = "de::since_limit", deserialize_with = "de::null_since_limit")]
    pub limit: u32,
}

impl Params for SinceParams {
    fn validate(&self) -> Result<(), RpcError> {
        check_range("limit", self.limit, de::SINCE_LIMIT_MAX)
    }
}

/// `1..=max`, else -32602 naming `field`.
fn check_range(field: &str, value: u32, max: u32) -> Result<(), RpcError> {
    if (1..=max).contains(&value) {
        Ok(())
    } else {
        Err(RpcError::invalid_params(
            field,
            format!("{value} is out of range 1..={max}"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::de::DeserializeOwned;
    use serde_json::json;

    /// Serializes, checks the JSON, deserializes and checks equality.
    fn round_trip<T>(v: &T, expected: Value)
    where
        T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug,
    {
        let json = serde_json::to_value(v).unwrap();
        assert_eq!(json, expected);
        let back: T = serde_json::from_value(json).unwrap();
        assert_eq!(&back, v);
        let text = serde_json::to_string(v).unwrap();
        let back: T = serde_json::from_str(&text).unwrap();
        assert_eq!(&back, v);
    }

    #[test]
    fn create_defaults() {
        let p: CreateParams = serde_json::from_value(json!({})).unwrap();
        assert_eq!(p, CreateParams::default());
        assert!(p.attach);
        assert!(!p.close_on_disconnect);
        let nulls: CreateParams = serde_json::from_value(json!({
            "title": null, "profile": null, "close_on_disconnect": null, "attach": null,
            "messages": null, "engine": null, "follow_profile_config": null, "extra": [1]
        }))
        .unwrap();
        assert_eq!(nulls, CreateParams::default());
    }

    #[test]
    fn create_round_trip() {
        let mut engine = Map::new();
        engine.insert("model".into(), json!("m1"));
        let p = CreateParams {
            title: Some("t".into()),
            profile: Some("work".into()),
            close_on_disconnect: true,
            attach: false,
            messages: vec![
                SeedMessage {
                    role: SeedRole::User,
                    text: "hi".into(),
                },
                SeedMessage {
                    role: SeedRole::Assistant,
                    text: "hello".into(),
                },
                SeedMessage {
                    role: SeedRole::System,
                    text: "be nice".into(),
                },
            ],
            engine: Some(engine),
            follow_profile_config: true,
            delivery: Some(Delivery { max_delay_ms: 50 }),
        };
        round_trip(
            &p,
            json!({"title":"t","profile":"work","close_on_disconnect":true,"attach":false,
                "messages":[{"role":"user","text":"hi"},{"role":"assistant","text":"hello"},
                            {"role":"system","text":"be nice"}],
                "engine":{"model":"m1"},"follow_profile_config":true,
                "delivery":{"max_delay_ms":50}}),
        );
        round_trip(
            &CreateParams::default(),
            json!({"close_on_disconnect":false,"attach":true,"messages":[],"follow_profile_config":false}),
        );
    }

    #[test]
    fn seed_role_strings() {
        for r in SeedRole::ALL {
            assert_eq!(SeedRole::parse(r.as_str()), Some(*r));
            assert_eq!(serde_json::to_value(r).unwrap(), json!(r.as_str()));
        }
        assert_eq!(SeedRole::parse("tool"), None);
        assert!("bot".parse::<SeedRole>().is_err());
    }

    #[test]
    fn resume_round_trip() {
        let p = ResumeParams {
            session_id: "s_1".into(),
            profile: None,
            last_seen: Some(7),
            omit_messages: true,
            attach: true,
            delivery: None,
        };
        round_trip(
            &p,
            json!({"session_id":"s_1","last_seen":7,"omit_messages":true,"attach":true}),
        );
        let d: ResumeParams = serde_json::from_value(json!({"session_id":"s_1"})).unwrap();
        assert!(d.attach && !d.omit_messages && d.last_seen.is_none());
    }

    #[test]
    fn simple_session_params_round_trip() {
        let with_profile = json!({"session_id":"s_1","profile":"p"});
        round_trip(
            &DetachParams {
                session_id: "s_1".into(),
                profile: Some("p".into()),
            },
            with_profile.clone(),
        );
        round_trip(
            &CloseParams {
                session_id: "s_1".into(),
                profile: Some("p".into()),
            },
            with_profile.clone(),
        );
        round_trip(
            &InterruptParams {
                session_id: "s_1".into(),
                profile: Some("p".into()),
            },
            with_profile,
        );
        round_trip(
            &SubmitParams {
                session_id: "s_1".into(),
                profile: None,
                text: "hello".into(),
                replaces: None,
                multitask: None,
                drop_queued: false,
                dedupe_key: None,
            },
            json!({"session_id":"s_1","text":"hello"}),
        );
        round_trip(
            &SubmitParams {
                session_id: "s_1".into(),
                profile: None,
                text: "again".into(),
                replaces: Some("t_1".into()),
                multitask: None,
                drop_queued: false,
                dedupe_key: None,
            },
            json!({"session_id":"s_1","text":"again","replaces":"t_1"}),
        );
        round_trip(
            &SubmitParams {
                session_id: "s_1".into(),
                profile: None,
                text: "instead".into(),
                replaces: None,
                multitask: Some(Multitask::Interrupt),
                drop_queued: true,
                dedupe_key: Some("k1".into()),
            },
            json!({"session_id":"s_1","text":"instead","multitask":"interrupt","drop_queued":true,"dedupe_key":"k1"}),
        );
        round_trip(
            &CompressParams {
                session_id: "s_1".into(),
                profile: None,
                focus: Some("names".into()),
            },
            json!({"session_id":"s_1","focus":"names"}),
        );
        round_trip(
            &BranchParams {
                session_id: "s_1".into(),
                profile: None,
                upto_seq: Some(3),
                title: Some("b".into()),
            },
            json!({"session_id":"s_1","upto_seq":3,"title":"b"}),
        );
    }

    #[test]
    fn list_round_trip_and_defaults() {
        let d: ListParams = serde_json::from_value(json!({"limit": null})).unwrap();
        assert_eq!(d, ListParams::default());
        assert_eq!(d.limit, 50);
        round_trip(
            &ListParams {
                profile: Some("p".into()),
                limit: 10,
                cursor: Some("c".into()),
                include_closed: true,
            },
            json!({"profile":"p","limit":10,"cursor":"c","include_closed":true}),
        );
        assert!(ListParams::default().validate().is_ok());
        let zero = ListParams {
            limit: 0,
            ..ListParams::default()
        };
        assert_eq!(zero.validate().unwrap_err().field(), Some("limit"));
        let big = ListParams {
            limit: 501,
            ..ListParams::default()
        };
        assert!(big.validate().is_err());
        let max = ListParams {
            limit: 500,
            ..ListParams::default()
        };
        assert!(max.validate().is_ok());
    }

    #[test]
    fn since_round_trip_and_defaults() {
        let d: SinceParams =
            serde_json::from_value(json!({"session_id":"s_1","last_seen":0})).unwrap();
        assert_eq!(d.limit, 1000);
        round_trip(
            &SinceParams {
                session_id: "s_1".into(),
                profile: None,
                last_seen: 41,
                limit: 10000,
            },
            json!({"session_id":"s_1","last_seen":41,"limit":10000}),
        );
        assert!(d.validate().is_ok());
        let over = SinceParams { limit: 10001, ..d };
        assert_eq!(over.validate().unwrap_err().code, -32602);
    }
}
