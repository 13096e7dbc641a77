//! JSON-RPC 2.0 framing (PROTOCOL 1.2): turning an untrusted text frame into
//! calls, and encoding replies.
//!
//! Parsing never fails as a whole: every outcome is a value the transport
//! answers (or, for a notification, deliberately does not). The checks run
//! in the order JSON-RPC implies: nesting depth, JSON syntax, batch/object
//! shape, `id`, `jsonrpc`, `method`, known method, `params` object, params
//! fields.

use serde::de::Deserializer;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;

use crate::error::RpcError;
use crate::methods::Request;

/// Deepest `[`/`{` nesting accepted in a frame. Checked by a byte scan before
/// serde sees the text, so no frame can make the parser recurse deeply
/// (serde_json's own limit is 128, and some of our types recurse per level).
pub const MAX_JSON_DEPTH: usize = 64;

/// A request that passed validation. `id: None` is a notification: it is
/// executed and never answered.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub id: Option<Value>,
    pub request: Request,
}

/// One member of a frame.
#[derive(Debug, Clone, PartialEq)]
pub enum Item {
    Call(Call),
    /// A member that failed validation. Answer it with `error` when `id` is
    /// `Some` (`Some(Value::Null)` for one whose id could not be read); a
    /// notification (`None`) is not answered.
    Error {
        id: Option<Value>,
        error: RpcError,
    },
}

/// A whole frame.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    Single(Item),
    /// A non-empty batch; answer with an array of the answers that exist
    /// (none at all if every member was a notification).
    Batch(Vec<Item>),
    /// The frame as a whole is unusable (not JSON, an empty batch, too
    /// deep): answer this one error with id null.
    Invalid(RpcError),
}

/// Parses one frame. See the module docs for the order of checks.
pub fn parse_frame(text: &str) -> Incoming {
    if exceeds_depth(text.as_bytes(), MAX_JSON_DEPTH) {
        return Incoming::Invalid(RpcError::invalid_request("nesting too deep"));
    }
    // `&RawValue` checks the syntax of the whole text without building a
    // tree, and without rejecting numbers no `Value` could hold.
    let raw: &RawValue = match serde_json::from_str(text) {
        Ok(raw) => raw,
        Err(e) => return Incoming::Invalid(RpcError::parse_error(e.to_string())),
    };
    let body = raw.get().trim_start();
    if body.starts_with('[') {
        let members: Vec<&RawValue> = match serde_json::from_str(body) {
            Ok(m) => m,
            Err(e) => return Incoming::Invalid(RpcError::parse_error(e.to_string())),
        };
        if members.is_empty() {
            return Incoming::Invalid(RpcError::invalid_request("empty batch"));
        }
        Incoming::Batch(members.into_iter().map(parse_item).collect())
    } else {
        Incoming::Single(parse_item(raw))
    }
}

/// The members of a request object, kept as raw text so each can be checked
/// (and reported) on its own. `Some(raw null)` is distinct from a missing
/// member: `"id": null` is a request, no `id` a notification.
#[derive(Deserialize)]
struct RawRequest<'a> {
    #[serde(default, borrow, deserialize_with = "present")]
    jsonrpc: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    id: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    method: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    params: Option<&'a RawValue>,
}

fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&'de RawValue>::deserialize(d).map(Some)
}

fn invalid(id: Value, detail: &str) -> Item {
    Item::Error {
        id: Some(id),
        error: RpcError::invalid_request(detail),
    }
}

/// A JSON number written without fraction or exponent.
fn is_integer_literal(text: &str) -> bool {
    let digits = text.trim().trim_start_matches('-');
    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
}

/// A JSON number (of valid syntax: the frame was checked before).
fn is_number_literal(text: &str) -> bool {
    text.trim_start()
        .bytes()
        .next()
        .is_some_and(|b| b == b'-' || b.is_ascii_digit())
}

/// Validates one request object (or batch member).
fn parse_item(raw: &RawValue) -> Item {
    if !raw.get().trim_start().starts_with('{') {
        return invalid(Value::Null, "request must be an object");
    }
    let req: RawRequest = match serde_json::from_str(raw.get()) {
        Ok(r) => r,
        // Valid JSON, so this is a duplicate member or the like.
        Err(e) => return invalid(Value::Null, &e.to_string()),
    };

    let id = match req.id {
        None => None,
        Some(raw_id) => match serde_json::from_str::<Value>(raw_id.get()) {
            // `-0` is read as the float -0.0 (serde_json keeps the sign) and
            // is the one integer literal that is a float here without being
            // beyond 64 bits; `encode_*` echo it as `-0`.
            Ok(Value::Number(n))
                if n.is_f64() && is_integer_literal(raw_id.get()) && n.as_f64() != Some(0.0) =>
            {
                // Beyond 64 bits an integer becomes a float here, and its
                // echo would not be the id the client sent.
                return invalid(Value::Null, "id is an integer beyond 64 bits");
            }
            Ok(v @ (Value::Null | Value::String(_) | Value::Number(_))) => Some(v),
            // The frame's syntax was checked, so a number that does not
            // decode is one no float can hold (`1e400`).
            Err(_) if is_number_literal(raw_id.get()) => {
                return invalid(Value::Null, "id is a number out of range")
            }
            _ => return invalid(Value::Null, "id must be a string, a number or null"),
        },
    };
    // An invalid request is answered even without an id (JSON-RPC: id null);
    // with a readable id, that id is echoed so the client can match it.
    let answer_id = id.clone().unwrap_or(Value::Null);

    // Compared as a decoded string, so an escaped `"2\u002e0"` is "2.0" too.
    let version_ok = req.jsonrpc.is_some_and(|v| {
        v.get() == r#""2.0""# || serde_json::from_str::<String>(v.get()).is_ok_and(|v| v == "2.0")
    });
    if !version_ok {
        return invalid(answer_id, r#"jsonrpc must be "2.0""#);
    }

    let method = match req.method {
        None => return invalid(answer_id, "missing method"),
        Some(m) => match serde_json::from_str::<String>(m.get()) {
            Ok(m) => m,
            Err(_) => return invalid(answer_id, "method must be a string"),
        },
    };

    let params = req.params.map_or("{}", RawValue::get);
    match Request::from_raw_params(&method, params) {
        Ok(request) => Item::Call(Call { id, request }),
        Err(error) => Item::Error { id, error },
    }
}

/// Whether `[`/`{` nest deeper than `limit` anywhere outside strings.
/// Linear, allocation-free, and safe on any input (including invalid JSON,
/// which serde then rejects). Client frames and host lines are bounded by
/// the same scan.
pub(crate) fn exceeds_depth(bytes: &[u8], limit: usize) -> bool {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for &b in bytes {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > limit {
                    return true;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}

#[derive(Serialize)]
struct ResultOut<'a, T: ?Sized> {
    jsonrpc: &'static str,
    #[serde(serialize_with = "echo_id")]
    id: &'a Value,
    result: &'a T,
}

#[derive(Serialize)]
struct ErrorOut<'a> {
    jsonrpc: &'static str,
    #[serde(serialize_with = "echo_id")]
    id: &'a Value,
    error: &'a RpcError,
}

/// The id as the client wrote it. The one id a `Value` cannot give back
/// verbatim is `-0`: it is held as the float -0.0, which serde_json writes
/// `-0.0`; JSON-RPC wants the id echoed, and a client matching replies by
/// their text would not find `-0.0`. Other float ids are echoed by value,
/// as always (`1e3` comes back as `1000.0`).
fn echo_id<S: serde::Serializer>(id: &&Value, s: S) -> Result<S::Ok, S::Error> {
    match id {
        Value::Number(n) if n.as_f64().is_some_and(|f| f == 0.0 && f.is_sign_negative()) => {
            match RawValue::from_string("-0".to_owned()) {
                Ok(raw) => raw.serialize(s),
                Err(_) => id.serialize(s),
            }
        }
        _ => id.serialize(s),
    }
}

#[derive(Serialize)]
struct NotificationOut<'a, T: ?Sized> {
    jsonrpc: &'static str,
    method: &'a str,
    params: &'a T,
}

/// `{"jsonrpc":"2.0","id":ID,"result":RESULT}`. A result that cannot be
/// serialized (a bug) becomes a -32603 error for the same id.
pub fn encode_result<T: Serialize + ?Sized>(id: &Value, result: &T) -> String {
    let out = ResultOut {
        jsonrpc: "2.0",
        id,
        result,
    };
    match serde_json::to_string(&out) {
        Ok(s) => s,
        Err(e) => encode_error(id, &RpcError::internal(e.to_string())),
    }
}

/// `{"jsonrpc":"2.0","id":ID,"error":{...}}`.
pub fn encode_error(id: &Value, err: &RpcError) -> String {
    let out = ErrorOut {
        jsonrpc: "2.0",
        id,
        error: err,
    };
    match serde_json::to_string(&out) {
        Ok(s) => s,
        // An `RpcError` holds only strings, numbers and `Value`s, which
        // always serialize; keep a well-formed answer regardless.
        Err(_) => format!(
            r#"{{"jsonrpc":"2.0","id":null,"error":{{"code":{},"message":"internal error"}}}}"#,
            crate::error::codes::INTERNAL_ERROR
        ),
    }
}

/// `[a,b,c]` from already-encoded responses.
pub fn encode_batch(items: &[String]) -> String {
    let len = items.iter().map(|s| s.len() + 1).sum::<usize>() + 2;
    let mut s = String::with_capacity(len);
    s.push('[');
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        s.push_str(item);
    }
    s.push(']');
    s
}

/// `{"jsonrpc":"2.0","method":METHOD,"params":PARAMS}`. (Event frames use
/// the cheaper `encode_event_frame`.)
pub fn encode_notification<T: Serialize + ?Sized>(method: &str, params: &T) -> String {
    let out = NotificationOut {
        jsonrpc: "2.0",
        method,
        params,
    };
    match serde_json::to_string(&out) {
        Ok(s) => s,
        Err(e) => encode_notification("error", &serde_json::json!({ "message": e.to_string() })),
    }
}

/// A request frame as a client writes it (and tests read it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestFrame<P> {
    pub jsonrpc: String,
    /// `None`: a notification.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<Value>,
    pub method: String,
    pub params: P,
}

impl<P> RequestFrame<P> {
    /// A `"2.0"` request (or notification, with `id: None`).
    pub fn new(id: Option<Value>, method: impl Into<String>, params: P) -> Self {
        Self {
            jsonrpc: "2.0".to_owned(),
            id,
            method: method.into(),
            params,
        }
    }
}

/// A response frame as a client reads it: exactly one of `result`/`error`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResponseFrame {
    pub jsonrpc: String,
    pub id: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<RpcError>,
}

#[cfg(test)]
mod tests;
