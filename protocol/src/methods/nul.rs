//! NUL (U+0000) in a request's strings, refused the same way whatever the
//! store.
//!
//! PostgreSQL cannot hold a NUL in a text column, SQLite can: left to the
//! stores, one and the same request would be stored by one and fail with
//! 5071 on the other. So it is decided here, once, for every method: a
//! string param holding a NUL is -32602 naming its field. An id
//! (`session_id`, `handoff_id`) is the exception the protocol makes for
//! every id: a string that names nothing is a lookup miss, and no session
//! or handoff id the gateway mints holds a NUL, so it is answered 4001
//! (4090 for a handoff) without asking the store.
//!
//! Only the decoded params are looked at (re-encoded from the typed
//! request), so an unknown field, which the protocol ignores, is ignored
//! here too. The common case costs a scan of the text for `\u0000`: a NUL
//! can only be written in JSON as that escape.

use serde_json::Value;

use super::Request;
use crate::error::RpcError;

/// How a JSON text can spell a NUL (a raw control byte is not valid JSON).
const ESCAPED_NUL: &str = "\\u0000";

/// Whether `params` (JSON text) may hold a NUL in some string: a quick
/// filter; [`refuse_nul`] decides.
pub(super) fn may_hold_nul(params: &str) -> bool {
    params.contains(ESCAPED_NUL)
}

/// Whether any string in `v` holds a NUL.
pub(super) fn holds_nul(v: &Value) -> bool {
    match v {
        Value::String(s) => s.contains('\0'),
        Value::Array(items) => items.iter().any(holds_nul),
        Value::Object(map) => map.values().any(holds_nul),
        _ => false,
    }
}

/// The error for the first string of `request`'s params that holds a NUL,
/// if any.
pub(super) fn refuse_nul(request: &Request) -> Result<(), RpcError> {
    let Ok(Some(params)) = request.params() else {
        return Ok(());
    };
    let mut path = String::new();
    match first_nul(&params, &mut path) {
        None => Ok(()),
        Some(field) => Err(refusal(&field)),
    }
}

fn refusal(field: &str) -> RpcError {
    match field {
        "session_id" => RpcError::session_not_found(),
        "handoff_id" => RpcError::handoff_conflict("no such handoff"),
        _ => RpcError::invalid_params(field, "must not contain NUL (U+0000)"),
    }
}

/// The path (`messages[1].text`) of the first string in `v` holding a NUL.
fn first_nul(v: &Value, path: &mut String) -> Option<String> {
    match v {
        Value::String(s) if s.contains('\0') => Some(path.clone()),
        Value::Array(items) => items.iter().enumerate().find_map(|(i, item)| {
            let len = path.len();
            path.push_str(&format!("[{i}]"));
            let found = first_nul(item, path);
            path.truncate(len);
            found
        }),
        Value::Object(map) => map.iter().find_map(|(key, item)| {
            let len = path.len();
            if !path.is_empty() {
                path.push('.');
            }
            path.push_str(key);
            let found = first_nul(item, path);
            path.truncate(len);
            found
        }),
        _ => None,
    }
}
