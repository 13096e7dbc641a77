//! The stop both front-ends offer (AI SDK `POST …/chat/{id}/stop`, AG-UI
//! `POST …/threads/{id}/stop`): `session.interrupt` of the chat's session,
//! whichever connection started its turn. The turn ends with
//! `message.complete` status `interrupted`, so every open stream of the
//! chat ends as its protocol says an interrupted answer ends.

use axum::body::Body;
use axum::http::{header, HeaderValue};
use axum::response::Response;
use serde_json::{json, Value};
use tether_protocol::PeerTransport;

use super::error::Refusal;
use super::peer::ViewPeer;
use super::request::Asked;
use crate::server::AppState;

/// Interrupts the chat's running turn: 200 `{"status": "interrupted" |
/// "idle"}`, 404 for a chat not used yet.
pub async fn stop(app: &AppState, asked: &Asked) -> Result<Response, Refusal> {
    let mut peer = ViewPeer::open(app, asked.caller.clone(), false, PeerTransport::Http).await?;
    let stopped = peer
        .call(
            "session.interrupt",
            json!({"session_id": asked.session_id()}),
        )
        .await?;
    Ok(json_response(&stopped))
}

/// A JSON body, 200.
pub fn json_response(v: &Value) -> Response {
    let mut resp = Response::new(Body::from(v.to_string()));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}
