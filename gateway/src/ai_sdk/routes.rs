//! The routes `DefaultChatTransport` calls, and the two an app calls
//! itself (the transcript and the stop).

use axum::body::Body;
use axum::extract::{ConnectInfo, Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use tether_protocol::PeerTransport;

use super::body::{ChatRequest, Trigger};
use super::chunks::TurnChunks;
use super::messages::ui_messages;
use super::regenerate;
use crate::auth::Caller;
use crate::chat::error::{refused, Refusal};
use crate::chat::event::TetherEvent;
use crate::chat::interrupt::{json_response, stop};
use crate::chat::open::{attach_running, resume, resume_or_create};
use crate::chat::peer::{CallError, ViewPeer};
use crate::chat::request::{admit, chat, json_body, Asked, ProfileQuery};
use crate::chat::stream::{body, View};
use crate::http::{status_text, unavailable};
use crate::server::AppState;

type Remote = ConnectInfo<std::net::SocketAddr>;
type CallerExt = Option<axum::Extension<Caller>>;

/// Pages of `session.events.since` a transcript may take (10,000 events
/// each) before it is refused as too long to list.
const MAX_TRANSCRIPT_PAGES: usize = 20;

/// `POST /v1/ai-sdk/chat`: the prompt becomes a turn of the chat's
/// session, streamed as UI message chunks until it ends.
pub async fn post_chat(
    State(app): State<AppState>,
    ConnectInfo(remote): Remote,
    caller: CallerExt,
    Query(q): Query<ProfileQuery>,
    headers: HeaderMap,
    request: Body,
) -> Response {
    let caller = match admit(&app, crate::auth::caller_of(caller), remote.ip(), q.profile) {
        Ok(c) => c,
        Err(refusal) => return refusal.into_response(),
    };
    let req: ChatRequest = match json_body(&app, &headers, request).await {
        Ok(r) => r,
        Err(refusal) => return refusal.into_response(),
    };
    let asked = match chat(caller, &req.id) {
        Ok(a) => a,
        Err(refusal) => return refusal.into_response(),
    };
    let prompt = match req.prompt() {
        Ok(p) => p,
        Err(why) => return status_text(StatusCode::BAD_REQUEST, why),
    };
    let Some(mut peer) =
        ViewPeer::start(&app, asked.caller.clone(), true, PeerTransport::AiSdk).await
    else {
        return unavailable();
    };
    let mut submit = json!({"session_id": asked.session_id(), "text": prompt});
    // Decided before anything is created: a regenerate in a chat with no
    // answer yet is refused and leaves no session behind.
    if req.trigger == Trigger::Regenerate || req.message_id.is_some() {
        match regenerate::replaced_turn(&mut peer, &asked, &req).await {
            Ok(Some(turn)) => submit["replaces"] = json!(turn),
            Ok(None) => {}
            Err(refusal) => return refusal.into_response(),
        }
    }
    let attach = json!({"attach": true, "omit_messages": true});
    if let Err(e) = resume_or_create(&app, &mut peer, &asked, attach, req.seed()).await {
        return refused(&e);
    }
    let submitted = match peer.call("prompt.submit", submit).await {
        Ok(r) => r,
        Err(e) => return refused(&e),
    };
    let Some(turn_id) = submitted["turn_id"].as_str() else {
        return status_text(
            StatusCode::INTERNAL_SERVER_ERROR,
            "prompt.submit answered no turn",
        );
    };
    let chunks = TurnChunks::new(turn_id);
    let mut first = String::new();
    write_chunks(
        &mut first,
        &[chunks.start(asked.session_id().as_str(), submitted["trace_id"].as_str())],
    );
    stream_response(&app, &asked, peer, first, chunks)
}

/// `GET /v1/ai-sdk/chat/{id}/stream`: 204 when the chat has no running
/// turn; else that turn from its start (the same `messageId`), then live.
pub async fn get_stream(
    State(app): State<AppState>,
    ConnectInfo(remote): Remote,
    caller: CallerExt,
    Path(chat_id): Path<String>,
    Query(q): Query<ProfileQuery>,
) -> Response {
    let asked = match admit(&app, crate::auth::caller_of(caller), remote.ip(), q.profile)
        .and_then(|c| chat(c, &chat_id))
    {
        Ok(a) => a,
        Err(refusal) => return refusal.into_response(),
    };
    let Some(mut peer) =
        ViewPeer::start(&app, asked.caller.clone(), true, PeerTransport::AiSdk).await
    else {
        return unavailable();
    };
    let running = match attach_running(&mut peer, &asked).await {
        Ok(Some(r)) => r,
        Ok(None) => return StatusCode::NO_CONTENT.into_response(),
        Err(e) => return refused(&e),
    };
    let (turn_id, replay) = (running.turn_id.as_str(), &running.replay);
    let mut chunks = TurnChunks::new(turn_id);
    let mut out = vec![chunks.start(asked.session_id().as_str(), running.trace_id.as_deref())];
    for params in replay["events"].as_array().into_iter().flatten() {
        if let Some(ev) = TetherEvent::from_params(params) {
            chunks.event(&ev, &mut out);
        }
    }
    if !chunks.is_done() && replay["active_turn"]["turn_id"] == turn_id {
        if let Some(text) = replay["active_turn"]["text"].as_str() {
            chunks.text_so_far(text, &mut out);
        }
    }
    let mut first = String::new();
    write_chunks(&mut first, &out);
    stream_response(&app, &asked, peer, first, chunks)
}

/// `GET /v1/ai-sdk/chat/{id}/messages`: the chat's transcript as UI
/// messages (`[]` for a chat not used yet).
pub async fn get_messages(
    State(app): State<AppState>,
    ConnectInfo(remote): Remote,
    caller: CallerExt,
    Path(chat_id): Path<String>,
    Query(q): Query<ProfileQuery>,
) -> Response {
    let asked = match admit(&app, crate::auth::caller_of(caller), remote.ip(), q.profile)
        .and_then(|c| chat(c, &chat_id))
    {
        Ok(a) => a,
        Err(refusal) => return refusal.into_response(),
    };
    let Some(mut peer) =
        ViewPeer::start(&app, asked.caller.clone(), false, PeerTransport::Http).await
    else {
        return unavailable();
    };
    let events = match segment_events(&mut peer, &asked).await {
        Ok(events) => events,
        Err(refusal) => return refusal.into_response(),
    };
    json_response(&Value::Array(ui_messages(&events)))
}

/// `POST /v1/ai-sdk/chat/{id}/stop`: interrupts the chat's running turn,
/// whichever connection started it; every stream of it ends with `abort`.
pub async fn post_stop(
    State(app): State<AppState>,
    ConnectInfo(remote): Remote,
    caller: CallerExt,
    Path(chat_id): Path<String>,
    Query(q): Query<ProfileQuery>,
) -> Response {
    let asked = match admit(&app, crate::auth::caller_of(caller), remote.ip(), q.profile)
        .and_then(|c| chat(c, &chat_id))
    {
        Ok(a) => a,
        Err(refusal) => return refusal.into_response(),
    };
    stop(&app, &asked).await
}

/// The stored events of the chat session's current history segment, in
/// order (none for a chat not used yet).
pub async fn segment_events(
    peer: &mut ViewPeer,
    asked: &Asked,
) -> Result<Vec<TetherEvent>, Refusal> {
    let now = match resume(peer, asked, json!({"attach": false})).await {
        Ok(r) => r,
        Err(CallError::Rpc { code, .. }) if code == tether_protocol::codes::SESSION_NOT_FOUND => {
            return Ok(Vec::new())
        }
        Err(e) => return Err(refused(&e).into()),
    };
    let Some(first) = now["messages"][0]["seq"].as_u64() else {
        return Ok(Vec::new());
    };
    let latest = now["latest_seq"].as_u64().unwrap_or(0);
    let mut events = Vec::new();
    let mut last_seen = first - 1;
    for _ in 0..MAX_TRANSCRIPT_PAGES {
        let page = peer
            .call(
                "session.events.since",
                json!({"session_id": asked.session_id(), "last_seen": last_seen, "limit": 10000}),
            )
            .await
            .map_err(|e| Refusal::from(refused(&e)))?;
        for params in page["events"].as_array().into_iter().flatten() {
            if let Some(ev) = TetherEvent::from_params(params) {
                if ev.seq.is_some_and(|s| s > latest) {
                    continue;
                }
                if let Some(s) = ev.seq {
                    last_seen = s;
                }
                events.push(ev);
            }
        }
        if page["has_more"] != true || last_seen >= latest {
            return Ok(events);
        }
    }
    Err(status_text(
        StatusCode::PAYLOAD_TOO_LARGE,
        "the chat's history is too long to list",
    )
    .into())
}

/// A turn's stream: its chunks, then `data: [DONE]`.
struct TurnView(TurnChunks);

impl View for TurnView {
    fn events(&mut self, events: Vec<TetherEvent>, out: &mut String) -> bool {
        let mut chunks = Vec::new();
        for ev in &events {
            self.0.event(ev, &mut chunks);
        }
        write_chunks(out, &chunks);
        if self.0.is_done() {
            out.push_str("data: [DONE]\n\n");
        }
        self.0.is_done()
    }
}

fn write_chunks(out: &mut String, chunks: &[Value]) {
    for c in chunks {
        out.push_str("data: ");
        out.push_str(&c.to_string());
        out.push_str("\n\n");
    }
}

/// The response of a chat stream, with the headers the AI SDK's transport
/// expects (`UI_MESSAGE_STREAM_HEADERS`).
fn stream_response(
    app: &AppState,
    asked: &Asked,
    peer: ViewPeer,
    mut first: String,
    chunks: TurnChunks,
) -> Response {
    let done = chunks.is_done();
    if done {
        first.push_str("data: [DONE]\n\n");
    }
    let body = body(app, peer, first, TurnView(chunks), done);
    let mut resp = Response::new(body);
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(
        "x-vercel-ai-ui-message-stream",
        HeaderValue::from_static("v1"),
    );
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    if let Ok(v) = HeaderValue::from_str(asked.session_id().as_str()) {
        h.insert("x-tether-session-id", v);
    }
    resp
}
