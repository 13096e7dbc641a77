//! The AG-UI routes: a run (`HttpAgent.runAgent()`), the resume AG-UI
//! itself lacks (`connect()`), the stop, and the capabilities.

use axum::body::Body;
use axum::extract::{ConnectInfo, Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use tether_protocol::PeerTransport;

use super::capabilities::capabilities;
use super::cursor::Cursor;
use super::events::{RunEvents, Sent};
use super::input::RunAgentInput;
use crate::auth::Caller;
use crate::chat::error::refused;
use crate::chat::event::TetherEvent;
use crate::chat::interrupt::{json_response, stop};
use crate::chat::open::{attach_running, resume, resume_or_create};
use crate::chat::peer::ViewPeer;
use crate::chat::request::{admit, chat, json_body, Asked, ProfileQuery};
use crate::chat::stream::{body, View};
use crate::http::{status_text, unavailable};
use crate::server::AppState;

type Remote = ConnectInfo<std::net::SocketAddr>;
type CallerExt = Option<axum::Extension<Caller>>;

/// `POST /v1/ag-ui`: the input's last message becomes a turn of the
/// thread's session, streamed as one AG-UI run.
pub async fn post_run(
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
    let input: RunAgentInput = match json_body(&app, &headers, request).await {
        Ok(i) => i,
        Err(refusal) => return refusal.into_response(),
    };
    let asked = match chat(caller, &input.thread_id) {
        Ok(a) => a,
        Err(refusal) => return refusal.into_response(),
    };
    let prompt = match input.prompt() {
        Ok(p) => p,
        Err(why) => return status_text(StatusCode::BAD_REQUEST, why),
    };
    let Some(mut peer) =
        ViewPeer::start(&app, asked.caller.clone(), true, PeerTransport::AgUi).await
    else {
        return unavailable();
    };
    let attach = json!({"attach": true, "omit_messages": true});
    let resumed = match resume_or_create(&app, &mut peer, &asked, attach, input.seed()).await {
        Ok(r) => r,
        Err(e) => return refused(&e),
    };
    let submit = json!({"session_id": asked.session_id(), "text": prompt});
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
    // The run starts with its `message.user`, which the peer receives.
    let run = RunEvents::new(asked.chat.as_str(), turn_id, todos(&resumed));
    stream_response(&app, &asked, peer, String::new(), run)
}

/// `GET /v1/ag-ui/threads/{threadId}/events`: with `Last-Event-ID`, the
/// run continued exactly where the client was; without, the running run
/// from its start. 204 when there is nothing to send.
pub async fn get_events(
    State(app): State<AppState>,
    ConnectInfo(remote): Remote,
    caller: CallerExt,
    Path(thread_id): Path<String>,
    Query(q): Query<ProfileQuery>,
    headers: HeaderMap,
) -> Response {
    let asked = match admit(&app, crate::auth::caller_of(caller), remote.ip(), q.profile)
        .and_then(|c| chat(c, &thread_id))
    {
        Ok(a) => a,
        Err(refusal) => return refusal.into_response(),
    };
    let cursor = match headers.get("last-event-id") {
        None => None,
        Some(v) => match v.to_str().ok().and_then(Cursor::parse) {
            Some(c) => Some(c),
            None => {
                return status_text(
                    StatusCode::BAD_REQUEST,
                    "Last-Event-ID is not an id of tether's AG-UI events",
                )
            }
        },
    };
    let Some(mut peer) =
        ViewPeer::start(&app, asked.caller.clone(), true, PeerTransport::AgUi).await
    else {
        return unavailable();
    };
    let mut out: Sent = Vec::new();
    let (mut run, replay) = match cursor {
        Some(cursor) => match resume_at(&mut peer, &asked, cursor, &mut out).await {
            Ok(r) => r,
            Err(refusal) => return refusal,
        },
        None => match attach_running(&mut peer, &asked).await {
            Ok(Some(running)) => {
                let run = RunEvents::new(
                    asked.chat.as_str(),
                    &running.turn_id,
                    todos(&running.replay),
                );
                (run, running.replay)
            }
            Ok(None) => return StatusCode::NO_CONTENT.into_response(),
            Err(e) => return refused(&e),
        },
    };
    if run.is_done() {
        return StatusCode::NO_CONTENT.into_response();
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
    stream_response(&app, &asked, peer, first, run)
}

/// Attaches from the cursor's seq: the run the cursor is in, with what the
/// client has open opened again in `out`, and the resume's result.
async fn resume_at(
    peer: &mut ViewPeer,
    asked: &Asked,
    cursor: Cursor,
    out: &mut Sent,
) -> Result<(RunEvents, Value), Response> {
    let params = json!({"attach": true, "omit_messages": true, "last_seen": cursor.seq - 1});
    let replay = match resume(peer, asked, params).await {
        Ok(r) => r,
        Err(e) => return Err(refused(&e)),
    };
    if replay["latest_seq"]
        .as_u64()
        .is_some_and(|latest| cursor.seq > latest)
    {
        return Err(status_text(
            StatusCode::BAD_REQUEST,
            "Last-Event-ID names no event of this thread (it is past the thread's last one)",
        ));
    }
    if replay["resync"] == true {
        return Err(status_text(
            StatusCode::GONE,
            "the run is too far behind to replay: reload the thread",
        ));
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
        ));
    };
    let run = RunEvents::resume(asked.chat.as_str(), cursor, &at, todos(&replay), out).ok_or_else(
        || {
            status_text(
                StatusCode::BAD_REQUEST,
                "Last-Event-ID names no event of a run",
            )
        },
    )?;
    Ok((run, replay))
}

/// `POST /v1/ag-ui/threads/{threadId}/stop`: interrupts the running run;
/// every stream of it ends with `RUN_FINISHED` `{"outcome":{"type":"cancelled"}}`.
pub async fn post_stop(
    State(app): State<AppState>,
    ConnectInfo(remote): Remote,
    caller: CallerExt,
    Path(thread_id): Path<String>,
    Query(q): Query<ProfileQuery>,
) -> Response {
    match admit(&app, crate::auth::caller_of(caller), remote.ip(), q.profile)
        .and_then(|c| chat(c, &thread_id))
    {
        Ok(asked) => stop(&app, &asked).await,
        Err(refusal) => refusal.into_response(),
    }
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
    peer: ViewPeer,
    first: String,
    run: RunEvents,
) -> Response {
    let done = run.is_done();
    let mut resp = Response::new(body(app, peer, first, RunView(run), done));
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    if let Ok(v) = HeaderValue::from_str(asked.session_id().as_str()) {
        h.insert("x-tether-session-id", v);
    }
    resp
}
