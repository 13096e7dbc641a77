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

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ractor::rpc::CallResult;
use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef};
use serde_json::Value;
use tether_protocol::{
    now_ms, ControlRequest, CreateParams, HostStat, RpcError, SessionId, SessionInfo, TurnId,
    TurnStart,
};
use tether_store::{NewSession, SessionPatch};
use tokio::sync::mpsc;

use crate::config::HostConfig;
use crate::ctx::Ctx;
use crate::host_supervisor::{HostSupervisor, HostSupervisorArgs, HostSupervisorMsg};
use crate::registry::{RegistryMsg, Resolved};
use crate::session::SessionMsg;
use crate::store_writer::StoreWriterMsg;

pub use crate::event::EventRecord;
pub use crate::gateway::Child;
pub use crate::turn::{reasons, ControlOutcome, TurnUpdate};

/// The profile the hooks' sessions live in.
const PROFILE: &str = "default";

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
fn answer<T, E>(
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
    }
}

/// Every host slot's stats (its process's pid among them), or `None`
/// while the host supervisor is down or does not answer within `wait`.
pub async fn host_stats(ctx: &Ctx, wait: Duration) -> Option<Vec<HostStat>> {
    let hosts = ctx.hosts()?;
    let stats = hosts.call(|reply| HostSupervisorMsg::Hosts { reply }, Some(wait));
    answer(stats.await, "the host supervisor").ok()
}

/// What the writer answered one append of a [`WriterLoad`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppendOutcome {
    /// Session number `session`'s events up to `upto_seq` are on disk.
    Committed { session: usize, upto_seq: u64 },
    /// Session number `session`'s append was not written.
    Failed { session: usize, code: i64 },
}

/// The `StoreWriter` driven on its own: appends for sessions that exist
/// only in the store, each commit's outcome on one channel.
///
/// The writer answers an append to the session that sent it, by
/// generation: each session here takes its generation from a barrier, as
/// a live session does, and one stand-in actor tells the sessions apart by
/// it.
pub struct WriterLoad {
    writer: ActorRef<StoreWriterMsg>,
    stand_in: ActorRef<SessionMsg>,
    sessions: Vec<StoredSession>,
}

struct StoredSession {
    id: SessionId,
    append_gen: u64,
    next_seq: u64,
}

impl WriterLoad {
    /// Creates `sessions` sessions in the store (through the writer) and
    /// the stand-in that hears their commits.
    pub async fn start(
        ctx: &Ctx,
        sessions: usize,
    ) -> Result<(Self, mpsc::UnboundedReceiver<AppendOutcome>), HookError> {
        let writer = ctx.writer().ok_or(HookError::Gone("the store writer"))?;
        let mut stored = Vec::with_capacity(sessions);
        let mut by_gen = HashMap::with_capacity(sessions);
        for index in 0..sessions {
            let id = SessionId::new();
            let created = writer.call(
                |reply| StoreWriterMsg::Create {
                    session: Box::new(new_session(id.clone())),
                    events: Vec::new(),
                    reply,
                },
                None,
            );
            answer(created.await, "the store writer")?.map_err(RpcError::from)?;
            let barrier = writer.call(
                |reply| StoreWriterMsg::Barrier {
                    session_id: id.clone(),
                    reply,
                },
                None,
            );
            let barrier = answer(barrier.await, "the store writer")?.map_err(RpcError::from)?;
            by_gen.insert(barrier.append_gen, index);
            stored.push(StoredSession {
                id,
                append_gen: barrier.append_gen,
                next_seq: barrier.latest_seq + 1,
            });
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let (stand_in, _) = Actor::spawn(None, WriterStandIn, StandInState { by_gen, tx })
            .await
            .map_err(HookError::Spawn)?;
        let load = Self {
            writer,
            stand_in,
            sessions: stored,
        };
        Ok((load, rx))
    }

    /// Appends `events` to session number `session`, numbered after its
    /// last; the outcome comes on the channel.
    pub fn append(&mut self, session: usize, events: Vec<EventRecord>) -> Result<(), HookError> {
        let s = self
            .sessions
            .get_mut(session)
            .ok_or(HookError::Gone("no such session"))?;
        let rows = events
            .into_iter()
            .map(|mut rec| {
                rec.seq = Some(s.next_seq);
                s.next_seq += 1;
                rec.to_row()
            })
            .collect();
        self.writer
            .cast(StoreWriterMsg::Append {
                session_id: s.id.clone(),
                append_gen: s.append_gen,
                events: rows,
                patch: SessionPatch {
                    updated_at_ms: Some(now_ms()),
                    ..SessionPatch::default()
                },
                notify: self.stand_in.clone(),
            })
            .map_err(|_| HookError::Gone("the store writer"))
    }

    /// Stops the stand-in (the sessions stay in the store).
    pub fn stop(&self) {
        self.stand_in.stop(None);
    }
}

fn new_session(id: SessionId) -> NewSession {
    NewSession {
        id,
        profile: PROFILE.into(),
        title: String::new(),
        parent_session_id: None,
        kind: "chat".into(),
        close_on_disconnect: false,
        engine_pin: None,
        follow_profile_config: false,
        created_at_ms: now_ms(),
        message_count: 0,
    }
}

/// Hears the writer's answers for every session of a [`WriterLoad`].
struct WriterStandIn;

struct StandInState {
    by_gen: HashMap<u64, usize>,
    tx: mpsc::UnboundedSender<AppendOutcome>,
}

impl Actor for WriterStandIn {
    type Msg = SessionMsg;
    type State = StandInState;
    type Arguments = StandInState;

    async fn pre_start(
        &self,
        _myself: ActorRef<SessionMsg>,
        state: StandInState,
    ) -> Result<StandInState, ActorProcessingErr> {
        Ok(state)
    }

    async fn handle(
        &self,
        _myself: ActorRef<SessionMsg>,
        msg: SessionMsg,
        state: &mut StandInState,
    ) -> Result<(), ActorProcessingErr> {
        let outcome = match msg {
            SessionMsg::Committed {
                append_gen,
                upto_seq,
            } => state
                .by_gen
                .get(&append_gen)
                .map(|&session| AppendOutcome::Committed { session, upto_seq }),
            SessionMsg::AppendFailed {
                append_gen, code, ..
            } => state
                .by_gen
                .get(&append_gen)
                .map(|&session| AppendOutcome::Failed { session, code }),
            _ => None,
        };
        if let Some(outcome) = outcome {
            let _ = state.tx.send(outcome);
        }
        Ok(())
    }
}

/// What the host supervisor sent a [`HostsUnderTest`]'s stand-in session.
#[derive(Debug, Clone, PartialEq)]
pub enum ToSession {
    /// What happened to a turn (`SessionMsg::Turn`).
    Turn(TurnId, TurnUpdate),
    /// A control request's late answer (`SessionMsg::ControlLate`).
    ControlLate(String, Result<Value, String>),
}

/// A `HostSupervisor` on its own, with a stand-in session that passes on
/// what the supervisor tells it.
pub struct HostsUnderTest {
    supervisor: ActorRef<HostSupervisorMsg>,
    session: ActorRef<SessionMsg>,
    up: Arc<AtomicUsize>,
}

impl HostsUnderTest {
    /// Starts the supervisor (which starts its slots) and the stand-in.
    pub async fn start(
        config: HostConfig,
    ) -> Result<(Self, mpsc::UnboundedReceiver<ToSession>), HookError> {
        let up = Arc::new(AtomicUsize::new(0));
        let args = HostSupervisorArgs {
            config,
            up_slots: up.clone(),
            metrics: Default::default(),
        };
        let (supervisor, _) = Actor::spawn(None, HostSupervisor, args)
            .await
            .map_err(HookError::Spawn)?;
        let (tx, rx) = mpsc::unbounded_channel();
        let (session, _) = Actor::spawn(None, SessionStandIn, tx)
            .await
            .map_err(HookError::Spawn)?;
        let hosts = Self {
            supervisor,
            session,
            up,
        };
        Ok((hosts, rx))
    }

    /// Slots that can take work now (the supervisor's `up_slots`).
    pub fn slots_up(&self) -> usize {
        self.up.load(Ordering::Relaxed)
    }

    /// Every slot's stats.
    pub async fn stats(&self, wait: Duration) -> Result<Vec<HostStat>, HookError> {
        let stats = self
            .supervisor
            .call(|reply| HostSupervisorMsg::Hosts { reply }, Some(wait));
        answer(stats.await, "the host supervisor")
    }

    /// Starts a turn for the stand-in session.
    pub fn start_turn(&self, start: TurnStart, preferred: Option<u32>) -> Result<(), HookError> {
        self.supervisor
            .cast(HostSupervisorMsg::StartTurn {
                start,
                preferred,
                session: self.session.clone(),
            })
            .map_err(|_| HookError::Gone("the host supervisor"))
    }

    /// A control request for the stand-in session: its outcome within
    /// `wait` (a late answer comes as [`ToSession::ControlLate`]). Owns
    /// what it needs, so several can run at once.
    pub fn control(
        &self,
        request: ControlRequest,
        wait: Duration,
        bound: Duration,
    ) -> impl Future<Output = Result<ControlOutcome, HookError>> + 'static {
        let supervisor = self.supervisor.clone();
        let late = self.session.clone();
        async move {
            let outcome = supervisor.call(
                |reply| HostSupervisorMsg::Control {
                    request,
                    preferred: None,
                    wait,
                    late,
                    reply,
                },
                Some(bound),
            );
            answer(outcome.await, "the host supervisor")
        }
    }

    /// The drain: every host told to shut down, answered once all are gone.
    pub async fn shutdown(&self, wait: Duration) -> Result<(), HookError> {
        let done = self
            .supervisor
            .call(|reply| HostSupervisorMsg::Shutdown { reply }, Some(wait));
        answer(done.await, "the host supervisor")
    }

    /// Stops the supervisor and waits until it has stopped (its hosts
    /// killed).
    pub async fn stop_and_wait(&self, wait: Duration) -> Result<(), HookError> {
        self.supervisor
            .stop_and_wait(None, Some(wait))
            .await
            .map_err(|_| HookError::Timeout("stopping the host supervisor"))
    }

    /// Stops the supervisor and the stand-in without waiting.
    pub fn stop(&self) {
        self.supervisor.stop(None);
        self.session.stop(None);
    }
}

/// The session a [`HostsUnderTest`] starts turns for.
struct SessionStandIn;

impl Actor for SessionStandIn {
    type Msg = SessionMsg;
    type State = mpsc::UnboundedSender<ToSession>;
    type Arguments = mpsc::UnboundedSender<ToSession>;

    async fn pre_start(
        &self,
        _myself: ActorRef<SessionMsg>,
        tx: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(tx)
    }

    async fn handle(
        &self,
        _myself: ActorRef<SessionMsg>,
        msg: SessionMsg,
        tx: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let seen = match msg {
            SessionMsg::Turn { turn_id, update } => ToSession::Turn(turn_id, update),
            SessionMsg::ControlLate { request_id, result } => {
                ToSession::ControlLate(request_id, result)
            }
            _ => return Ok(()),
        };
        let _ = tx.send(seen);
        Ok(())
    }
}
