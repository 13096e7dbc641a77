//! Deleting one session from outside it: what `session.delete` (a peer)
//! and the retention sweep both do.
//!
//! A session that is live, or can be brought live, deletes itself (its
//! owner on a cluster: `session/delete.rs` says how). A closed one is never
//! brought live again (the registry answers with its row), and nothing
//! writes to it any more, so it is erased in the store directly.

use std::time::Duration;

use serde_json::value::RawValue;
use tether_protocol::{DeleteParams, DeleteResult, RpcError, SessionId, SessionWrite};

use crate::ctx::Ctx;
use crate::peer::ask;
use crate::registry::{RegistryMsg, Resolved};
use crate::session::SessionMsg;

use crate::session::ERASE_BATCH;

/// Deletes session `id` of `profile`: answered once it is erased, 4001 if
/// there is no such session (unknown, another profile's, already deleted).
/// With `life`, only that life of the id (its `created_at_ms`): a decision
/// made on an earlier read (retention's listing) never erases a session
/// created under the id since.
pub(crate) async fn delete_session(
    ctx: &Ctx,
    profile: &str,
    id: &SessionId,
    life: Option<i64>,
    timeout: Duration,
) -> Result<DeleteResult, RpcError> {
    let write = SessionWrite::SessionDelete(DeleteParams {
        session_id: id.clone(),
        profile: Some(profile.to_string()),
        life,
    });
    let (routed, answered) = send_write(ctx, profile, id, write, timeout).await?;
    match routed {
        Resolved::Live(_) => match tokio::time::timeout(timeout, answered).await {
            Ok(Ok(answer)) => serde_json::from_str(answer?.get())
                .map_err(|e| RpcError::internal(format!("a delete's answer: {e}"))),
            Ok(Err(_)) => Err(RpcError::internal(
                "the session stopped while deleting itself",
            )),
            Err(_) => Err(RpcError::internal("the session did not answer in time")),
        },
        Resolved::Closed(row) | Resolved::Stored(row) => {
            // The life read here is the one erased: the id may be reused
            // by the time the erase runs.
            if life.is_some_and(|life| life != row.created_at_ms) {
                return Err(RpcError::session_not_found());
            }
            let found = ctx
                .eraser
                .delete_session(profile, id, Some(row.created_at_ms), ERASE_BATCH)
                .await
                .map_err(|e| RpcError::new(e.code(), e.to_string()))?;
            let Some(branches) = found else {
                return Err(RpcError::session_not_found());
            };
            unlink_live(ctx, profile, &branches).await;
            Ok(DeleteResult { deleted: true })
        }
        Resolved::NotFound => Err(RpcError::session_not_found()),
    }
}

/// The answer of a write sent from outside a session ([`send_write`]).
pub(crate) type Answer = tokio::sync::oneshot::Receiver<Result<Box<RawValue>, RpcError>>;

/// Sends `write` to session `id` of `profile` as a peer's request would
/// reach it, bringing a stored one live for it: where the registry found
/// the session, and where the session answers (only a live one does).
pub(crate) async fn send_write(
    ctx: &Ctx,
    profile: &str,
    id: &SessionId,
    write: SessionWrite,
    wait: Duration,
) -> Result<(Resolved, Answer), RpcError> {
    let (tx, answered) = tokio::sync::oneshot::channel();
    let msg = SessionMsg::Write {
        write,
        reply: tx.into(),
    };
    let routed = forward(ctx, profile, id, msg, wait).await?;
    Ok((routed, answered))
}

/// Hands `msg` to session `id` of `profile` through the registry, bringing
/// a stored one live for it; where the registry found the session.
pub(crate) async fn forward(
    ctx: &Ctx,
    profile: &str,
    id: &SessionId,
    msg: SessionMsg,
    wait: Duration,
) -> Result<Resolved, RpcError> {
    let registry = ctx.registry()?;
    ask(
        &registry,
        |reply| RegistryMsg::Forward {
            key: (profile.to_string(), id.clone()),
            load: true,
            msg,
            reply,
        },
        wait,
    )
    .await?
}

/// Branches of an erased session that are live learn that their parent is
/// gone (the store has already unlinked them); one that is not live reads
/// its row when it is brought live.
pub(crate) async fn unlink_live(ctx: &Ctx, profile: &str, branches: &[SessionId]) {
    let Ok(registry) = ctx.registry() else {
        return;
    };
    for branch in branches {
        let _ = ask(
            &registry,
            |reply| RegistryMsg::Forward {
                key: (profile.to_string(), branch.clone()),
                load: false,
                msg: SessionMsg::Unlinked,
                reply,
            },
            ctx.config.call_timeout,
        )
        .await;
    }
}
