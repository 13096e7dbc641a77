//! `HostSupervisor`: starts, watches and restarts the compute hosts, and
//! routes everything between sessions and hosts.
//!
//! It keeps one [`Host`] actor per slot (`--hosts`), each owning one worker
//! process. Sessions never talk to a host: they ask the supervisor to start
//! a turn or a control request, and receive what the host says as
//! `SessionMsg::Turn` / `SessionMsg::ControlLate` messages. The supervisor
//! holds the only routing state (turn → slot and session; the control
//! waiters and late handlers of [`LateAcks`]), so a host's death is one
//! message that fails exactly what that host held, each thing exactly once.
//!
//! Restarts follow the slot's [`RestartTracker`]: a dead host is replaced
//! after its backoff (a host that cannot even be spawned counts as one that
//! died), and a slot that exceeds its intensity *rests* until its period has
//! passed, then is retried, while the other slots serve. Work that arrives
//! while no slot is up but one is starting waits for that slot's `hello`
//! ([`held`]). Only when no slot is up or coming do new turns fail with
//! `host_unavailable`; sessions read `up_slots` to answer 5019 before they
//! write anything, and `/readyz` reads `Metrics::hosts_ready` (slots whose
//! host said hello).
//!
//! The supervisor is also where the host edge is enforced ([`edge`]): a
//! `hello` that is not ours is refused, frames a host may not send are
//! dropped and logged sparingly, and a line over the host line cap ends
//! the turn it belonged to.

mod control;
mod edge;
mod fair;
mod held;
mod lifecycle;
mod routing;
mod start;

pub use start::{HostStart, StartState};

pub use control::ControlError;

use std::collections::HashMap;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorId, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};
use tether_protocol::{ControlRequest, HostStat, SessionId, TraceId, TurnId, TurnStart};
use tokio::task::JoinHandle;
use tracing::debug;

use crate::config::HostConfig;
use crate::host::{HostMsg, Incoming};
use crate::host_registry::HostRegistry;
use crate::late_acks::LateAcks;
use crate::session::SessionMsg;
use crate::sparse_log::SparseLog;
use crate::supervisor::RestartTracker;
use crate::turn::{ControlOutcome, TurnUpdate};

/// Longest pause between two sweeps of the late-ack table.
const MAX_TICK: Duration = Duration::from_secs(1);
/// How long `post_stop` waits for the Host actors to kill their processes.
const STOP_WAIT: Duration = Duration::from_secs(5);

pub enum HostSupervisorMsg {
    /// Start a turn on `preferred` if that slot is up and has room, else
    /// on the least loaded up slot with room (fewest active turns, then
    /// lowest slot); when every slot is full, the turn waits for one, its
    /// share decided among the waiting profiles ([`fair`]). The session
    /// gets `Started { host_id }`, then every host frame of the turn as
    /// `Event`/`End`/`Error`; with no slot up, `Error { host_unavailable }`
    /// alone. `End`/`Error` end the routing entry.
    StartTurn {
        start: TurnStart,
        preferred: Option<u32>,
        session: ActorRef<SessionMsg>,
        /// The session's profile: whose share of the slots the turn takes.
        profile: Arc<str>,
    },
    /// The session gave up on the turn: interrupt it and forget it; later
    /// frames of the turn are dropped.
    Abandon { turn_id: TurnId },
    /// A control request, on `preferred` or the least loaded up slot. The
    /// reply comes within `wait`: `Ack`/`Error`, or `Pending` at the
    /// deadline, after which the answer goes to `late` as
    /// `SessionMsg::ControlLate` (within the late-ack TTL). While no slot is
    /// up but one is starting, it waits for that slot's `hello` (at most the
    /// hello timeout, and within `wait`), then fails with `Error`.
    Control {
        request: ControlRequest,
        preferred: Option<u32>,
        wait: Duration,
        late: ActorRef<SessionMsg>,
        reply: RpcReplyPort<ControlOutcome>,
    },
    /// For `session.events.stats`.
    Hosts { reply: RpcReplyPort<Vec<HostStat>> },
    /// Drain: `shutdown` to every host, up to `shutdown_grace` for them to
    /// exit, then kill what is left; the reply comes when every host is gone.
    Shutdown { reply: RpcReplyPort<()> },
    /// Internal: frames the host of `slot` wrote, in order (`pid` is its
    /// process).
    Frames {
        slot: u32,
        incarnation: u64,
        pid: u32,
        frames: Vec<Incoming>,
    },
    /// Internal: the Host actor of `slot` stopped.
    HostStopped {
        slot: u32,
        incarnation: u64,
        reason: String,
    },
    /// Internal: the backoff of `slot` is over; start its replacement.
    Restart { slot: u32 },
    /// Internal: the rest of `slot` (past its intensity) is over; retry it.
    RestOver { slot: u32 },
    /// Internal: a held control request's wait for a host is over.
    HeldDue,
    /// Internal: a control request's wait is over.
    WaitersDue,
    /// Internal: periodic sweep of the late-ack table.
    Tick,
    /// Internal: the shutdown grace is over.
    ShutdownDeadline,
}

pub struct HostSupervisorArgs {
    pub config: HostConfig,
    /// Kept equal to the number of slots that can take work now.
    pub up_slots: Arc<AtomicUsize>,
    /// Host restarts and late acks are counted here.
    pub metrics: Arc<crate::metrics::Metrics>,
    /// Told the first `hello`, and when no slot is left before one.
    pub start: Arc<HostStart>,
}

/// Where a slot is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Process started, no `hello` yet.
    Starting,
    Up,
    /// Dead; a replacement starts after the backoff.
    Backoff,
    /// Dead past its restart intensity: retried once its period has passed.
    /// Takes no work meanwhile, and nothing waits for it.
    Resting,
    /// Dead for good (shutting down, or a policy that never restarts).
    Down,
}

impl Phase {
    fn as_str(self) -> &'static str {
        match self {
            Phase::Starting => "starting",
            Phase::Up => "up",
            Phase::Backoff => "backoff",
            Phase::Resting => "resting",
            Phase::Down => "down",
        }
    }
}

struct Slot {
    id: u32,
    phase: Phase,
    host: Option<ActorRef<HostMsg>>,
    /// Bumped at each start; frames and stops of older starts are stale.
    incarnation: u64,
    /// The process, once it said `hello`.
    pid: Option<u32>,
    active_turns: u32,
    /// Said `shutdown.ack`: finishing, takes no new work.
    finishing: bool,
    /// Its host was refused (a bad `hello`) and is being stopped: nothing
    /// it still says counts.
    refused: bool,
    /// Well-formed frames this host may not send, to log them sparingly.
    forbidden: SparseLog,
    tracker: RestartTracker,
}

impl Slot {
    fn usable(&self) -> bool {
        self.phase == Phase::Up && !self.finishing && self.host.is_some()
    }

    /// Usable, and running fewer turns than a host may (`0`: no cap).
    fn has_room(&self, max_turns: usize) -> bool {
        self.usable() && (max_turns == 0 || (self.active_turns as usize) < max_turns)
    }

    /// Up now, or starting or restarting (it will be up soon): a slot that
    /// rests or is down for good cannot take work.
    fn available(&self) -> bool {
        !matches!(self.phase, Phase::Down | Phase::Resting) && !self.finishing
    }
}

/// A running turn: which host runs it and who hears about it.
struct Route {
    slot: u32,
    session: ActorRef<SessionMsg>,
    profile: Arc<str>,
    session_id: SessionId,
    trace_id: TraceId,
}

/// A control request within its wait.
struct Waiter {
    reply: RpcReplyPort<ControlOutcome>,
    /// Becomes the late handler at the deadline.
    late: ActorRef<SessionMsg>,
}

pub struct HostSupervisorState {
    config: Arc<HostConfig>,
    up_slots: Arc<AtomicUsize>,
    metrics: Arc<crate::metrics::Metrics>,
    start: Arc<HostStart>,
    slots: Vec<Slot>,
    /// Host actor → (slot, incarnation).
    by_actor: HashMap<ActorId, (u32, u64)>,
    turns: HashMap<TurnId, Route>,
    /// Work waiting for a slot that is starting ([`held`]).
    held: held::HeldWork,
    /// Turns waiting for room on a slot that is up, per profile ([`fair`]).
    fair: fair::FairShare<held::HeldTurn>,
    acks: LateAcks<Waiter, ActorRef<SessionMsg>>,
    registry: HostRegistry,
    /// Draining or stopped: nothing restarts, nothing new is accepted.
    stopping: bool,
    shutdown_replies: Vec<RpcReplyPort<()>>,
    ticker: Option<JoinHandle<()>>,
    /// This actor, for the timers its handlers set.
    myself: ActorRef<HostSupervisorMsg>,
}

pub struct HostSupervisor;

impl Actor for HostSupervisor {
    type Msg = HostSupervisorMsg;
    type State = HostSupervisorState;
    type Arguments = HostSupervisorArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: HostSupervisorArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let HostSupervisorArgs {
            config,
            up_slots,
            metrics,
            start,
        } = args;
        let slots = (0..config.slots)
            .map(|i| Slot {
                id: u32::try_from(i).unwrap_or(u32::MAX),
                phase: Phase::Backoff,
                host: None,
                incarnation: 0,
                pid: None,
                active_turns: 0,
                finishing: false,
                refused: false,
                forbidden: SparseLog::default(),
                tracker: RestartTracker::new(config.restart),
            })
            .collect();
        let tick = (config.late_ack_ttl / 4).clamp(Duration::from_millis(50), MAX_TICK);
        let mut state = HostSupervisorState {
            acks: LateAcks::new(config.late_ack_ttl, config.late_ack_cap),
            registry: HostRegistry::new(config.data_dir.as_deref()),
            config: Arc::new(config),
            up_slots,
            metrics,
            start,
            slots,
            by_actor: HashMap::new(),
            turns: HashMap::new(),
            held: held::HeldWork::default(),
            fair: fair::FairShare::default(),
            stopping: false,
            shutdown_replies: Vec::new(),
            ticker: Some(myself.send_interval(tick, || HostSupervisorMsg::Tick)),
            myself: myself.clone(),
        };
        state.publish_up();
        for slot in 0..state.slots.len() as u32 {
            state.spawn_host(&myself, slot).await;
        }
        Ok(state)
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            HostSupervisorMsg::StartTurn {
                start,
                preferred,
                session,
                profile,
            } => state.start_turn(held::HeldTurn {
                start,
                preferred,
                session,
                profile,
            }),
            HostSupervisorMsg::Abandon { turn_id } => state.abandon(&turn_id),
            HostSupervisorMsg::Control {
                request,
                preferred,
                wait,
                late,
                reply,
            } => state.control(request, preferred, wait, late, reply),
            HostSupervisorMsg::Hosts { reply } => {
                let _ = reply.send(state.stats());
            }
            HostSupervisorMsg::Shutdown { reply } => state.shutdown(&myself, reply),
            HostSupervisorMsg::Frames {
                slot,
                incarnation,
                pid,
                frames,
            } => state.on_frames(slot, incarnation, pid, frames),
            HostSupervisorMsg::HostStopped {
                slot,
                incarnation,
                reason,
            } => state.on_host_stopped(&myself, slot, incarnation, &reason),
            HostSupervisorMsg::Restart { slot } => state.restart(&myself, slot).await,
            HostSupervisorMsg::RestOver { slot } => state.rest_over(&myself, slot),
            HostSupervisorMsg::HeldDue => state.expire_held(),
            HostSupervisorMsg::WaitersDue => state.time_out_waiters(),
            HostSupervisorMsg::Tick => {
                state.time_out_waiters();
                state.expire_late();
            }
            HostSupervisorMsg::ShutdownDeadline => state.shutdown_deadline(),
        }
        // Whatever the message was (a turn ended, a host said hello), a
        // slot may have room for a waiting turn now.
        state.grant_waiting();
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<Self::Msg>,
        evt: SupervisionEvent,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // Overrides ractor's default, which would stop the supervisor when a
        // host stops. A killed Host actor arrives as ActorTerminated too.
        let (cell, reason) = match evt {
            SupervisionEvent::ActorTerminated(cell, _, reason) => {
                (cell, reason.unwrap_or_else(|| "stopped".into()))
            }
            SupervisionEvent::ActorFailed(cell, err) => (cell, format!("host actor failed: {err}")),
            _ => return Ok(()),
        };
        if let Some((slot, incarnation)) = state.by_actor.remove(&cell.get_id()) {
            // Not handled here but queued as a message: supervision events
            // overtake ordinary messages in ractor, and the frames the host
            // wrote before it died may still be in the mailbox. Behind them,
            // a `turn.end` written just before a crash still ends its turn.
            let _ = myself.cast(HostSupervisorMsg::HostStopped {
                slot,
                incarnation,
                reason,
            });
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        state.stopping = true;
        if let Some(ticker) = state.ticker.take() {
            ticker.abort();
        }
        // ractor would otherwise kill the Host actors without their
        // post_stop, which is where each kills and reaps its process.
        myself
            .get_cell()
            .stop_children_and_wait(Some("host supervisor stopping".into()), Some(STOP_WAIT))
            .await;
        state.stopped();
        Ok(())
    }
}

/// Forwards a turn update; `false` when the session actor is gone (its
/// successor ends the turn from the store's marker, so the host should
/// stop working on it).
fn send_update(session: &ActorRef<SessionMsg>, turn_id: TurnId, update: TurnUpdate) -> bool {
    let sent = session.cast(SessionMsg::Turn { turn_id, update }).is_ok();
    if !sent {
        debug!("session is gone; turn update dropped");
    }
    sent
}

/// Now, on tokio's clock: deadlines and restart windows follow
/// `tokio::time::pause()` in tests like the timers that check them do.
fn now() -> std::time::Instant {
    tokio::time::Instant::now().into_std()
}
