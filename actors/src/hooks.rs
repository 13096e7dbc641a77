//! Doors into the actor system for tether's own benchmarks (`bench/`) and
//! tests (`actors/tests/`, `tests/`), behind the `hooks` feature. Not an
//! API: `tether-gateway` does not enable the feature, and a transport needs
//! none of this (it reaches sessions only through its peer, which orders
//! every request with parking, `registry/route.rs`).
//!
//! Each door skips the peer for one reason, and none skips a session's
//! rules:
//!
//! - [`LiveSession`] injects durable events into a session as a turn's host
//!   frames would, to measure the commit and fan-out path without a host
//!   (`tether bench fanout|store|storm`) or to race it against resumes and
//!   writer restarts (`actors/tests/`). The events take the session's
//!   guarded path (`SessionMsg::EmitIfOpen`): nothing follows
//!   `session.closed`.
//! - [`WriterLoad`] drives the `StoreWriter` on its own (`tether bench
//!   writer`), for sessions that exist only in the store.
//! - [`HostsUnderTest`] runs the `HostSupervisor` on its own against real
//!   `tether host` processes (`tests/host_supervisor.rs`).
//! - [`core_actor`] and [`host_stats`] are what the chaos tests kill and
//!   where they find the host processes.

mod hosts;
mod writer;

use std::fmt;
use std::time::Duration;

use ractor::rpc::CallResult;
use ractor::{ActorCell, ActorRef};
use tether_protocol::{CreateParams, HostStat, RpcError, SessionId, SessionInfo};

use crate::ctx::Ctx;
use crate::host_supervisor::HostSupervisorMsg;
use crate::registry::{RegistryMsg, Resolved};
use crate::session::SessionMsg;

pub use crate::event::EventRecord;
pub use crate::gateway::Child;
pub use crate::turn::{ControlOutcome, TurnUpdate};
pub use hosts::{HostsUnderTest, ToSession};
pub use writer::{AppendOutcome, WriterLoad};

/// The profile the hooks' sessions live in.
pub(crate) const PROFILE: &str = "default";

/// Why a hook could not do what it was asked.
#[derive(Debug)]
pub enum HookError {
    /// The actor that should have answered is gone (or was never up).
    Gone(&'static str),
    /// No answer within the bound.
    Timeout(&'static str),
    /// The gateway refused, as it would refuse a client.
    Rpc(RpcError),
    /// The session is not live (and was not to be brought live).
    NotLive(SessionId),
    /// An actor could not be started.
    Spawn(ractor::SpawnErr),
}

impl fmt::Display for HookError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HookError::Gone(who) => write!(f, "{who} is gone"),
            HookError::Timeout(what) => write!(f, "{what} timed out"),
            HookError::Rpc(e) => write!(f, "{} ({})", e.message, e.code),
            HookError::NotLive(id) => write!(f, "session {id} is not live"),
            HookError::Spawn(e) => write!(f, "spawn: {e}"),
        }
    }
}

impl std::error::Error for HookError {}

impl From<RpcError> for HookError {
    fn from(e: RpcError) -> Self {
        HookError::Rpc(e)
    }
}

/// A `call`'s answer, or why there was none.
pub(crate) fn answer<T, E>(
    result: Result<CallResult<T>, ractor::MessagingErr<E>>,
    who: &'static str,
) -> Result<T, HookError> {
    match result {
        Ok(CallResult::Success(t)) => Ok(t),
        Ok(CallResult::Timeout) => Err(HookError::Timeout(who)),
        Ok(CallResult::SenderError) | Err(_) => Err(HookError::Gone(who)),
    }
}

/// A session's live actor, for injecting events as a turn would.
#[derive(Debug, Clone)]
pub struct LiveSession {
    id: SessionId,
    actor: ActorRef<SessionMsg>,
}

impl LiveSession {
    /// Creates a session in the default profile with nobody attached and
    /// returns it live.
    pub async fn create(ctx: &Ctx) -> Result<Self, HookError> {
        let registry = ctx.registry()?;
        let created = registry.call(
            |reply| RegistryMsg::Create {
                profile: PROFILE.into(),
                id: None,
                params: CreateParams {
                    attach: false,
                    ..CreateParams::default()
                },
                attach: None,
                reply,
            },
            None,
        );
        let created = answer(created.await, "the registry")??;
        Ok(Self {
            id: created.result.session.session_id,
            actor: created.actor,
        })
    }

    /// Session `id` of the default profile, brought live if it is parked.
    pub async fn resolve(ctx: &Ctx, id: &SessionId) -> Result<Self, HookError> {
        Self::lookup(ctx, id, true)
            .await?
            .ok_or_else(|| HookError::NotLive(id.clone()))
    }

    /// Session `id` of the default profile if it is live now.
    pub async fn find(ctx: &Ctx, id: &SessionId) -> Result<Option<Self>, HookError> {
        Self::lookup(ctx, id, false).await
    }

    /// A lookup only: unlike a peer's request, an event sent to the actor
    /// it returns may meet a park on the way (the session then has every
    /// event on disk, and the hook's caller resolves it again).
    async fn lookup(ctx: &Ctx, id: &SessionId, load: bool) -> Result<Option<Self>, HookError> {
        let registry = ctx.registry()?;
        let key = (PROFILE.to_string(), id.clone());
        let found = registry.call(
            |reply| RegistryMsg::Resolve { key, load, reply },
            Some(Duration::from_secs(10)),
        );
        match answer(found.await, "the registry")?? {
            Resolved::Live(live) => Ok(Some(Self {
                id: id.clone(),
                actor: live.actor,
            })),
            _ => Ok(None),
        }
    }

    pub fn id(&self) -> &SessionId {
        &self.id
    }

    /// Emits `events` unless the session is closed; does not wait. A
    /// [`flush`](Self::flush) after it answers once they are committed and
    /// fanned out.
    pub fn emit(&self, events: Vec<EventRecord>) -> Result<(), HookError> {
        self.actor
            .cast(SessionMsg::EmitIfOpen {
                events,
                reply: None,
            })
            .map_err(|_| HookError::Gone("the session"))
    }

    /// Answers once every event emitted so far is committed and fanned out.
    pub async fn flush(&self, wait: Option<Duration>) -> Result<(), HookError> {
        let flushed = self.actor.call(|reply| SessionMsg::Flush { reply }, wait);
        answer(flushed.await, "the session's flush")
    }

    /// The session's `SessionInfo`, as `session.list` would show it live.
    pub async fn info(&self) -> Result<SessionInfo, HookError> {
        let info = self.actor.call(|reply| SessionMsg::Info { reply }, None);
        answer(info.await, "the session")
    }

    /// Kills the actor (a crash: no `post_stop` work of its own is awaited).
    pub fn kill(&self) {
        self.actor.kill();
    }
}

/// The current actor of a core child of the root, if it is up: what the
/// chaos and supervision tests kill, and how they tell a restarted one
/// (a new id) from the old.
pub fn core_actor(ctx: &Ctx, child: Child) -> Option<ActorCell> {
    match child {
        Child::StoreWriter => ctx.writer().map(|a| a.get_cell()),
        Child::Registry => ctx.registry().ok().map(|a| a.get_cell()),
        Child::HostSupervisor => ctx.hosts().map(|a| a.get_cell()),
        Child::Reaper => ctx.reaper().map(|a| a.get_cell()),
        // Not published: nobody sends it anything.
        Child::Node => None,
    }
}

/// Every host slot's stats (its process's pid among them), or `None`
/// while the host supervisor is down or does not answer within `wait`.
pub async fn host_stats(ctx: &Ctx, wait: Duration) -> Option<Vec<HostStat>> {
    let hosts = ctx.hosts()?;
    let stats = hosts.call(|reply| HostSupervisorMsg::Hosts { reply }, Some(wait));
    answer(stats.await, "the host supervisor").ok()
}
