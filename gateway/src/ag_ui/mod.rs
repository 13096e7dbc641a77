//! AG-UI (`@ag-ui/client` 1.x, CopilotKit's agent-UI protocol), as a view
//! of tether's sessions: an `HttpAgent` pointed at `POST /v1/ag-ui` runs
//! its prompts as turns of the thread's session. What AG-UI itself lacks
//! comes with it: every event has an SSE id, and
//! `GET /v1/ag-ui/threads/{threadId}/events` continues a run from one
//! (`connect()` of the TypeScript library's `TetherAgent`).
//! docs/PROTOCOL.md "The AG-UI routes" has the mapping.

mod capabilities;
mod cursor;
mod events;
mod input;
mod routes;

use axum::routing::{get, post};
use axum::Router;

use crate::server::AppState;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/ag-ui", post(routes::post_run))
        .route("/v1/ag-ui/capabilities", get(routes::get_capabilities))
        .route("/v1/ag-ui/threads/{id}/events", get(routes::get_events))
        .route("/v1/ag-ui/threads/{id}/stop", post(routes::post_stop))
}
