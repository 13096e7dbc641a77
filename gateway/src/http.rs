//! `POST /rpc`: one JSON-RPC request or batch per HTTP request (PROTOCOL 1.9).
//!
//! Each POST is its own peer, spawned with `can_attach: false` (an `attach`
//! in the request is taken as false) and stopped once the answer is read.
//! Decisions of this transport:
//!
//! - **Content type.** `application/json`, with any parameters (`;
//!   charset=utf-8`), compared case-insensitively; anything else, or no
//!   `Content-Type` at all, is 415.
//! - **Size.** A body over `max_frame_bytes` is 413 (by `Content-Length`
//!   before reading, or while reading a body without one). Unlike a
//!   WebSocket frame there is no 4013 answer for a body up to 4× the limit:
//!   HTTP has its own status for it.
//! - **Time.** The body must arrive within `--handshake-timeout-s` of the
//!   handler starting, as the head must within it of the connection
//!   opening; a slower one is 408 and the connection is closed.
//! - **Body not UTF-8**: 200 with the -32700 error, as for a binary frame.
//! - **Notifications only** (a notification or a batch of them): the peer
//!   executes them and answers nothing, so the response is 204 No Content
//!   with an empty body.
//! - **When the answer is ready.** The request text travels to the peer
//!   with a semaphore permit that the peer drops once it has handled the
//!   text (and queued its answer, if any); the transport waits for that,
//!   then reads the outbox. The wait is bounded by `call_timeout` + 5 s;
//!   past it the response is 504.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{ConnectInfo, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use tether_actors::metrics::Transport;
use tether_actors::{Outbound, OutboxReceiver, PeerMsg};
use tokio::sync::Semaphore;

use crate::server::AppState;

/// Margin over `call_timeout` before a POST gives up with 504.
const ANSWER_MARGIN: Duration = Duration::from_secs(5);
/// Bound on waiting for a POST's peer to stop.
const STOP_WAIT: Duration = Duration::from_secs(1);

/// `POST /rpc`.
pub async fn post_rpc(
    State(app): State<AppState>,
    ConnectInfo(remote): ConnectInfo<std::net::SocketAddr>,
    caller: Option<axum::Extension<crate::auth::Caller>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let _open = app.ctx.metrics.open_connection(Transport::Http);
    let caller = crate::auth::caller_of(caller);
    if let Err(retry_after) = app.client_buckets.take(&caller.profile, remote.ip()) {
        return rate_limited(retry_after);
    }
    let msg = match request_msg(&app, &headers, body).await {
        Ok(msg) => msg,
        Err(refused) => return refused,
    };
    let Some((peer, mut rx)) = app
        .start_peer(caller, false, tether_protocol::PeerTransport::Http)
        .await
    else {
        return unavailable();
    };
    let wait = app.ctx.config.call_timeout + ANSWER_MARGIN;
    let answer = tokio::time::timeout(wait, handle(&peer, msg, &mut rx)).await;
    // Waiting for the stop makes the peer count exact once the response
    // is out (a client's next request sees this peer gone).
    let _ = peer.stop_and_wait(None, Some(STOP_WAIT)).await;
    rx.close();
    match answer {
        Err(_) => status_text(StatusCode::GATEWAY_TIMEOUT, "no answer in time"),
        Ok(None) => StatusCode::NO_CONTENT.into_response(),
        Ok(Some(frame)) => {
            let mut resp = Response::new(Body::from(frame));
            resp.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            resp
        }
    }
}

/// The request's body as the peer's message (text, or `Binary` when it is
/// not UTF-8), or the status that refuses it: 415, 413, 400 or 408.
async fn request_msg(app: &AppState, headers: &HeaderMap, body: Body) -> Result<PeerMsg, Response> {
    if !is_json(headers) {
        return Err(status_text(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "Content-Type must be application/json",
        ));
    }
    let max = app.ctx.config.max_frame_bytes;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > max as u64) {
        return Err(too_large(max));
    }
    // The body is bounded in time like the request head: a client that
    // drips it a byte at a time would otherwise hold a connection (and its
    // place under --max-connections) for as long as it likes.
    let read_timeout = app.ctx.config.request_read_timeout;
    let bytes = match tokio::time::timeout(read_timeout, read_limited(body, max)).await {
        Ok(Ok(b)) => b,
        Ok(Err(ReadError::TooLarge)) => return Err(too_large(max)),
        Ok(Err(ReadError::Broken)) => {
            return Err(status_text(StatusCode::BAD_REQUEST, "cannot read body"))
        }
        Err(_) => return Err(body_too_slow(read_timeout)),
    };
    Ok(match String::from_utf8(bytes) {
        Ok(text) => PeerMsg::Text { text, permit: None },
        Err(_) => PeerMsg::Binary,
    })
}

/// Hands the frame to the peer and returns its answer, `None` when it
/// answered nothing (notifications only).
async fn handle(
    peer: &ractor::ActorRef<PeerMsg>,
    msg: PeerMsg,
    rx: &mut OutboxReceiver,
) -> Option<bytes::Bytes> {
    let done = Arc::new(Semaphore::new(1));
    let msg = match msg {
        PeerMsg::Text { text, .. } => {
            let permit = done.clone().acquire_owned().await.ok()?;
            PeerMsg::Text {
                text,
                permit: Some(permit),
            }
        }
        // Answered at once; the next frame after `gateway.ready` is it.
        other => other,
    };
    let is_text = matches!(msg, PeerMsg::Text { .. });
    peer.cast(msg).ok()?;
    // `gateway.ready` is queued before `spawn_peer` returns.
    let _ready = rx.recv().await?;
    if is_text {
        // The permit is dropped after the answer (if any) is queued.
        let _ = done.acquire().await;
        match rx.try_recv()? {
            Outbound::Frame(frame) => Some(frame),
            Outbound::Close { .. } => None,
        }
    } else {
        match rx.recv().await? {
            Outbound::Frame(frame) => Some(frame),
            Outbound::Close { .. } => None,
        }
    }
}

/// `application/json`, optionally with parameters.
fn is_json(headers: &HeaderMap) -> bool {
    let Some(ct) = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let essence = ct.split(';').next().unwrap_or("").trim();
    essence.eq_ignore_ascii_case("application/json")
}

/// Why a body was not read whole.
pub(crate) enum ReadError {
    TooLarge,
    Broken,
}

/// Reads the body, giving up as soon as it passes `max` bytes (`POST /rpc`
/// and the front-end routes).
pub(crate) async fn read_limited(body: Body, max: usize) -> Result<Vec<u8>, ReadError> {
    let mut buf = Vec::new();
    let mut stream = body.into_data_stream();
    while let Some(data) = stream.next().await {
        let data = data.map_err(|_| ReadError::Broken)?;
        if buf.len() + data.len() > max {
            return Err(ReadError::TooLarge);
        }
        buf.extend_from_slice(&data);
    }
    Ok(buf)
}

/// 408, and the connection closed: what is left of the body is never read.
fn body_too_slow(limit: Duration) -> Response {
    let mut resp = status_text(
        StatusCode::REQUEST_TIMEOUT,
        &format!("the body did not arrive within {} s", limit.as_secs()),
    );
    resp.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    resp
}

fn too_large(max: usize) -> Response {
    status_text(
        StatusCode::PAYLOAD_TOO_LARGE,
        &format!("body over max_frame_bytes ({max})"),
    )
}

/// The HTTP status of a JSON-RPC error code: its row of PROTOCOL 1.6's
/// table (`tether_protocol::ERROR_CODES`), the one map every route that
/// answers a code over HTTP uses.
pub fn status_of(code: i64) -> StatusCode {
    StatusCode::from_u16(tether_protocol::ErrorCode::of(code).http_status)
        .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

/// 429 with `Retry-After` (whole seconds, rounded up) and the JSON-RPC
/// error a WebSocket peer would get, so a client can handle both alike.
pub fn rate_limited(retry_after: Duration) -> Response {
    let ms = retry_after.as_millis().max(1) as u64;
    let error = tether_protocol::RpcError::rate_limited(ms);
    let body = tether_protocol::encode_error(&serde_json::Value::Null, &error);
    let mut resp = Response::new(Body::from(body));
    *resp.status_mut() = status_of(error.code);
    let headers = resp.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(header::RETRY_AFTER, HeaderValue::from(ms.div_ceil(1000)));
    resp
}

/// 503: the peer that would answer could not be started.
pub fn unavailable() -> Response {
    status_text(StatusCode::SERVICE_UNAVAILABLE, "gateway unavailable")
}

pub fn status_text(status: StatusCode, text: &str) -> Response {
    (status, text.to_string()).into_response()
}
