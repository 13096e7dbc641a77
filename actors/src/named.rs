//! Sessions whose id the caller chooses: the gateway's front-end routes
//! (the AI SDK chat and AG-UI thread ids) derive a session id from the
//! profile and the client's own id, and create the session under it on
//! first use. Everything else about such a session is ordinary: it is
//! reached by that id through the usual methods, by any transport.

use std::time::Duration;

use tether_protocol::{codes, CreateParams, RpcError, SessionId};
use tokio::time::Instant;
use tracing::debug;

use crate::ctx::Ctx;
use crate::peer::ask;
use crate::registry::RegistryMsg;

/// Creates session `id` in `profile` as `session.create` with `params`
/// would (one transaction: the session and its seed, or nothing), with
/// nobody attached. Fails like `session.create` does; a session that
/// already has this id makes it fail too (the store refuses the second
/// row), which the caller tells apart by resuming it. The caller's token
/// (`grant`) passes the same admission as `session.create` first
/// (`peer/admission.rs`): a token for a few sessions creates none.
///
/// A chat deleted a moment ago may still be erasing its old life under
/// this id: the store refuses the new one until the erase is done (the two
/// lives never share the id), and this waits for that, within the call's
/// bound, instead of failing the client's first request of the new chat.
pub async fn create_with_id(
    ctx: &Ctx,
    grant: Option<&crate::TokenGrant>,
    profile: &str,
    id: SessionId,
    params: CreateParams,
) -> Result<(), RpcError> {
    crate::peer::admission::admit_new_session(grant)?;
    // A token's own ceiling of live sessions, as for `session.create`.
    let ceiling = grant
        .and_then(|g| g.verified.limits.as_ref())
        .and_then(|l| l.live_sessions);
    if let Some(max) = ceiling {
        ctx.profiles
            .token_ceiling(profile, crate::Limit::LiveSessions, max)
            .map_err(|reached| reached.to_rpc())?;
    }
    let registry = ctx.registry()?;
    let params = CreateParams {
        attach: false,
        ..params
    };
    let deadline = Instant::now() + ctx.config.call_timeout;
    loop {
        let created = ask(
            &registry,
            |reply| RegistryMsg::Create {
                profile: profile.to_string(),
                id: Some(id.clone()),
                params: params.clone(),
                attach: None,
                reply,
            },
            ctx.config.call_timeout,
        )
        .await?;
        let wait = match &created {
            Err(e) if e.code == codes::SESSION_BUSY => retry_after(e),
            _ => None,
        };
        match wait {
            Some(wait) if Instant::now() + wait < deadline => {
                debug!(session_id = %id, "id still being erased; creating it again shortly");
                tokio::time::sleep(wait).await;
            }
            _ => return created.map(drop),
        }
    }
}

/// The wait a refusal asks for (`data.retry_after_ms`), if it asks one.
fn retry_after(e: &RpcError) -> Option<Duration> {
    let ms = e.data.as_ref()?.get("retry_after_ms")?.as_u64()?;
    Some(Duration::from_millis(ms))
}
