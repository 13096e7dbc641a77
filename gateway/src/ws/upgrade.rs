//! The WebSocket opening handshake (RFC 6455 §4.2.1–4.2.2), answered here
//! rather than by axum's `WebSocketUpgrade`, so that the connection holds
//! tungstenite's stream and through it the socket: text frames are written
//! to it directly ([`super::frames`]), which axum's wrapper does not allow.
//!
//! A request that is not a valid upgrade is refused with the status axum
//! would give: 400 with the reason for a missing or wrong header, 426 when
//! the connection cannot be upgraded at all.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use tokio_tungstenite::WebSocketStream;
use tungstenite::handshake::derive_accept_key;
use tungstenite::protocol::{Role, WebSocketConfig};

use super::io::GuardedIo;
use super::{serve_socket, Start};
use crate::server::AppState;

/// The socket under tungstenite, as every connection holds it.
pub type WsStream = WebSocketStream<GuardedIo>;

/// Socket buffers: tungstenite's defaults (128 KiB each way) are sized for
/// large messages; agent events are small and there may be tens of
/// thousands of idle sockets, so start small and let the buffers grow on
/// demand. tungstenite zero-fills its read chunk up front, so the read
/// size is resident for every idle peer. 512 bytes hold a usual client
/// request (a few hundred bytes); once a frame's header is read tungstenite
/// reserves the whole frame, so a large prompt still takes one or two
/// reads, not one per 512 bytes. Only control frames go through
/// tungstenite's write buffer; text frames bypass it.
const READ_BUFFER: usize = 512;
const WRITE_BUFFER: usize = 16 * 1024;

/// `GET /ws`.
pub async fn ws_upgrade(
    State(app): State<AppState>,
    permit: Option<axum::Extension<crate::listen::ConnPermit>>,
    caller: Option<axum::Extension<crate::auth::Caller>>,
    mut req: Request,
) -> Response {
    let accept = match accept_key(req.headers()) {
        Ok(accept) => accept,
        Err(why) => return (StatusCode::BAD_REQUEST, why).into_response(),
    };
    let Some(on_upgrade) = req.extensions_mut().remove::<OnUpgrade>() else {
        return (
            StatusCode::UPGRADE_REQUIRED,
            "WebSocket request couldn't be upgraded since no upgrade state was present",
        )
            .into_response();
    };
    let caller = crate::auth::caller_of(caller);
    // Refused before the 101: the client learns why, and nothing started.
    let place = match crate::limits::open_connection(&app, &caller.profile, &caller) {
        Ok(place) => place,
        Err(limit) => return crate::limits::too_many(&limit),
    };
    // The upgraded socket outlives the HTTP connection: it carries the
    // connection's place under --max-connections along.
    let start = Box::new(Start {
        app,
        caller,
        permit: permit.and_then(|p| p.take()),
        place,
    });
    let max = start.app.ctx.config.max_frame_bytes;
    // Frames up to 4× the limit are read and answered with 4013; anything
    // larger ends the connection with 1009 (PROTOCOL 1.10).
    let config = WebSocketConfig::default()
        .max_message_size(Some(4 * max))
        .max_frame_size(Some(4 * max))
        .read_buffer_size(READ_BUFFER)
        .write_buffer_size(WRITE_BUFFER);
    tokio::spawn(serve_upgraded(on_upgrade, config, start));
    let mut response = Response::new(Body::empty());
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let headers = response.headers_mut();
    headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    headers.insert(header::SEC_WEBSOCKET_ACCEPT, accept);
    response
}

/// Waits for hyper to hand over the connection once the 101 is sent, then
/// serves it on this task for its life.
async fn serve_upgraded(on_upgrade: OnUpgrade, config: WebSocketConfig, start: Box<Start>) {
    // Boxed: the upgrade's futures are needed once, and inline they would
    // stay in this task, resident, for the connection's life.
    let upgrade = Box::pin(async move {
        let upgraded = on_upgrade.await.ok()?;
        Some(
            WebSocketStream::from_raw_socket(
                GuardedIo::new(TokioIo::new(upgraded)),
                Role::Server,
                Some(config),
            )
            .await,
        )
    });
    let Some(socket) = upgrade.await else {
        return;
    };
    serve_socket(Box::new(socket), start).await;
}

/// The `Sec-WebSocket-Accept` answering a valid upgrade request, or why it
/// is not one.
fn accept_key(headers: &HeaderMap) -> Result<HeaderValue, &'static str> {
    if !has_token(headers, header::CONNECTION, "upgrade") {
        return Err("Connection header did not include 'upgrade'");
    }
    if !has_token(headers, header::UPGRADE, "websocket") {
        return Err("`Upgrade` header did not include 'websocket'");
    }
    if headers
        .get(header::SEC_WEBSOCKET_VERSION)
        .map(HeaderValue::as_bytes)
        != Some(b"13")
    {
        return Err("`Sec-WebSocket-Version` header did not include '13'");
    }
    let key = headers
        .get(header::SEC_WEBSOCKET_KEY)
        .ok_or("`Sec-WebSocket-Key` header missing")?;
    HeaderValue::from_str(&derive_accept_key(key.as_bytes()))
        .map_err(|_| "`Sec-WebSocket-Key` header is not valid")
}

/// Whether any of the header's comma-separated values is `token`, in any
/// case (RFC 9110 §7.6.1 for `Connection`, §7.8 for `Upgrade`).
fn has_token(headers: &HeaderMap, name: header::HeaderName, token: &str) -> bool {
    headers.get_all(name).iter().any(|value| {
        value.to_str().is_ok_and(|v| {
            v.split(',')
                .any(|part| part.trim().eq_ignore_ascii_case(token))
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_static(v));
        }
        h
    }

    const VALID: [(&str, &str); 4] = [
        ("connection", "keep-alive, Upgrade"),
        ("upgrade", "WebSocket"),
        ("sec-websocket-version", "13"),
        ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="),
    ];

    #[test]
    fn the_rfc_example_key_is_answered_with_its_accept() {
        // RFC 6455 §1.3.
        let accept = accept_key(&headers(&VALID)).unwrap();
        assert_eq!(accept, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
    }

    #[test]
    fn each_missing_or_wrong_header_is_refused() {
        for (drop, missing) in VALID.iter().enumerate() {
            let pairs: Vec<_> = VALID
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != drop)
                .map(|(_, p)| *p)
                .collect();
            assert!(accept_key(&headers(&pairs)).is_err(), "without {missing:?}");
        }
        let mut wrong = VALID;
        wrong[2] = ("sec-websocket-version", "8");
        assert!(accept_key(&headers(&wrong)).is_err());
        wrong = VALID;
        wrong[0] = ("connection", "upgrader");
        assert!(accept_key(&headers(&wrong)).is_err());
    }
}
