//! The AG-UI routes: a run (`HttpAgent.runAgent()`), the resume AG-UI
//! itself lacks (`connect()`), the stop, and the capabilities.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use tether_protocol::PeerTransport;

use super::capabilities::capabilities;
use super::cursor::{steps_of, Cursor};
use super::events::{RunEvents, Sent};
use super::input::RunAgentInput;
use crate::chat::error::Refusal;
use crate::chat::event::TetherEvent;
use crate::chat::interrupt::{json_response, stop};
use crate::chat::open::{attach_running, resume, submit_turn};
use crate::chat::peer::ViewPeer;
use crate::chat::request::{json_body, Admitted, Asked};
use crate::chat::stream::{body, open_stream, sse_response, token_end, View};
use crate::http::status_text;
use crate::server::AppState;

/// `POST /v1/ag-ui`: the input's last message becomes a turn of the
/// thread's session, streamed as one AG-UI run.
pub async fn post_run(
    State(app): State<AppState>,
    admitted: Admitted,
    headers: HeaderMap,
    request: Body,
) -> Result<Response, Refusal> {
    let input: RunAgentInput = json_body(&app, &headers, request).await?;
    let asked = admitted.chat(&input.thread_id)?;
    let prompt = input
        .prompt()
        .map_err(|why| Refusal::from(status_text(StatusCode::BAD_REQUEST, why)))?;
    // A stream is a connection: its place is taken before anything is asked.
    let place = open_stream(&app, &asked)?;
    let mut peer = ViewPeer::open(&app, asked.caller.clone(), true, PeerTransport::AgUi).await?;
    let submit = json!({"session_id": asked.session_id(), "text": prompt});
    let (resumed, _, turn_id) = submit_turn(&app, &mut peer, &asked, input.seed(), submit).await?;
    // The run starts with its `message.user`, which the peer receives.
    let run = RunEvents::new(asked.chat.as_str(), &turn_id, todos(&resumed));
    Ok(stream_response(
        &app,
        &asked,
        place,
        peer,
        String::new(),
        run,
    ))
}

/// `GET /v1/ag-ui/threads/{threadId}/events`: with `Last-Event-ID`, the
/// run continued exactly where the client was; without, the running run
/// from its start. 204 when there is nothing to send.
pub async fn get_events(
    State(app): State<AppState>,
    admitted: Admitted,
    Path(thread_id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, Refusal> {
    let asked = admitted.chat(&thread_id)?;
    let cursor = match headers.get("last-event-id") {
        None => None,
        Some(v) => match v.to_str().ok().and_then(Cursor::parse) {
            Some(c) => Some(c),
            None => {
                return Err(status_text(
                    StatusCode::BAD_REQUEST,
                    "Last-Event-ID is not an id of tether's AG-UI events",
                )
                .into())
            }
        },
    };
    let place = open_stream(&app, &asked)?;
    let mut peer = ViewPeer::open(&app, asked.caller.clone(), true, PeerTransport::AgUi).await?;
    let mut out: Sent = Vec::new();
    let (mut run, replay) = match cursor {
        Some(cursor) => resume_at(&mut peer, &asked, cursor, &mut out).await?,
        None => match attach_running(&mut peer, &asked).await? {
            Some(running) => {
                let run = RunEvents::new(
                    asked.chat.as_str(),
                    &running.turn_id,
                    todos(&running.replay),
                );
                (run, running.replay)
            }
            None => return Ok(StatusCode::NO_CONTENT.into_response()),
        },
    };
    if run.is_done() {
        return Ok(StatusCode::NO_CONTENT.into_response());
    }
    for params in replay["events"].as_array().into_iter().flatten() {
        if let Some(ev) = TetherEvent::from_params(params) {
            run.event(&ev, &mut out);
        }
    }
    if !run.is_done() {
        if let Some(text) = replay["active_turn"]["text"].as_str() {
            if replay["active_turn"]["turn_id"] == run.turn_id() {
                run.text_so_far(text, &mut out);
            }
        }
    }
    let mut first = String::new();
    write_events(&mut first, &out);
    Ok(stream_response(&app, &asked, place, peer, first, run))
}

/// Attaches from the cursor's seq: the run the cursor is in, with what the
/// client has open opened again in `out`, and the resume's result.
async fn resume_at(
    peer: &mut ViewPeer,
    asked: &Asked,
    cursor: Cursor,
    out: &mut Sent,
) -> Result<(RunEvents, Value), Refusal> {
    let params = json!({"attach": true, "omit_messages": true, "last_seen": cursor.seq - 1});
    let replay = resume(peer, asked, params).await?;
    if replay["latest_seq"]
        .as_u64()
        .is_some_and(|latest| cursor.seq > latest)
    {
        return Err(status_text(
            StatusCode::BAD_REQUEST,
            "Last-Event-ID names no event of this thread (it is past the thread's last one)",
        )
        .into());
    }
    if replay["resync"] == true {
        return Err(status_text(
            StatusCode::GONE,
            "the run is too far behind to replay: reload the thread",
        )
        .into());
    }
    let at = replay["events"]
        .as_array()
        .and_then(|e| e.first())
        .and_then(TetherEvent::from_params)
        .filter(|e| e.seq == Some(cursor.seq));
    let Some(at) = at else {
        return Err(status_text(
            StatusCode::GONE,
            "Last-Event-ID names an event this thread no longer has",
        )
        .into());
    };
    if cursor.step > steps_of(at.kind) {
        return Err(status_text(
            StatusCode::BAD_REQUEST,
            "Last-Event-ID is not an id of tether's AG-UI events",
        )
        .into());
    }
    let run = RunEvents::resume(asked.chat.as_str(), cursor, &at, todos(&replay), out).ok_or_else(
        || {
            Refusal::from(status_text(
                StatusCode::BAD_REQUEST,
                "Last-Event-ID names no event of a run",
            ))
        },
    )?;
    Ok((run, replay))
}

/// `POST /v1/ag-ui/threads/{threadId}/stop`: interrupts the running run;
/// every stream of it ends with `RUN_FINISHED` `{"outcome":{"type":"cancelled"}}`.
pub async fn post_stop(
    State(app): State<AppState>,
    admitted: Admitted,
    Path(thread_id): Path<String>,
) -> Result<Response, Refusal> {
    stop(&app, &admitted.chat(&thread_id)?).await
}

/// `GET /v1/ag-ui/capabilities`.
pub async fn get_capabilities() -> Response {
    json_response(&capabilities())
}

/// The session's todos from a resume's result, as the run's state.
fn todos(resumed: &Value) -> Option<Value> {
    resumed.get("todos").filter(|t| !t.is_null()).cloned()
}

/// A run's stream: its events, each with its id.
struct RunView(RunEvents);

impl View for RunView {
    fn events(&mut self, events: Vec<TetherEvent>, out: &mut String) -> bool {
        let mut sent = Vec::new();
        for ev in &events {
            self.0.event(ev, &mut sent);
        }
        write_events(out, &sent);
        self.0.is_done()
    }

    /// `RUN_ERROR` with the code an app acts on (`token_expired`,
    /// `token_revoked`). Without an `id`: a resume with the last id the
    /// client has goes on exactly where the run was.
    fn token_ended(&mut self, code: u16, out: &mut String) {
        use std::fmt::Write;
        let (name, text) = token_end(code);
        let event = json!({"type": "RUN_ERROR", "message": text, "code": name});
        let _ = write!(out, "data: {event}\n\n");
    }
}

fn write_events(out: &mut String, sent: &Sent) {
    use std::fmt::Write;
    for (cursor, event) in sent {
        let _ = write!(out, "id: {cursor}\ndata: {event}\n\n");
    }
}

fn stream_response(
    app: &AppState,
    asked: &Asked,
    place: tether_actors::Hold,
    peer: ViewPeer,
    first: String,
    run: RunEvents,
) -> Response {
    let done = run.is_done();
    sse_response(
        body(app, place, peer, first, RunView(run), done),
        asked,
        &[],
    )
}
