//! The routes `DefaultChatTransport` calls, and the two an app calls
//! itself (the transcript and the stop).

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use tether_protocol::PeerTransport;

use super::body::{ChatRequest, Trigger};
use super::chunks::TurnChunks;
use super::messages::ui_messages;
use super::regenerate;
use crate::chat::error::Refusal;
use crate::chat::event::TetherEvent;
use crate::chat::interrupt::{json_response, stop};
use crate::chat::open::{attach_running, resume, submit_turn};
use crate::chat::peer::{CallError, ViewPeer};
use crate::chat::request::{json_body, Admitted, Asked};
use crate::chat::stream::{body, open_stream, sse_response, token_end, View};
use crate::http::status_text;
use crate::server::AppState;

/// Pages of `session.events.since` a transcript may take (10,000 events
/// each) before it is refused as too long to list. With the resume's own
/// bound on the segment's messages (`--max-resume-messages`, which the
/// segment's start is read with), what one listing holds in memory is
/// bounded twice: in messages and in events (PROTOCOL.md Part 4).
const MAX_TRANSCRIPT_PAGES: usize = 20;

/// `POST /v1/ai-sdk/chat`: the prompt becomes a turn of the chat's
/// session, streamed as UI message chunks until it ends.
pub async fn post_chat(
    State(app): State<AppState>,
    admitted: Admitted,
    headers: HeaderMap,
    request: Body,
) -> Result<Response, Refusal> {
    let req: ChatRequest = json_body(&app, &headers, request).await?;
    let asked = admitted.chat(&req.id)?;
    let prompt = req
        .prompt()
        .map_err(|why| Refusal::from(status_text(StatusCode::BAD_REQUEST, why)))?;
    // A stream is a connection: its place is taken before anything is asked.
    let place = open_stream(&app, &asked)?;
    let mut peer = ViewPeer::open(&app, asked.caller.clone(), true, PeerTransport::AiSdk).await?;
    let mut submit = json!({"session_id": asked.session_id(), "text": prompt});
    // Decided before anything is created: a regenerate in a chat with no
    // answer yet is refused and leaves no session behind.
    if req.trigger == Trigger::Regenerate || req.message_id.is_some() {
        if let Some(turn) = regenerate::replaced_turn(&mut peer, &asked, &req).await? {
            submit["replaces"] = json!(turn);
        }
    }
    let (_, submitted, turn_id) = submit_turn(&app, &mut peer, &asked, req.seed(), submit).await?;
    let chunks = TurnChunks::new(&turn_id);
    let mut first = String::new();
    write_chunks(
        &mut first,
        &[chunks.start(asked.session_id().as_str(), submitted["trace_id"].as_str())],
    );
    Ok(stream_response(&app, &asked, place, peer, first, chunks))
}

/// `GET /v1/ai-sdk/chat/{id}/stream`: 204 when the chat has no running
/// turn; else that turn from its start (the same `messageId`), then live.
pub async fn get_stream(
    State(app): State<AppState>,
    admitted: Admitted,
    Path(chat_id): Path<String>,
) -> Result<Response, Refusal> {
    let asked = admitted.chat(&chat_id)?;
    let place = open_stream(&app, &asked)?;
    let mut peer = ViewPeer::open(&app, asked.caller.clone(), true, PeerTransport::AiSdk).await?;
    let Some(running) = attach_running(&mut peer, &asked).await? else {
        return Ok(StatusCode::NO_CONTENT.into_response());
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
    Ok(stream_response(&app, &asked, place, peer, first, chunks))
}

/// `GET /v1/ai-sdk/chat/{id}/messages`: the chat's transcript as UI
/// messages (`[]` for a chat not used yet).
pub async fn get_messages(
    State(app): State<AppState>,
    admitted: Admitted,
    Path(chat_id): Path<String>,
) -> Result<Response, Refusal> {
    let asked = admitted.chat(&chat_id)?;
    let mut peer = ViewPeer::open(&app, asked.caller.clone(), false, PeerTransport::Http).await?;
    let events = segment_events(&mut peer, &asked).await?;
    Ok(json_response(&Value::Array(ui_messages(&events))))
}

/// `POST /v1/ai-sdk/chat/{id}/stop`: interrupts the chat's running turn,
/// whichever connection started it; every stream of it ends with `abort`.
pub async fn post_stop(
    State(app): State<AppState>,
    admitted: Admitted,
    Path(chat_id): Path<String>,
) -> Result<Response, Refusal> {
    stop(&app, &admitted.chat(&chat_id)?).await
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
        // The resume's "retry with omit_messages" means nothing to a
        // client of this route: say which bound it is over.
        Err(CallError::Rpc { code, .. }) if code == tether_protocol::codes::RESUME_TOO_LARGE => {
            return Err(status_text(
                StatusCode::PAYLOAD_TOO_LARGE,
                "the chat's history is too long to list: more messages than \
                 --max-resume-messages allows a transcript",
            )
            .into())
        }
        Err(e) => return Err(e.into()),
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
            .await?;
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
        "the chat's history is too long to list: more than 200,000 events",
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

    /// An `error` chunk whose text starts with the code an app acts on
    /// (`token_expired`: a new token, then `resumeStream()`).
    fn token_ended(&mut self, code: u16, out: &mut String) {
        let (name, text) = token_end(code);
        write_chunks(
            out,
            &[json!({"type": "error", "errorText": format!("{name}: {text}")})],
        );
    }
}

fn write_chunks(out: &mut String, chunks: &[Value]) {
    for c in chunks {
        out.push_str("data: ");
        out.push_str(&c.to_string());
        out.push_str("\n\n");
    }
}

/// The response of a chat stream, with the header the AI SDK's transport
/// expects (`UI_MESSAGE_STREAM_HEADERS`).
fn stream_response(
    app: &AppState,
    asked: &Asked,
    place: tether_actors::Hold,
    peer: ViewPeer,
    mut first: String,
    chunks: TurnChunks,
) -> Response {
    let done = chunks.is_done();
    if done {
        first.push_str("data: [DONE]\n\n");
    }
    let body = body(app, place, peer, first, TurnView(chunks), done);
    sse_response(body, asked, &[("x-vercel-ai-ui-message-stream", "v1")])
}
