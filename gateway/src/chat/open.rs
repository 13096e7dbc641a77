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

/// The chat's running turn, attached to from its start.
pub struct Running {
    pub turn_id: String,
    pub trace_id: Option<String>,
    /// The attaching resume's result: `events` from the turn's
    /// `message.user` on, then `active_turn` with the text so far, and
    /// `todos`; live events follow on the peer.
    pub replay: Value,
}

/// Attaches `peer` to the chat's running turn from its start; `None` when
/// no turn runs (or the chat was never used).
pub async fn attach_running(
    peer: &mut ViewPeer,
    asked: &Asked,
) -> Result<Option<Running>, CallError> {
    // Which turn runs, and where it started...
    let now = match resume(peer, asked, json!({"attach": false, "omit_messages": true})).await {
        Ok(r) => r,
        Err(CallError::Rpc { code, .. }) if code == tether_protocol::codes::SESSION_NOT_FOUND => {
            return Ok(None)
        }
        Err(e) => return Err(e),
    };
    let active = &now["active_turn"];
    let Some(turn_id) = active["turn_id"].as_str() else {
        return Ok(None);
    };
    // ...then attach and replay from just before it, in one step, so that
    // every event of the turn comes once: replayed, or live after.
    let from = active["user_seq"]
        .as_u64()
        .map(|s| s.saturating_sub(1))
        .or_else(|| now["latest_seq"].as_u64())
        .unwrap_or(0);
    let params = json!({"attach": true, "omit_messages": true, "last_seen": from});
    let replay = resume(peer, asked, params).await?;
    Ok(Some(Running {
        turn_id: turn_id.to_string(),
        trace_id: active["trace_id"].as_str().map(str::to_string),
        replay,
    }))
}
