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
//!   watermark that is not a seq as tether writes one (decimal digits, no
//!   sign, no leading zero: `event_id.rs`) is 400.
//! - **Profile.** `?profile=NAME`, default `default`.
//! - **Status.** A failed resume answers its code's status in PROTOCOL
//!   1.6's table (`http::status_of`, the map every route uses): an
//!   unknown session (4001) is 404, a closed one (4002) 410, a malformed
//!   session id (-32602) 400; no resume answer within `call_timeout` + 5 s
//!   is 504. All of these are decided before the stream starts.
//! - **Frames.** Each event is `id: SEQ` (durable events only; transient
//!   ones carry no `id:` line), `event: TYPE` and `data: PARAMS` (the
//!   event's `params` object, one line). A resume that answers
//!   `resync: true` (more missed than `--max-replay-events`, or a watermark
//!   above `latest_seq`: lost history) emits a `resync` event instead of
//!   the replay, an event a browser's `EventSource` receives (a comment it
//!   would never see): `id: LATEST_SEQ`, so a reconnect goes on from there,
//!   and `data: {"session_id","epoch","latest_seq","last_seen","reason"}`
//!   with `reason` `history_lost` or `replay_limit`; then it goes on live.
//!   The client rebuilds what it must with `session.resume` or
//!   `session.events.since` over `POST /rpc`. A `: keep-alive` comment
//!   goes out every 15 s.
//! - **Batches.** What the peer's outbox has ready is written as one body
//!   chunk (one `write` on the socket), never one chunk per event; an event
//!   queued into an empty outbox is a chunk of one, at once.
//! - **Budget.** `?max_delay_ms=N` is the resume's `delivery.max_delay_ms`
//!   (deltas merged under a latency budget; over 1000 is 400).
//! - **Mid-turn.** When the stream starts while a turn runs, one
//!   `message.delta` at offset 0 carrying the turn's text so far follows the
//!   replay (SSE has no `active_turn`), so the deltas after it apply by
//!   their offset.
//! - **End.** The stream ends after `session.closed` or `session.deleted`
//!   (nothing can follow either; a reconnecting `EventSource` then gets 410
//!   or 404 and stops), when the
//!   peer is closed as a slow consumer (the client reconnects with
//!   `Last-Event-ID` and loses nothing), when the gateway drains, and at
//!   the `exp` of the stream's token (or when a reload revoked it), after
//!   an event `gateway.closed` with `data: {"code":4401|4403,"reason"}`;
//!   the client reconnects with a fresh token and `Last-Event-ID`. When
//!   the client goes away the peer stops and detaches.

use std::convert::Infallible;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{ConnectInfo, Path, Query, State};
use axum::http::header;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::StreamExt;
use ractor::ActorRef;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use tether_actors::metrics::Transport;
use tether_actors::{Outbound, OutboxReceiver, PeerMsg, CLOSE_TOKEN_EXPIRED, CLOSE_TOKEN_REVOKED};
use tether_protocol::{
    encode_event_params, format_ts, now_ms, to_raw, DeltaPayload, EventParams, EventType,
    SessionId, TraceId, TurnId,
};
use tokio::sync::watch;

use crate::http::{status_text, unavailable};
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
    max_delay_ms: Option<String>,
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
    let caller = crate::auth::caller_of(caller);
    let asked = match asked_resume(&headers, query, &caller) {
        Ok(asked) => asked,
        Err((status, why)) => return status_text(status, why),
    };
    // Each open is a new stream: without a shared bucket a client could
    // reopen without end.
    if let Err(retry_after) = app.client_buckets.take(&asked.profile, remote.ip()) {
        return crate::http::rate_limited(retry_after);
    }
    let place = match crate::limits::open_connection(&app, &asked.profile, &caller) {
        Ok(place) => place,
        Err(limit) => return crate::limits::too_many(&limit),
    };
    let request = resume_request(&session_id, &asked);
    let Some((peer, mut rx)) = app
        .start_peer(caller, true, tether_protocol::PeerTransport::Sse)
        .await
    else {
        return unavailable();
    };
    let guard = PeerGuard(peer.clone());
    let reply = match resume(&app, &peer, &mut rx, request).await {
        Ok(reply) => reply,
        Err(refused) => return refused,
    };
    let first = replay_chunk(&session_id, asked.last_seen, &reply["result"]);
    let live = Live {
        rx,
        batch: Vec::new(),
        shutdown: app.shutdown.clone(),
        reloads: app.auth.reloads(),
        peer: peer.clone(),
        done: false,
        closing: false,
        _guard: guard,
        _open: app.ctx.metrics.open_connection(Transport::Sse),
        _place: place,
    };
    let first = (!first.is_empty()).then(|| Ok::<Bytes, Infallible>(Bytes::from(first)));
    let stream = futures::stream::iter(first).chain(futures::stream::unfold(live, next_live));
    (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        Body::from_stream(stream),
    )
        .into_response()
}

/// What the client asks the resume for.
struct Asked {
    profile: String,
    last_seen: Option<u64>,
    max_delay_ms: Option<u32>,
}

/// The profile, watermark and delay budget the client asks the resume
/// for, or the status that refuses them (400, or 404 for a profile its
/// token does not allow).
fn asked_resume(
    headers: &HeaderMap,
    query: EventsQuery,
    caller: &crate::auth::Caller,
) -> Result<Asked, (StatusCode, &'static str)> {
    let header_id = headers
        .get("last-event-id")
        .map(|v| v.to_str().unwrap_or("x").trim().to_string());
    let last_seen =
        match header_id.or(query.last_seen) {
            None => None,
            Some(s) => match crate::event_id::sent_number(&s) {
                Some(n) => Some(n),
                None => return Err((
                    StatusCode::BAD_REQUEST,
                    "Last-Event-ID / last_seen must be a seq as tether writes it: decimal digits",
                )),
            },
        };
    let max_delay_ms = match query.max_delay_ms.as_deref().map(str::parse::<u32>) {
        None => None,
        Some(Ok(n)) => Some(n),
        Some(Err(_)) => {
            return Err((
                StatusCode::BAD_REQUEST,
                "max_delay_ms must be a non-negative integer",
            ))
        }
    };
    // A token fixes the profile; naming another one finds nothing (404),
    // exactly as an unknown session.
    let profile = match query.profile {
        Some(p) if caller.fixed && p != caller.profile => {
            return Err((StatusCode::NOT_FOUND, "no such session"))
        }
        Some(p) => p,
        None => caller.profile.clone(),
    };
    Ok(Asked {
        profile,
        last_seen,
        max_delay_ms,
    })
}

/// The `session.resume` this transport sends for the client: no
/// transcript, attached, from the watermark (if any).
fn resume_request(session_id: &str, asked: &Asked) -> String {
    let mut params = json!({
        "session_id": session_id,
        "profile": asked.profile,
        "omit_messages": true,
        "attach": true,
    });
    if let Some(n) = asked.last_seen {
        params["last_seen"] = json!(n);
    }
    if let Some(ms) = asked.max_delay_ms {
        params["delivery"] = json!({ "max_delay_ms": ms });
    }
    json!({"jsonrpc": "2.0", "id": RESUME_ID, "method": "session.resume", "params": params})
        .to_string()
}

/// Sends the resume and waits for its reply (a successful one), or the
/// status the stream is refused with before it starts.
async fn resume(
    app: &AppState,
    peer: &ActorRef<PeerMsg>,
    rx: &mut OutboxReceiver,
    request: String,
) -> Result<Value, Response> {
    let text = PeerMsg::Text {
        text: request,
        permit: None,
    };
    if peer.cast(text).is_err() {
        return Err(unavailable());
    }
    let wait = app.ctx.config.call_timeout + ANSWER_MARGIN;
    let reply = match tokio::time::timeout(wait, resume_reply(rx)).await {
        Err(_) => {
            return Err(status_text(
                StatusCode::GATEWAY_TIMEOUT,
                "no answer in time",
            ))
        }
        Ok(None) => return Err(status_text(StatusCode::SERVICE_UNAVAILABLE, "peer ended")),
        Ok(Some(v)) => v,
    };
    if let Some(err) = reply.get("error") {
        let code = err["code"].as_i64().unwrap_or(0);
        let message = err["message"].as_str().unwrap_or("resume failed");
        return Err(status_text(crate::http::status_of(code), message));
    }
    Ok(reply)
}

/// The stream's first chunk: the `resync` event or the replayed events,
/// then the turn's text so far when it joins mid-turn; empty when there
/// is nothing before the live frames.
fn replay_chunk(session_id: &str, last_seen: Option<u64>, result: &Value) -> String {
    let mut first = String::new();
    if let (true, Some(last_seen)) = (result["resync"] == true, last_seen) {
        let latest_seq = result["latest_seq"].as_u64().unwrap_or(0);
        let reason = if last_seen > latest_seq {
            "history_lost"
        } else {
            "replay_limit"
        };
        let data = json!({
            "session_id": session_id,
            "epoch": result["epoch"],
            "latest_seq": latest_seq,
            "last_seen": last_seen,
            "reason": reason,
        });
        write_event(&mut first, "resync", Some(latest_seq), &data.to_string());
    }
    if let Some(events) = result["events"].as_array() {
        for params in events {
            let kind = params["type"].as_str().unwrap_or("event");
            write_event(
                &mut first,
                kind,
                params["seq"].as_u64(),
                &params.to_string(),
            );
        }
    }
    if let Some(text) = mid_turn_delta(session_id, &result["active_turn"]) {
        write_event(&mut first, "message.delta", None, &text);
    }
    first
}

/// The `message.delta` params that give a stream joining mid-turn the
/// turn's text so far, at offset 0; `None` when no turn runs. The deltas
/// queued behind the resume continue from there (one that repeats text
/// already in it carries it at the same offset, which changes nothing).
fn mid_turn_delta(session_id: &str, active: &Value) -> Option<String> {
    let turn_id = TurnId::from(active.get("turn_id")?.as_str()?);
    let trace_id = TraceId::from(active.get("trace_id")?.as_str()?);
    let text = active.get("text")?.as_str()?.to_owned();
    let session_id = SessionId::from(session_id);
    let payload = to_raw(&DeltaPayload { text, offset: 0 });
    let ts = format_ts(now_ms());
    let params = encode_event_params(&EventParams {
        kind: EventType::MessageDelta,
        session_id: Some(&session_id),
        seq: None,
        turn_id: Some(&turn_id),
        trace_id: Some(&trace_id),
        ts: &ts,
        payload: &payload,
    });
    Some(params.get().to_owned())
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
    /// Reused for each batch the outbox hands over.
    batch: Vec<Outbound>,
    shutdown: watch::Receiver<bool>,
    /// Changes when the token configuration is reloaded: the peer then
    /// checks its token again.
    reloads: watch::Receiver<u64>,
    peer: ActorRef<PeerMsg>,
    /// Set after `session.closed` or `session.deleted`: the next poll ends
    /// the stream.
    done: bool,
    /// The gateway drains: write what is queued, then end.
    closing: bool,
    _guard: PeerGuard,
    /// Counted in `tether_connections_open{transport="sse"}` while it streams.
    _open: tether_actors::metrics::OpenConnection,
    /// Its place under its profile's connections.
    _place: tether_actors::Hold,
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

/// What the live stream woke up for.
enum Woke {
    Ready(bool),
    Drain,
    Quiet,
    Reloaded,
}

/// The next body chunk: every event the outbox had ready, encoded into
/// one buffer (one `write`), or a keep-alive comment after a quiet
/// [`KEEP_ALIVE`]; `None` ends the stream.
async fn next_live(mut st: Live) -> Option<(Result<Bytes, Infallible>, Live)> {
    if st.done {
        return None;
    }
    loop {
        let more = if st.closing {
            // Draining: what is queued (the endings of the turns the drain
            // just wrote) still goes out, then the stream ends.
            if let Some(item) = st.rx.try_recv() {
                st.batch.push(item);
            }
            !st.batch.is_empty()
        } else {
            let woke = tokio::select! {
                more = st.rx.recv_batch(&mut st.batch) => Woke::Ready(more),
                _ = st.shutdown.wait_for(|s| *s) => Woke::Drain,
                Ok(()) = st.reloads.changed() => Woke::Reloaded,
                () = tokio::time::sleep(KEEP_ALIVE) => Woke::Quiet,
            };
            match woke {
                Woke::Ready(more) => more,
                Woke::Drain => {
                    st.closing = true;
                    continue;
                }
                Woke::Quiet => return Some((Ok(Bytes::from_static(b": keep-alive\n\n")), st)),
                Woke::Reloaded => {
                    let _ = st.peer.cast(PeerMsg::Recheck);
                    continue;
                }
            }
        };
        if !more {
            return None;
        }
        let mut chunk = String::new();
        for item in st.batch.drain(..) {
            // A close (slow consumer) ends the stream after what came
            // before it: the client resumes from its watermark. A token
            // that expired or was revoked says so first, in an event a
            // browser's `EventSource` sees (it cannot see a close code).
            let bytes = match item {
                Outbound::Frame(bytes) => bytes,
                Outbound::Close { code, reason } => {
                    if matches!(code, CLOSE_TOKEN_EXPIRED | CLOSE_TOKEN_REVOKED) && !st.done {
                        let data = json!({ "code": code, "reason": reason });
                        write_event(&mut chunk, "gateway.closed", None, &data.to_string());
                    }
                    st.done = true;
                    break;
                }
            };
            if st.done {
                break;
            }
            st.done = encode_frame(&mut chunk, &bytes);
        }
        if chunk.is_empty() {
            if st.done {
                return None;
            }
            continue;
        }
        return Some((Ok(Bytes::from(chunk)), st));
    }
}

/// Appends the SSE form of one outbox frame (an event notification; any
/// other frame is skipped); whether it was `session.closed` or
/// `session.deleted`, after which nothing can follow.
fn encode_frame(chunk: &mut String, bytes: &[u8]) -> bool {
    let Ok(frame) = serde_json::from_slice::<Frame>(bytes) else {
        return false;
    };
    let (Some("event"), Some(params)) = (frame.method, frame.params) else {
        return false;
    };
    let Ok(head) = serde_json::from_str::<Head>(params.get()) else {
        return false;
    };
    write_event(chunk, head.kind, head.seq, params.get());
    matches!(head.kind, "session.closed" | "session.deleted")
}

/// `id: SEQ` (durable events only), `event: TYPE`, `data: PARAMS`, as
/// axum's `Event` writes them; the params are one line of JSON.
fn write_event(out: &mut String, kind: &str, seq: Option<u64>, data: &str) {
    use std::fmt::Write;
    if let Some(seq) = seq {
        let _ = writeln!(out, "id: {seq}");
    }
    let _ = write!(out, "event: {kind}\ndata: {data}\n\n");
}
