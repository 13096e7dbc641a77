//! `GET /v1/sessions/{id}/events`: a session's events as Server-Sent Events
//! (PROTOCOL 1.9).
//!
//! The stream is a peer like any other: it sends `session.resume` with
//! `omit_messages` and `attach`, so the replay (`events` of the reply) and
//! the live frames that follow it are cut at one point by the session, and
//! every durable event after the watermark arrives exactly once, in order.
//! Decisions of this transport:
//!
//! - **Watermark.** `Last-Event-ID: N` or `?last_seen=N`; the header wins
//!   when both are given. Without either only live events are streamed. A
//!   watermark that is not a non-negative integer is 400.
//! - **Profile.** `?profile=NAME`, default `default`.
//! - **Status.** An unknown session (4001) or a closed one (4002) is 404; a
//!   malformed session id (-32602) is 400; any other failure of the resume
//!   is 500; no resume answer within `call_timeout` + 5 s is 504. All of
//!   these are decided before the stream starts.
//! - **Frames.** Each event is `id: SEQ` (durable events only; transient
//!   ones carry no `id:` line), `event: TYPE` and `data: PARAMS` (the
//!   event's `params` object, one line). A resume that answers
//!   `resync: true` (more missed than `--max-replay-events`) emits the
//!   comment `: resync` and goes on live: the client rebuilds its view with
//!   `session.resume` over `POST /rpc`. A `: keep-alive` comment goes out
//!   every 15 s.
//! - **End.** The stream ends after `session.closed` (nothing can follow
//!   it; a reconnecting `EventSource` then gets 404 and stops), when the
//!   peer is closed as a slow consumer (the client reconnects with
//!   `Last-Event-ID` and loses nothing), and when the gateway drains. When
//!   the client goes away the peer stops and detaches.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{ConnectInfo, Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use ractor::ActorRef;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use tether_actors::metrics::Transport;
use tether_actors::{Identity, Outbound, OutboxReceiver, PeerMsg};
use tokio::sync::watch;
use tracing::warn;

use crate::http::status_text;
use crate::server::AppState;

/// Interval of the `: keep-alive` comment.
const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// Margin over `call_timeout` for the resume answer.
const ANSWER_MARGIN: Duration = Duration::from_secs(5);
/// The id of the resume request this transport sends for the client.
const RESUME_ID: &str = "sse-resume";

#[derive(Debug, Deserialize)]
pub struct EventsQuery {
    profile: Option<String>,
    last_seen: Option<String>,
}

/// Stops the peer when the response stream is dropped (client gone).
struct PeerGuard(ActorRef<PeerMsg>);

impl Drop for PeerGuard {
    fn drop(&mut self) {
        self.0.stop(None);
    }
}

/// `GET /v1/sessions/{id}/events`.
pub async fn session_events(
    State(app): State<AppState>,
    ConnectInfo(remote): ConnectInfo<std::net::SocketAddr>,
    caller: Option<axum::Extension<crate::auth::Caller>>,
    Path(session_id): Path<String>,
    Query(query): Query<EventsQuery>,
    headers: HeaderMap,
) -> Response {
    let header_id = headers
        .get("last-event-id")
        .map(|v| v.to_str().unwrap_or("x").trim().to_string());
    let last_seen = match header_id.or(query.last_seen) {
        None => None,
        Some(s) => match s.parse::<u64>() {
            Ok(n) => Some(n),
            Err(_) => {
                return status_text(
                    StatusCode::BAD_REQUEST,
                    "Last-Event-ID / last_seen must be a non-negative integer",
                )
            }
        },
    };
    let caller = crate::auth::caller_of(caller);
    // A token fixes the profile; naming another one finds nothing (404),
    // exactly as an unknown session.
    let profile = match query.profile {
        Some(p) if caller.fixed && p != caller.profile => {
            return status_text(StatusCode::NOT_FOUND, "no such session")
        }
        Some(p) => p,
        None => caller.profile.clone(),
    };
    // Each open is a new stream: without a shared bucket a client could
    // reopen without end.
    if let Err(retry_after) = app.client_buckets.take(&profile, remote.ip()) {
        return crate::http::rate_limited(retry_after);
    }
    let mut params = json!({
        "session_id": session_id,
        "profile": profile,
        "omit_messages": true,
        "attach": true,
    });
    if let Some(n) = last_seen {
        params["last_seen"] = json!(n);
    }
    let request =
        json!({"jsonrpc": "2.0", "id": RESUME_ID, "method": "session.resume", "params": params});

    let identity = Identity {
        profile: caller.profile,
        fixed: caller.fixed,
        can_attach: true,
        transport: tether_protocol::PeerTransport::Sse,
    };
    let (peer, mut rx) = match tether_actors::spawn_peer(&app.ctx, identity).await {
        Ok(p) => p,
        Err(e) => {
            warn!(error = %e, "could not start a peer");
            return status_text(StatusCode::SERVICE_UNAVAILABLE, "gateway unavailable");
        }
    };
    let guard = PeerGuard(peer.clone());
    if peer
        .cast(PeerMsg::Text {
            text: request.to_string(),
            permit: None,
        })
        .is_err()
    {
        return status_text(StatusCode::SERVICE_UNAVAILABLE, "gateway unavailable");
    }
    let wait = app.ctx.config.call_timeout + ANSWER_MARGIN;
    let reply = match tokio::time::timeout(wait, resume_reply(&mut rx)).await {
        Err(_) => return status_text(StatusCode::GATEWAY_TIMEOUT, "no answer in time"),
        Ok(None) => return status_text(StatusCode::SERVICE_UNAVAILABLE, "peer ended"),
        Ok(Some(v)) => v,
    };
    if let Some(err) = reply.get("error") {
        let code = err["code"].as_i64().unwrap_or(0);
        let message = err["message"].as_str().unwrap_or("resume failed");
        let status = match code {
            4001 | 4002 => StatusCode::NOT_FOUND,
            -32602 => StatusCode::BAD_REQUEST,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        return status_text(status, message);
    }
    let result = &reply["result"];
    let mut first: Vec<Event> = Vec::new();
    if result["resync"] == true {
        first.push(Event::default().comment("resync"));
    }
    if let Some(events) = result["events"].as_array() {
        for params in events {
            let kind = params["type"].as_str().unwrap_or("event");
            first.push(event(kind, params["seq"].as_u64(), &params.to_string()));
        }
    }
    let live = Live {
        rx,
        shutdown: app.shutdown.clone(),
        done: false,
        closing: false,
        _guard: guard,
        _open: app.ctx.metrics.open_connection(Transport::Sse),
    };
    let stream = futures::stream::iter(first.into_iter().map(Ok::<Event, Infallible>))
        .chain(futures::stream::unfold(live, next_live));
    Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE).text("keep-alive"))
        .into_response()
}

/// Skips `gateway.ready` (and anything else before it) up to the resume's
/// reply. The session queues no live frame for this peer before it.
async fn resume_reply(rx: &mut OutboxReceiver) -> Option<Value> {
    loop {
        let Outbound::Frame(bytes) = rx.recv().await? else {
            return None;
        };
        let Ok(v) = serde_json::from_slice::<Value>(&bytes) else {
            continue;
        };
        if v.get("method").is_none() && v["id"] == RESUME_ID {
            return Some(v);
        }
    }
}

struct Live {
    rx: OutboxReceiver,
    shutdown: watch::Receiver<bool>,
    /// Set after `session.closed`: the next poll ends the stream.
    done: bool,
    /// The gateway drains: write what is queued, then end.
    closing: bool,
    _guard: PeerGuard,
    /// Counted in `tether_connections_open{transport="sse"}` while it streams.
    _open: tether_actors::metrics::OpenConnection,
}

#[derive(Deserialize)]
struct Frame<'a> {
    #[serde(borrow)]
    method: Option<&'a str>,
    #[serde(borrow)]
    params: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Head<'a> {
    #[serde(rename = "type", borrow)]
    kind: &'a str,
    seq: Option<u64>,
}

async fn next_live(mut st: Live) -> Option<(Result<Event, Infallible>, Live)> {
    if st.done {
        return None;
    }
    loop {
        let item = if st.closing {
            // Draining: what is queued (the endings of the turns the drain
            // just wrote) still goes out, then the stream ends.
            st.rx.try_recv()
        } else {
            tokio::select! {
                item = st.rx.recv() => item,
                _ = st.shutdown.wait_for(|s| *s) => {
                    st.closing = true;
                    continue;
                }
            }
        };
        let Outbound::Frame(bytes) = item? else {
            // Slow consumer: end; the client resumes from its watermark.
            return None;
        };
        let Ok(frame) = serde_json::from_slice::<Frame>(&bytes) else {
            continue;
        };
        let (Some("event"), Some(params)) = (frame.method, frame.params) else {
            continue;
        };
        let Ok(head) = serde_json::from_str::<Head>(params.get()) else {
            continue;
        };
        st.done = head.kind == "session.closed";
        let ev = event(head.kind, head.seq, params.get());
        return Some((Ok(ev), st));
    }
}

fn event(kind: &str, seq: Option<u64>, data: &str) -> Event {
    let mut ev = Event::default();
    if let Some(seq) = seq {
        ev = ev.id(seq.to_string());
    }
    ev.event(kind).data(data)
}
