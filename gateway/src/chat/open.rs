//! Reaching a chat's session: resume it, or create it on first use.
//!
//! A chat id names its session before the session exists (`id.rs`), so the
//! first request of a chat creates it, seeded with the conversation the
//! client already has. Two first requests at once (two tabs, two nodes of
//! a cluster) both try; the store takes one session under the id and
//! refuses the other, whose request then resumes the one that exists.

use serde_json::{json, Value};
use tether_protocol::{CreateParams, SeedMessage};

use super::peer::{CallError, ViewPeer};
use super::request::Asked;
use crate::server::AppState;

/// `session.resume` of the chat's session with `params` (besides its id).
pub async fn resume(peer: &mut ViewPeer, asked: &Asked, params: Value) -> Result<Value, CallError> {
    let mut all = json!({"session_id": asked.session_id()});
    if let (Some(all), Some(extra)) = (all.as_object_mut(), params.as_object()) {
        all.extend(extra.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    peer.call("session.resume", all).await
}

/// Resumes the chat's session, creating it first with `seed` as its
/// transcript when it does not exist.
pub async fn resume_or_create(
    app: &AppState,
    peer: &mut ViewPeer,
    asked: &Asked,
    params: Value,
    seed: Vec<SeedMessage>,
) -> Result<Value, CallError> {
    match resume(peer, asked, params.clone()).await {
        Err(CallError::Rpc { code, .. }) if code == tether_protocol::codes::SESSION_NOT_FOUND => {}
        other => return other,
    }
    let create = CreateParams {
        title: Some(format!("chat {}", asked.chat.as_str())),
        profile: None,
        close_on_disconnect: false,
        attach: false,
        messages: seed,
        engine: None,
        follow_profile_config: false,
        delivery: None,
    };
    let created =
        tether_actors::create_with_id(&app.ctx, asked.profile(), asked.session_id(), create).await;
    match (created, resume(peer, asked, params).await) {
        (_, Ok(result)) => Ok(result),
        // The session is not there after all: what the create said.
        (Err(e), Err(CallError::Rpc { code, .. }))
            if code == tether_protocol::codes::SESSION_NOT_FOUND =>
        {
            Err(CallError::Rpc {
                code: e.code,
                message: e.message,
            })
        }
        (_, Err(e)) => Err(e),
    }
}
