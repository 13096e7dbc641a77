//! Reaching a chat's session: resume it, or create it on first use.
//!
//! A chat id names its session before the session exists (`id.rs`), so the
//! first request of a chat creates it, seeded with the conversation the
//! client already has. Two first requests at once (two tabs opened
//! together) must not both write it: the second row would fail in the
//! store, and with it the other writes committed in the same transaction.
//! So within a gateway the creations of one id take turns, and each looks
//! again before it creates: the second finds the session the first made.
//! Between the nodes of a cluster, the claim a node takes on a new id
//! before writing it does the same (the second node's claim finds the
//! first's, and its create fails before any write), and the request then
//! resumes the session that exists.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use serde_json::{json, Value};
use tether_protocol::{CreateParams, SeedMessage, SessionId};

use axum::http::StatusCode;

use super::error::Refusal;
use super::peer::{CallError, ViewPeer};
use super::request::Asked;
use crate::http::status_text;
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
    let _turn = Creating::take(asked.session_id()).await;
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
    let created = tether_actors::create_with_id(
        &app.ctx,
        asked.caller.grant.as_ref(),
        asked.profile(),
        asked.session_id(),
        create,
    )
    .await;
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

/// The ids being created in this process, each with the lock its
/// creators take turns on; an entry lives while someone holds or waits for
/// it.
static CREATING: LazyLock<Mutex<HashMap<SessionId, Arc<tokio::sync::Mutex<()>>>>> =
    LazyLock::new(Default::default);

/// One creator's turn at an id.
struct Creating {
    id: SessionId,
    lock: Arc<tokio::sync::Mutex<()>>,
    _turn: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl Creating {
    async fn take(id: SessionId) -> Creating {
        let lock = {
            let mut all = CREATING.lock().unwrap_or_else(|e| e.into_inner());
            all.entry(id.clone()).or_default().clone()
        };
        let turn = lock.clone().lock_owned().await;
        Creating {
            id,
            lock,
            _turn: Some(turn),
        }
    }
}

impl Drop for Creating {
    fn drop(&mut self) {
        self._turn = None;
        let mut all = CREATING.lock().unwrap_or_else(|e| e.into_inner());
        // The map's reference and this one: nobody else waits.
        if Arc::strong_count(&self.lock) == 2 {
            all.remove(&self.id);
        }
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

/// A prompt of a front-end's POST: the chat's session resumed (attached,
/// without its messages) or created from `seed`, then `submit` as
/// `prompt.submit`. The resume's result, the submit's, and its turn id.
pub async fn submit_turn(
    app: &AppState,
    peer: &mut ViewPeer,
    asked: &Asked,
    seed: Vec<SeedMessage>,
    submit: Value,
) -> Result<(Value, Value, String), Refusal> {
    // A prompt the gateway would refuse is refused before its chat's
    // session is created: a refused request leaves nothing behind.
    if let Err(e) = tether_protocol::Request::from_parts("prompt.submit", submit.clone()) {
        return Err(status_text(super::error::status_of(e.code), &e.message).into());
    }
    let attach = json!({"attach": true, "omit_messages": true});
    let resumed = resume_or_create(app, peer, asked, attach, seed).await?;
    let submitted = peer.call("prompt.submit", submit).await?;
    let Some(turn_id) = submitted["turn_id"].as_str().map(str::to_string) else {
        return Err(status_text(
            StatusCode::INTERNAL_SERVER_ERROR,
            "prompt.submit answered no turn",
        )
        .into());
    };
    Ok((resumed, submitted, turn_id))
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
