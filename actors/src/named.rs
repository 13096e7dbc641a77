//! Sessions whose id the caller chooses: the gateway's front-end routes
//! (the AI SDK chat and AG-UI thread ids) derive a session id from the
//! profile and the client's own id, and create the session under it on
//! first use. Everything else about such a session is ordinary: it is
//! reached by that id through the usual methods, by any transport.

use tether_protocol::{CreateParams, RpcError, SessionId};

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
    ask(
        &registry,
        |reply| RegistryMsg::Create {
            profile: profile.to_string(),
            id: Some(id),
            params,
            attach: None,
            reply,
        },
        ctx.config.call_timeout,
    )
    .await??;
    Ok(())
}
