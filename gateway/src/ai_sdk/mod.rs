//! The Vercel AI SDK's UI message stream protocol, as a view of tether's
//! sessions: what `useChat` with `DefaultChatTransport` (the `ai` package)
//! speaks, so a front-end built on it works against tether by changing its
//! `api` (docs/CLIENTS.md, docs/PROTOCOL.md "The AI SDK routes").
//!
//! - `POST /v1/ai-sdk/chat`: a prompt, streamed back as one turn;
//! - `GET /v1/ai-sdk/chat/{id}/stream`: the running turn from its start
//!   (the transport's reconnect), or 204;
//! - `GET /v1/ai-sdk/chat/{id}/messages`: the transcript as UI messages;
//! - `POST /v1/ai-sdk/chat/{id}/stop`: interrupts the running turn.

mod body;
mod chunks;
mod messages;
mod regenerate;
mod routes;

use axum::routing::{get, post};
use axum::Router;

use crate::server::AppState;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/ai-sdk/chat", post(routes::post_chat))
        .route("/v1/ai-sdk/chat/{id}/stream", get(routes::get_stream))
        .route("/v1/ai-sdk/chat/{id}/messages", get(routes::get_messages))
        .route("/v1/ai-sdk/chat/{id}/stop", post(routes::post_stop))
}
