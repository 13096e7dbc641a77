//! tether's transports: how clients reach the actor system. One axum
//! server carries the WebSocket (`/ws`), HTTP + SSE (`POST /rpc`,
//! `/v1/sessions/{id}/events`), the front-end views of sessions (the AI
//! SDK's `/v1/ai-sdk/…` and AG-UI's `/v1/ag-ui…`), the web console's
//! static files, `/metrics` and the probes, behind the token, Origin/Host
//! and rate-limit checks;
//! `--stdio` serves one peer over stdin/stdout. Every frame is handed to a
//! peer actor of `tether-actors`; nothing here keeps session state.
//!
//! The binary wires it: [`bind`] a listener, build an [`AppState`] from
//! the started gateway's context, and [`serve`] it (or [`serve_stdio`]).

mod ag_ui;
mod ai_sdk;
mod auth;
mod chat;
mod client_rate;
mod console;
mod event_id;
mod http;
mod limits;
mod listen;
mod metrics;
mod origin;
mod server;
mod sse;
mod stdio;
mod ws;

pub use auth::{
    Auth, AuthConfig, AuthError, HexError, JwksError, JwtConfig, JwtConfigError, TokenError, Tokens,
};
pub use client_rate::ClientBuckets;
/// The JWT algorithms `--jwt-algorithms` names.
pub use jsonwebtoken::Algorithm as JwtAlgorithm;
pub use listen::{bind, ListenLimits};
pub use server::{serve, AppState};
pub use stdio::{serve_stdio, StdioError};
pub use ws::shutdown_channel;
