//! JSON-RPC error objects and tether's error codes (PROTOCOL 1.6).
//!
//! One `RpcError` type travels from wherever a request fails (validation
//! here, a session actor, the store) to the peer that asked, so the code,
//! message and `data` are decided once, at the failure, and echoed verbatim.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// The numeric codes of PROTOCOL 1.6. Negative ones are JSON-RPC's own.
pub mod codes {
    /// The frame is not JSON (the reply's id is null).
    pub const PARSE_ERROR: i64 = -32700;
    /// Not a request object, no method, empty batch, nesting too deep.
    pub const INVALID_REQUEST: i64 = -32600;
    /// No such method.
    pub const METHOD_NOT_FOUND: i64 = -32601;
    /// Wrong type, missing field or value out of range; `data.field` names it.
    pub const INVALID_PARAMS: i64 = -32602;
    /// A bug: logged with the request.
    pub const INTERNAL_ERROR: i64 = -32603;
    /// Unknown session, or one in another profile (indistinguishable).
    pub const SESSION_NOT_FOUND: i64 = 4001;
    /// The session is closed.
    pub const SESSION_CLOSED: i64 = 4002;
    /// A turn is running for an idle-only operation, or the queue is full.
    pub const SESSION_BUSY: i64 = 4009;
    /// `gateway.refresh_token` refused: the token is not valid, or names
    /// another profile. The connection keeps its current token.
    pub const TOKEN_REFUSED: i64 = 4003;
    /// The frame exceeds `max_frame_bytes` (id null, connection kept).
    pub const FRAME_TOO_LARGE: i64 = 4013;
    /// Too many requests (`data.retry_after_ms`).
    pub const RATE_LIMITED: i64 = 4029;
    /// Handoff state conflict or unknown handoff id.
    pub const HANDOFF_CONFLICT: i64 = 4090;
    /// `prompt.submit` with `multitask: reject` while a turn runs or waits.
    pub const TURN_IN_PROGRESS: i64 = 4091;
    /// A limit of the profile is reached (`data.limit` names it, `data.max`
    /// is its value, `data.retry_after_ms` where waiting helps).
    pub const PROFILE_LIMIT: i64 = 4290;
    /// The resume segment holds too many messages (`data.count`, `data.limit`).
    pub const RESUME_TOO_LARGE: i64 = 4130;
    /// No compute host could take the work.
    pub const HOST_UNAVAILABLE: i64 = 5019;
    /// Storage full; nothing was written.
    pub const STORAGE_FULL: i64 = 5070;
    /// Storage write failed; nothing was written.
    pub const STORAGE_WRITE_FAILED: i64 = 5071;
    /// Storage unavailable.
    pub const STORAGE_UNAVAILABLE: i64 = 5072;
    /// A request forwarded to another node (a cluster) whose outcome is
    /// unknown: it may have run. Read the session before retrying
    /// (`data.forward_id` names the forward).
    pub const OUTCOME_UNKNOWN: i64 = 5073;
}

/// A JSON-RPC error object: `{"code","message","data"?}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, thiserror::Error)]
#[error("{code}: {message}")]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl RpcError {
    /// An error with any code and message and no data.
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            data: None,
        }
    }

    /// Attaches `data` (replacing any previous data).
    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    /// -32700: the frame is not valid JSON.
    pub fn parse_error(detail: impl Into<String>) -> Self {
        Self::new(
            codes::PARSE_ERROR,
            format!("parse error: {}", detail.into()),
        )
    }

    /// -32600: the frame is JSON but not a valid request.
    pub fn invalid_request(detail: impl Into<String>) -> Self {
        Self::new(
            codes::INVALID_REQUEST,
            format!("invalid request: {}", detail.into()),
        )
    }

    /// -32601, naming the method so a client sees its typo.
    pub fn method_not_found(method: &str) -> Self {
        Self::new(
            codes::METHOD_NOT_FOUND,
            format!("method not found: {method}"),
        )
    }

    /// -32602 with `data.field` naming the offending field (a path such as
    /// `messages[1].role`), so a client can point at it without parsing text.
    pub fn invalid_params(field: &str, detail: impl Into<String>) -> Self {
        Self::new(
            codes::INVALID_PARAMS,
            format!("invalid params: {field}: {}", detail.into()),
        )
        .with_data(json!({ "field": field }))
    }

    /// -32603: a bug on our side.
    pub fn internal(detail: impl Into<String>) -> Self {
        Self::new(
            codes::INTERNAL_ERROR,
            format!("internal error: {}", detail.into()),
        )
    }

    /// Session not found (4001). Deliberately carries no detail: an unknown
    /// session and one of another profile must look the same.
    pub fn token_refused() -> Self {
        Self::new(
            codes::TOKEN_REFUSED,
            "token refused (not valid, or for another profile)",
        )
    }

    pub fn session_not_found() -> Self {
        Self::new(codes::SESSION_NOT_FOUND, "session not found")
    }

    /// Session closed (4002).
    pub fn session_closed() -> Self {
        Self::new(codes::SESSION_CLOSED, "session closed")
    }

    /// Session busy (4009).
    pub fn session_busy(detail: impl Into<String>) -> Self {
        Self::new(
            codes::SESSION_BUSY,
            format!("session busy: {}", detail.into()),
        )
    }

    /// A turn is running or queued (4091): a `multitask: reject` prompt
    /// is refused and nothing is written.
    pub fn turn_in_progress() -> Self {
        Self::new(
            codes::TURN_IN_PROGRESS,
            "a turn is running or queued (multitask: reject)",
        )
    }

    /// Frame too large (4013; sent with id null, the connection stays open).
    pub fn frame_too_large(limit: usize) -> Self {
        Self::new(
            codes::FRAME_TOO_LARGE,
            format!("frame too large (limit {limit} bytes)"),
        )
        .with_data(json!({ "limit": limit }))
    }

    /// Resume too large (4130) with `data.count` and `data.limit`.
    pub fn resume_too_large(count: u64, limit: u64) -> Self {
        Self::new(
            codes::RESUME_TOO_LARGE,
            format!("resume too large: {count} messages (limit {limit}); retry with omit_messages"),
        )
        .with_data(json!({ "count": count, "limit": limit }))
    }

    /// No compute host available (5019).
    pub fn host_unavailable() -> Self {
        Self::new(codes::HOST_UNAVAILABLE, "no compute host available")
    }

    /// Rate limited (4029) with `data.retry_after_ms`.
    pub fn rate_limited(retry_after_ms: u64) -> Self {
        Self::new(codes::RATE_LIMITED, "rate limited")
            .with_data(json!({ "retry_after_ms": retry_after_ms }))
    }

    /// A profile limit reached (4290): `data.limit` names it, `data.max`
    /// says how much the profile may hold, and `data.retry_after_ms` how
    /// long until a retry can pass, where waiting alone helps.
    pub fn profile_limit(limit: &str, max: u32, retry_after_ms: Option<u64>) -> Self {
        let mut data = json!({ "limit": limit, "max": max });
        if let Some(ms) = retry_after_ms {
            data["retry_after_ms"] = json!(ms);
        }
        Self::new(codes::PROFILE_LIMIT, "profile limit reached").with_data(data)
    }

    /// Handoff conflict (4090).
    pub fn handoff_conflict(detail: impl Into<String>) -> Self {
        Self::new(
            codes::HANDOFF_CONFLICT,
            format!("handoff conflict: {}", detail.into()),
        )
    }

    /// Storage full (5070).
    pub fn storage_full() -> Self {
        Self::new(codes::STORAGE_FULL, "storage full")
    }

    /// Storage write failed (5071).
    pub fn storage_write_failed(detail: impl Into<String>) -> Self {
        Self::new(
            codes::STORAGE_WRITE_FAILED,
            format!("storage write failed: {}", detail.into()),
        )
    }

    /// Storage unavailable (5072).
    pub fn storage_unavailable(detail: impl Into<String>) -> Self {
        Self::new(
            codes::STORAGE_UNAVAILABLE,
            format!("storage unavailable: {}", detail.into()),
        )
    }

    /// Outcome unknown (5073): a request forwarded to the session's owner
    /// that may or may not have run; `data.forward_id` names the forward.
    pub fn outcome_unknown(detail: impl Into<String>, forward_id: &str) -> Self {
        Self::new(
            codes::OUTCOME_UNKNOWN,
            format!(
                "outcome unknown: {}; read the session before retrying",
                detail.into()
            ),
        )
        .with_data(json!({ "forward_id": forward_id }))
    }

    /// `data.field`, when this is an invalid-params error that names one.
    pub fn field(&self) -> Option<&str> {
        self.data.as_ref()?.get("field")?.as_str()
    }
}

/// A string that is not one of a wire enum's values (from `FromStr`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {kind} `{value}`")]
pub struct UnknownValue {
    /// The enum's type name, e.g. `SessionStatus`.
    pub kind: &'static str,
    /// The rejected string.
    pub value: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_match_protocol() {
        assert_eq!(codes::PARSE_ERROR, -32700);
        assert_eq!(codes::INVALID_REQUEST, -32600);
        assert_eq!(codes::METHOD_NOT_FOUND, -32601);
        assert_eq!(codes::INVALID_PARAMS, -32602);
        assert_eq!(codes::INTERNAL_ERROR, -32603);
        assert_eq!(codes::SESSION_NOT_FOUND, 4001);
        assert_eq!(codes::SESSION_CLOSED, 4002);
        assert_eq!(codes::SESSION_BUSY, 4009);
        assert_eq!(codes::FRAME_TOO_LARGE, 4013);
        assert_eq!(codes::RATE_LIMITED, 4029);
        assert_eq!(codes::HANDOFF_CONFLICT, 4090);
        assert_eq!(codes::RESUME_TOO_LARGE, 4130);
        assert_eq!(codes::HOST_UNAVAILABLE, 5019);
        assert_eq!(codes::STORAGE_FULL, 5070);
        assert_eq!(codes::STORAGE_WRITE_FAILED, 5071);
        assert_eq!(codes::STORAGE_UNAVAILABLE, 5072);
        assert_eq!(codes::OUTCOME_UNKNOWN, 5073);
    }

    #[test]
    fn constructors_set_code_and_data() {
        assert_eq!(RpcError::parse_error("x").code, -32700);
        assert_eq!(RpcError::invalid_request("x").code, -32600);
        let e = RpcError::method_not_found("foo.bar");
        assert_eq!(e.code, -32601);
        assert!(e.message.contains("foo.bar"));
        let e = RpcError::invalid_params("messages[1].role", "bad");
        assert_eq!(e.code, -32602);
        assert_eq!(e.data, Some(json!({"field": "messages[1].role"})));
        assert_eq!(e.field(), Some("messages[1].role"));
        assert_eq!(RpcError::internal("x").code, -32603);
        assert_eq!(RpcError::session_not_found().code, 4001);
        assert_eq!(RpcError::session_not_found().data, None);
        assert_eq!(RpcError::session_closed().code, 4002);
        assert_eq!(RpcError::session_busy("queue full").code, 4009);
        let e = RpcError::frame_too_large(1024);
        assert_eq!(e.code, 4013);
        let e = RpcError::resume_too_large(20001, 20000);
        assert_eq!(e.code, 4130);
        assert_eq!(e.data, Some(json!({"count": 20001, "limit": 20000})));
        assert_eq!(RpcError::host_unavailable().code, 5019);
        let e = RpcError::rate_limited(250);
        assert_eq!(e.code, 4029);
        assert_eq!(e.data, Some(json!({"retry_after_ms": 250})));
        assert_eq!(RpcError::handoff_conflict("x").code, 4090);
        assert_eq!(RpcError::storage_full().code, 5070);
        assert_eq!(RpcError::storage_write_failed("x").code, 5071);
        assert_eq!(RpcError::storage_unavailable("x").code, 5072);
        let e = RpcError::outcome_unknown("x", "f_1");
        assert_eq!(e.code, 5073);
        assert_eq!(e.data, Some(json!({"forward_id": "f_1"})));
        assert_eq!(RpcError::session_busy("x").field(), None);
    }

    #[test]
    fn serde_round_trip_and_shape() {
        let e = RpcError::new(4001, "session not found");
        let s = serde_json::to_string(&e).unwrap();
        assert_eq!(s, r#"{"code":4001,"message":"session not found"}"#);
        assert_eq!(serde_json::from_str::<RpcError>(&s).unwrap(), e);

        let e = RpcError::invalid_params("text", "missing field `text`");
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(v["data"], json!({"field": "text"}));
        let back: RpcError = serde_json::from_value(v).unwrap();
        assert_eq!(back, e);
        assert_eq!(
            RpcError::new(1, "m").to_string(),
            "1: m",
            "Display is code: message"
        );
    }
}
