//! The handoff work queue (`handoff.*`): params and results.
//!
//! A handoff moves `pending → running → completed | failed` by
//! compare-and-set in the store; these types only carry the states.

use serde::{Deserialize, Serialize};

use super::Params;
use crate::ids::{HandoffId, SessionId};

wire_enum! {
    /// A handoff's state.
    pub enum HandoffState {
        Pending = "pending",
        Running = "running",
        Completed = "completed",
        Failed = "failed",
    }
}

/// `handoff.request`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandoffRequestParams {
    pub session_id: SessionId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    pub target: String,
}

impl Params for HandoffRequestParams {}

/// `handoff.claim`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandoffClaimParams {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    pub target: String,
}

impl Params for HandoffClaimParams {}

/// `handoff.complete`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandoffCompleteParams {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    pub handoff_id: HandoffId,
}

impl Params for HandoffCompleteParams {}

/// `handoff.fail`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandoffFailParams {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    pub handoff_id: HandoffId,
    pub error: String,
    /// Fail only a `pending` handoff; otherwise report its state unchanged.
    #[serde(default, deserialize_with = "super::de::null_default")]
    pub only_if_pending: bool,
}

impl Params for HandoffFailParams {}

/// `handoff.state`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandoffStateParams {
    pub session_id: SessionId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
}

impl Params for HandoffStateParams {}

/// `handoff.request`'s result (state is `pending`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandoffRequestResult {
    pub handoff_id: HandoffId,
    pub state: HandoffState,
}

/// The handoff a claimer now owns (state is `running`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimedHandoff {
    pub handoff_id: HandoffId,
    pub session_id: SessionId,
    pub target: String,
    pub state: HandoffState,
}

/// `handoff.claim`: `null` when nothing is pending for the target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandoffClaimResult {
    pub handoff: Option<ClaimedHandoff>,
}

/// `handoff.complete`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandoffCompleteResult {
    pub state: HandoffState,
}

/// `handoff.fail`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandoffFailResult {
    pub failed: bool,
    pub state: HandoffState,
}

/// A session's latest handoff.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandoffInfo {
    pub handoff_id: HandoffId,
    pub session_id: SessionId,
    pub target: String,
    pub state: HandoffState,
    pub error: Option<String>,
}

/// `handoff.state`: `null` when the session never had a handoff.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandoffStateResult {
    pub handoff: Option<HandoffInfo>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::de::DeserializeOwned;
    use serde_json::{json, Value};

    fn round_trip<T>(v: &T, expected: Value)
    where
        T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug,
    {
        assert_eq!(serde_json::to_value(v).unwrap(), expected);
        let back: T = serde_json::from_str(&serde_json::to_string(v).unwrap()).unwrap();
        assert_eq!(&back, v);
    }

    #[test]
    fn states() {
        assert_eq!(HandoffState::ALL.len(), 4);
        for s in HandoffState::ALL {
            assert_eq!(HandoffState::parse(s.as_str()), Some(*s));
            assert_eq!(s.as_str().parse::<HandoffState>(), Ok(*s));
            assert_eq!(serde_json::to_value(s).unwrap(), json!(s.as_str()));
        }
        assert_eq!(HandoffState::Completed.to_string(), "completed");
        assert!(serde_json::from_str::<HandoffState>(r#""done""#).is_err());
    }

    #[test]
    fn params_round_trip() {
        round_trip(
            &HandoffRequestParams {
                session_id: "s_1".into(),
                profile: Some("p".into()),
                target: "phone".into(),
            },
            json!({"session_id":"s_1","profile":"p","target":"phone"}),
        );
        round_trip(
            &HandoffClaimParams {
                profile: None,
                target: "phone".into(),
            },
            json!({"target":"phone"}),
        );
        round_trip(
            &HandoffCompleteParams {
                profile: None,
                handoff_id: "h_1".into(),
            },
            json!({"handoff_id":"h_1"}),
        );
        round_trip(
            &HandoffFailParams {
                profile: None,
                handoff_id: "h_1".into(),
                error: "boom".into(),
                only_if_pending: true,
            },
            json!({"handoff_id":"h_1","error":"boom","only_if_pending":true}),
        );
        round_trip(
            &HandoffStateParams {
                session_id: "s_1".into(),
                profile: None,
            },
            json!({"session_id":"s_1"}),
        );
        let d: HandoffFailParams =
            serde_json::from_value(json!({"handoff_id":"h_1","error":"e","only_if_pending":null}))
                .unwrap();
        assert!(!d.only_if_pending);
    }

    #[test]
    fn results_round_trip() {
        round_trip(
            &HandoffRequestResult {
                handoff_id: "h_1".into(),
                state: HandoffState::Pending,
            },
            json!({"handoff_id":"h_1","state":"pending"}),
        );
        round_trip(
            &HandoffClaimResult {
                handoff: Some(ClaimedHandoff {
                    handoff_id: "h_1".into(),
                    session_id: "s_1".into(),
                    target: "phone".into(),
                    state: HandoffState::Running,
                }),
            },
            json!({"handoff":{"handoff_id":"h_1","session_id":"s_1","target":"phone","state":"running"}}),
        );
        round_trip(
            &HandoffClaimResult { handoff: None },
            json!({"handoff": null}),
        );
        round_trip(
            &HandoffCompleteResult {
                state: HandoffState::Completed,
            },
            json!({"state":"completed"}),
        );
        round_trip(
            &HandoffFailResult {
                failed: false,
                state: HandoffState::Running,
            },
            json!({"failed":false,"state":"running"}),
        );
        round_trip(
            &HandoffStateResult {
                handoff: Some(HandoffInfo {
                    handoff_id: "h_1".into(),
                    session_id: "s_1".into(),
                    target: "phone".into(),
                    state: HandoffState::Failed,
                    error: Some("boom".into()),
                }),
            },
            json!({"handoff":{"handoff_id":"h_1","session_id":"s_1","target":"phone",
                              "state":"failed","error":"boom"}}),
        );
        round_trip(
            &HandoffInfo {
                handoff_id: "h_2".into(),
                session_id: "s_1".into(),
                target: "t".into(),
                state: HandoffState::Pending,
                error: None,
            },
            json!({"handoff_id":"h_2","session_id":"s_1","target":"t","state":"pending","error":null}),
        );
        round_trip(
            &HandoffStateResult { handoff: None },
            json!({"handoff": null}),
        );
    }
}
