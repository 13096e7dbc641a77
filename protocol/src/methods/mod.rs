//! The client methods of PROTOCOL 1.4: the typed [`Request`], its params and
//! results, and the validation that turns a method name plus a params object
//! into a `Request` or a -32601/-32602 error.
//!
//! Validation happens here, once, so the actors only ever see well-formed
//! requests, and every peer (WebSocket, stdio, HTTP) reports a bad field the
//! same way: `data.field` holds its path, e.g. `messages[1].role`.

mod de;
mod handoff;
mod misc;
mod results;
mod session;

pub use handoff::*;
pub use misc::*;
pub use results::*;
pub use session::*;

use serde::de::{DeserializeOwned, Deserializer};
use serde_json::Value;

use crate::error::RpcError;
use crate::ids::{HandoffId, SessionId};

/// Every method name, in the order of PROTOCOL 1.4.
pub const METHODS: &[&str] = &[
    "gateway.ping",
    "session.create",
    "session.resume",
    "session.detach",
    "session.list",
    "session.close",
    "session.branch",
    "prompt.submit",
    "session.interrupt",
    "session.compress",
    "session.events.since",
    "session.events.stats",
    "handoff.request",
    "handoff.claim",
    "handoff.complete",
    "handoff.fail",
    "handoff.state",
];

/// A validated client request.
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    Ping,
    SessionCreate(CreateParams),
    SessionResume(ResumeParams),
    SessionDetach(DetachParams),
    SessionList(ListParams),
    SessionClose(CloseParams),
    SessionBranch(BranchParams),
    PromptSubmit(SubmitParams),
    SessionInterrupt(InterruptParams),
    SessionCompress(CompressParams),
    EventsSince(SinceParams),
    EventsStats,
    HandoffRequest(HandoffRequestParams),
    HandoffClaim(HandoffClaimParams),
    HandoffComplete(HandoffCompleteParams),
    HandoffFail(HandoffFailParams),
    HandoffState(HandoffStateParams),
}

impl Request {
    /// Validates `params` (a JSON object; `null` counts as `{}`) for
    /// `method`. Unknown method → -32601; params not an object, a wrong
    /// type, a missing field or a value out of range → -32602 with
    /// `data.field`.
    pub fn from_parts(method: &str, params: Value) -> Result<Request, RpcError> {
        if !is_known_method(method) {
            return Err(RpcError::method_not_found(method));
        }
        let params = match params {
            Value::Null => Value::Object(Default::default()),
            Value::Object(_) => params,
            _ => return Err(params_not_object()),
        };
        build(method, params)
    }

    /// Like [`Request::from_parts`], but straight from the params' JSON text
    /// (which the caller has already checked to be syntactically valid).
    /// Decoding from text rather than a `Value` means a number that no
    /// `Value` can hold (`1e400`) is still reported against its field.
    pub(crate) fn from_raw_params(method: &str, params: &str) -> Result<Request, RpcError> {
        if !is_known_method(method) {
            return Err(RpcError::method_not_found(method));
        }
        let params = params.trim_start();
        let params = if params.starts_with("null") {
            "{}"
        } else if params.starts_with('{') {
            params
        } else {
            return Err(params_not_object());
        };
        let mut d = serde_json::Deserializer::from_str(params);
        build(method, &mut d)
    }

    /// The wire name of the method.
    pub fn method(&self) -> &'static str {
        match self {
            Request::Ping => "gateway.ping",
            Request::SessionCreate(_) => "session.create",
            Request::SessionResume(_) => "session.resume",
            Request::SessionDetach(_) => "session.detach",
            Request::SessionList(_) => "session.list",
            Request::SessionClose(_) => "session.close",
            Request::SessionBranch(_) => "session.branch",
            Request::PromptSubmit(_) => "prompt.submit",
            Request::SessionInterrupt(_) => "session.interrupt",
            Request::SessionCompress(_) => "session.compress",
            Request::EventsSince(_) => "session.events.since",
            Request::EventsStats => "session.events.stats",
            Request::HandoffRequest(_) => "handoff.request",
            Request::HandoffClaim(_) => "handoff.claim",
            Request::HandoffComplete(_) => "handoff.complete",
            Request::HandoffFail(_) => "handoff.fail",
            Request::HandoffState(_) => "handoff.state",
        }
    }

    /// The `profile` param, for the methods that take one.
    pub fn profile(&self) -> Option<&str> {
        match self {
            Request::Ping | Request::EventsStats => None,
            Request::SessionCreate(p) => p.profile.as_deref(),
            Request::SessionResume(p) => p.profile.as_deref(),
            Request::SessionDetach(p) => p.profile.as_deref(),
            Request::SessionList(p) => p.profile.as_deref(),
            Request::SessionClose(p) => p.profile.as_deref(),
            Request::SessionBranch(p) => p.profile.as_deref(),
            Request::PromptSubmit(p) => p.profile.as_deref(),
            Request::SessionInterrupt(p) => p.profile.as_deref(),
            Request::SessionCompress(p) => p.profile.as_deref(),
            Request::EventsSince(p) => p.profile.as_deref(),
            Request::HandoffRequest(p) => p.profile.as_deref(),
            Request::HandoffClaim(p) => p.profile.as_deref(),
            Request::HandoffComplete(p) => p.profile.as_deref(),
            Request::HandoffFail(p) => p.profile.as_deref(),
            Request::HandoffState(p) => p.profile.as_deref(),
        }
    }

    /// The session the request names, if any (routing key for the actors).
    pub fn session_id(&self) -> Option<&SessionId> {
        match self {
            Request::SessionResume(p) => Some(&p.session_id),
            Request::SessionDetach(p) => Some(&p.session_id),
            Request::SessionClose(p) => Some(&p.session_id),
            Request::SessionBranch(p) => Some(&p.session_id),
            Request::PromptSubmit(p) => Some(&p.session_id),
            Request::SessionInterrupt(p) => Some(&p.session_id),
            Request::SessionCompress(p) => Some(&p.session_id),
            Request::EventsSince(p) => Some(&p.session_id),
            Request::HandoffRequest(p) => Some(&p.session_id),
            Request::HandoffState(p) => Some(&p.session_id),
            _ => None,
        }
    }

    /// The handoff the request names, if any.
    pub fn handoff_id(&self) -> Option<&HandoffId> {
        match self {
            Request::HandoffComplete(p) => Some(&p.handoff_id),
            Request::HandoffFail(p) => Some(&p.handoff_id),
            _ => None,
        }
    }
}

/// Whether `method` is one of [`METHODS`].
pub fn is_known_method(method: &str) -> bool {
    METHODS.contains(&method)
}

fn params_not_object() -> RpcError {
    RpcError::invalid_params("params", "params must be an object")
}

/// Decodes the params of a known `method` from any JSON deserializer.
fn build<'de, D>(method: &str, d: D) -> Result<Request, RpcError>
where
    D: Deserializer<'de, Error = serde_json::Error>,
{
    Ok(match method {
        // These take no params; whatever object was sent is ignored.
        "gateway.ping" => Request::Ping,
        "session.events.stats" => Request::EventsStats,
        "session.create" => Request::SessionCreate(decode(d)?),
        "session.resume" => Request::SessionResume(decode(d)?),
        "session.detach" => Request::SessionDetach(decode(d)?),
        "session.list" => {
            let p: ListParams = decode(d)?;
            p.validate()?;
            Request::SessionList(p)
        }
        "session.close" => Request::SessionClose(decode(d)?),
        "session.branch" => Request::SessionBranch(decode(d)?),
        "prompt.submit" => Request::PromptSubmit(decode(d)?),
        "session.interrupt" => Request::SessionInterrupt(decode(d)?),
        "session.compress" => Request::SessionCompress(decode(d)?),
        "session.events.since" => {
            let p: SinceParams = decode(d)?;
            p.validate()?;
            Request::EventsSince(p)
        }
        "handoff.request" => Request::HandoffRequest(decode(d)?),
        "handoff.claim" => Request::HandoffClaim(decode(d)?),
        "handoff.complete" => Request::HandoffComplete(decode(d)?),
        "handoff.fail" => Request::HandoffFail(decode(d)?),
        "handoff.state" => Request::HandoffState(decode(d)?),
        other => return Err(RpcError::method_not_found(other)),
    })
}

/// Deserializes `T`, tracking the path so an error names its field.
fn decode<'de, T, D>(d: D) -> Result<T, RpcError>
where
    T: DeserializeOwned,
    D: Deserializer<'de, Error = serde_json::Error>,
{
    serde_path_to_error::deserialize(d).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let detail = without_position(&inner);
        let field = field_name(&path, &detail);
        RpcError::invalid_params(&field, detail)
    })
}

/// serde_json's message without its " at line L column C" suffix (the
/// position is meaningless to a client once the frame has been split up).
fn without_position(e: &serde_json::Error) -> String {
    let msg = e.to_string();
    if e.line() == 0 {
        return msg;
    }
    let suffix = format!(" at line {} column {}", e.line(), e.column());
    match msg.strip_suffix(&suffix) {
        Some(m) => m.to_owned(),
        None => msg,
    }
}

/// The field to report. serde reports a missing field as an error of the
/// *containing* object (path `messages[0]`, message "missing field `text`"),
/// so the name is appended to that path: `messages[0].text`.
fn field_name(path: &str, detail: &str) -> String {
    let path = if path == "." { "" } else { path };
    let missing = detail
        .strip_prefix("missing field `")
        .and_then(|rest| rest.split_once('`'))
        .map(|(name, _)| name);
    match (missing, path.is_empty()) {
        (Some(name), true) => name.to_owned(),
        (Some(name), false) => format!("{path}.{name}"),
        (None, true) => "params".to_owned(),
        (None, false) => path.to_owned(),
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod validation_tests;
