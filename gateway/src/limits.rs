//! A profile's connections at the door: a WebSocket upgrade or an SSE open
//! past the profile's `connections` limit is answered HTTP 429 before
//! anything starts (no 101, no stream, no peer), with `Retry-After` and a
//! JSON-RPC 4290 body that names the limit.

use axum::body::Body;
use axum::http::{header, HeaderValue};
use axum::response::Response;
use tether_actors::{Hold, LimitReached};
use tracing::info;

use crate::server::AppState;

/// What `Retry-After` says when only another connection's end helps: a
/// hint to back off, not a promise.
const RETRY_AFTER_S: u64 = 1;

/// Counts one connection of `profile` (and of its caller's token, when
/// the token's claim limits its connections), or says which limit refuses
/// it, counting nothing
/// ([`too_many`] is the answer).
pub(crate) fn open_connection(
    app: &AppState,
    profile: &str,
    caller: &crate::auth::Caller,
) -> Result<Hold, LimitReached> {
    app.ctx
        .profiles
        .open_connection(profile, caller.limits.as_ref())
        .inspect_err(|limit| {
            info!(
                profile,
                limit = limit.limit.name(),
                max = limit.max,
                "connection refused: profile limit reached"
            );
        })
}

/// The 429 that refuses a connection past `limit`.
pub(crate) fn too_many(limit: &LimitReached) -> Response {
    let error = limit.to_rpc();
    let body = tether_protocol::encode_error(&serde_json::Value::Null, &error);
    let mut resp = Response::new(Body::from(body));
    *resp.status_mut() = crate::http::status_of(error.code);
    let headers = resp.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    let wait = limit.retry_after.map_or(RETRY_AFTER_S, |d| {
        d.as_millis().div_ceil(1000).max(1) as u64
    });
    headers.insert(header::RETRY_AFTER, HeaderValue::from(wait));
    resp
}
