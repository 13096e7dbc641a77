//! What the front-end routes (`crate::ai_sdk`, `crate::ag_ui`) share: a
//! chat id and the session it names, the peer each request speaks
//! through, the checks every request passes, and the streamed body.
//! These routes are views of tether's own sessions: they add no state of
//! their own, and everything they do is a method of PROTOCOL 1.4.

pub mod error;
pub mod event;
pub mod id;
pub mod interrupt;
pub mod open;
pub mod peer;
pub mod request;
pub mod said;
pub mod stream;
pub mod text;
