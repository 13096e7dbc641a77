//! `Registry`: the process-wide owner of live sessions.
//!
//! Live sessions are keyed by `(profile, session_id)`, never by connection:
//! a client that reconnects on a new socket resumes the same live session.
//! Creating and bringing sessions live is serialized here, so there is never
//! more than one actor per session; the store I/O it needs runs on tasks
//! that report back, so the registry's mailbox never waits on the disk.
//!
//! The registry supervises its sessions. A session that stops for any reason
//! leaves the map; the next request for it brings it back from the store
//! (restart on demand), so a crashed session loses nothing that was
//! committed.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ractor::{
    Actor, ActorCell, ActorId, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent,
};
use tether_protocol::{
    CreateParams, CreateResult, RingStats, RpcError, SessionId, SessionStatus, StatsResult, Todos,
};
use tether_store::{SessionRow, StoreError};
use tracing::{debug, info, warn};

mod create;
mod load;

pub(crate) use create::number_from_one;

use load::{end_interrupted_turns, load_session};

use crate::ctx::{Ctx, SessionGauges};
use crate::event::EventRecord;
use crate::reaper::{ParkReason, ReaperMsg};
use crate::session::{PeerLink, Session, SessionArgs, SessionMsg};
use crate::store_writer::Barrier;

/// A live session is found by profile and id.
pub type SessionKey = (String, SessionId);

/// A live session as a lookup hands it out.
#[derive(Debug, Clone)]
pub struct LiveSession {
    pub actor: ActorRef<SessionMsg>,
    /// Read by a caller whose message went unanswered: a session that
    /// parked in between never handled it, so it may be sent again.
    pub gauges: Arc<SessionGauges>,
}

/// What a lookup found.
#[derive(Debug, Clone)]
pub enum Resolved {
    Live(LiveSession),
    /// Exists in the store but is not live (only with `load: false`).
    Stored(Box<SessionRow>),
    Closed(Box<SessionRow>),
    NotFound,
}

pub enum RegistryMsg {
    /// `session.create`: persist (one transaction), bring live, maybe attach.
    Create {
        profile: String,
        params: CreateParams,
        attach: Option<PeerLink>,
        reply: RpcReplyPort<Result<CreatedSession, RpcError>>,
    },
    /// Find a session; with `load`, bring a stored (parked) one live.
    Resolve {
        key: SessionKey,
        load: bool,
        reply: RpcReplyPort<Result<Resolved, RpcError>>,
    },
    /// Peers attached to each of these live sessions (for listings).
    PeerCounts {
        profile: String,
        ids: Vec<SessionId>,
        reply: RpcReplyPort<HashMap<SessionId, u32>>,
    },
    /// `session.events.stats` for one profile.
    Stats {
        profile: String,
        reply: RpcReplyPort<StatsResult>,
    },
    /// A peer of this profile connected / disconnected.
    PeerUp {
        profile: String,
    },
    PeerDown {
        profile: String,
    },
    /// Answered once every live session has committed what it emitted.
    /// The gateway drains: every live session ends its turns; answered
    /// once all of them are committed and fanned out.
    DrainAll {
        reply: RpcReplyPort<()>,
    },
    FlushAll {
        reply: RpcReplyPort<()>,
    },
    /// The StoreWriter was restarted: sessions must rebase.
    WriterRestarted,
    /// The HostSupervisor was restarted: turns on its hosts are gone.
    HostsRestarted,
    /// The Reaper was restarted: sessions must report to the new one.
    ReaperRestarted,
    /// From the reaper: park this session if it is still parkable.
    Park {
        key: SessionKey,
        gen: u64,
        reason: ParkReason,
    },
    /// Internal: the session answered a park.
    ParkDone {
        key: SessionKey,
        gen: u64,
        parked: bool,
    },
    /// `session.branch`: a new session prepared by the caller (its row and
    /// first events, seqs from 1), written in one transaction.
    CreateFrom {
        new: Box<tether_store::NewSession>,
        initial: Vec<EventRecord>,
        attach: Option<PeerLink>,
        reply: RpcReplyPort<Result<CreatedSession, RpcError>>,
    },
    /// Internal: a new session's first events are committed.
    Created {
        row: Box<SessionRow>,
        initial: Vec<EventRecord>,
        attach: Option<PeerLink>,
        reply: RpcReplyPort<Result<CreatedSession, RpcError>>,
    },
    /// Internal: the store answered a load started by `Resolve`.
    Loaded {
        key: SessionKey,
        result: Result<Option<Loaded>, StoreError>,
    },
}

/// A new session: the `session.create` result and the live actor.
#[derive(Debug)]
pub struct CreatedSession {
    pub result: CreateResult,
    pub actor: ActorRef<SessionMsg>,
}

/// What a load read: the row, the barrier, and the latest todo snapshot.
#[derive(Debug)]
pub struct Loaded {
    row: SessionRow,
    barrier: Barrier,
    todos: Option<Todos>,
}

struct Live {
    actor: ActorRef<SessionMsg>,
    gauges: Arc<SessionGauges>,
    /// Until then the session is not parked: whoever resolved it is about
    /// to send it a message, and parking now would make that message miss.
    leased_until: Instant,
}

/// How long a resolve protects a session from the reapers. A peer sends
/// its message right after the resolve answers; this only has to outlast
/// that hop under load.
const RESOLVE_LEASE: Duration = Duration::from_secs(2);

pub struct RegistryState {
    ctx: Ctx,
    live: HashMap<SessionKey, Live>,
    by_actor: HashMap<ActorId, SessionKey>,
    /// Loads in flight and the callers waiting for them.
    loading: HashMap<SessionKey, Vec<RpcReplyPort<Result<Resolved, RpcError>>>>,
    /// Resolves waiting for a parked session's actor to stop before it is
    /// loaded again (never two actors for one session).
    after_park: HashMap<SessionKey, Vec<RpcReplyPort<Result<Resolved, RpcError>>>>,
    peers_by_profile: HashMap<String, u64>,
}

pub struct Registry;

impl Actor for Registry {
    type Msg = RegistryMsg;
    type State = RegistryState;
    type Arguments = Ctx;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        ctx: Ctx,
    ) -> Result<Self::State, ActorProcessingErr> {
        end_interrupted_turns(&ctx, &myself);
        // A restarted registry starts empty (its sessions stopped with the old one).
        ctx.metrics.sessions_live.set(0);
        Ok(RegistryState {
            ctx,
            live: HashMap::new(),
            by_actor: HashMap::new(),
            loading: HashMap::new(),
            after_park: HashMap::new(),
            peers_by_profile: HashMap::new(),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            RegistryMsg::Create {
                profile,
                params,
                attach,
                reply,
            } => state.create(&myself, profile, params, attach, reply),
            RegistryMsg::CreateFrom {
                new,
                initial,
                attach,
                reply,
            } => state.commit_new(&myself, *new, initial, attach, reply),
            RegistryMsg::Created {
                row,
                initial,
                attach,
                reply,
            } => state.created(&myself, *row, initial, attach, reply).await,
            RegistryMsg::Resolve { key, load, reply } => state.resolve(&myself, key, load, reply),
            RegistryMsg::Loaded { key, result } => state.loaded(&myself, key, result).await,
            RegistryMsg::PeerCounts {
                profile,
                ids,
                reply,
            } => {
                let counts = ids
                    .into_iter()
                    .filter_map(|id| {
                        let live = state.live.get(&(profile.clone(), id.clone()))?;
                        // A session parking right now is as good as parked.
                        (!live.gauges.parked()).then(|| (id, live.gauges.peers()))
                    })
                    .collect();
                let _ = reply.send(counts);
            }
            RegistryMsg::Stats { profile, reply } => state.stats(&profile, reply),
            RegistryMsg::PeerUp { profile } => {
                *state.peers_by_profile.entry(profile).or_default() += 1;
            }
            RegistryMsg::PeerDown { profile } => {
                if let Some(n) = state.peers_by_profile.get_mut(&profile) {
                    *n = n.saturating_sub(1);
                }
            }
            RegistryMsg::FlushAll { reply } => state.flush_all(reply),
            RegistryMsg::DrainAll { reply } => state.drain_all(reply),
            RegistryMsg::WriterRestarted => {
                for live in state.live.values() {
                    let _ = live.actor.cast(SessionMsg::WriterRestarted);
                }
            }
            RegistryMsg::HostsRestarted => {
                for live in state.live.values() {
                    let _ = live.actor.cast(SessionMsg::HostsLost);
                }
            }
            RegistryMsg::ReaperRestarted => {
                for live in state.live.values() {
                    let _ = live.actor.cast(SessionMsg::ReportToReaper);
                }
                state.report_live_count();
            }
            RegistryMsg::Park { key, gen, reason } => state.park(&myself, key, gen, reason),
            RegistryMsg::ParkDone { key, gen, parked } => {
                if !parked {
                    if let Some(reaper) = state.ctx.reaper() {
                        let _ = reaper.cast(ReaperMsg::ParkRefused { key, gen });
                    }
                }
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<Self::Msg>,
        evt: SupervisionEvent,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // Override ractor's default, which would stop the registry when any
        // session exits. A stopped session just leaves the map.
        match evt {
            SupervisionEvent::ActorTerminated(cell, _, reason) => {
                state.forget(&myself, &cell, reason.as_deref().unwrap_or("stopped"));
            }
            SupervisionEvent::ActorFailed(cell, err) => {
                warn!(error = %err, "session actor failed; it will be reloaded from the store on next use");
                state.forget(&myself, &cell, "failed");
            }
            _ => {}
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        myself: ActorRef<Self::Msg>,
        _state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // ractor would kill the children without their post_stop otherwise.
        myself
            .get_cell()
            .stop_children_and_wait(Some("registry stopping".into()), None)
            .await;
        Ok(())
    }
}

impl RegistryState {
    fn resolve(
        &mut self,
        myself: &ActorRef<RegistryMsg>,
        key: SessionKey,
        load: bool,
        reply: RpcReplyPort<Result<Resolved, RpcError>>,
    ) {
        if let Some(live) = self.live.get_mut(&key) {
            if live.gauges.parked() {
                // Parked and stopping: load it again once it is gone.
                if load {
                    self.after_park.entry(key).or_default().push(reply);
                } else {
                    self.resolve_stored(key, reply);
                }
                return;
            }
            live.leased_until = Instant::now() + RESOLVE_LEASE;
            let _ = reply.send(Ok(Resolved::Live(LiveSession {
                actor: live.actor.clone(),
                gauges: live.gauges.clone(),
            })));
            return;
        }
        if !load {
            self.resolve_stored(key, reply);
            return;
        }
        self.load(myself, key, vec![reply]);
    }

    /// Reads the row on a task; the caller only needs stored data.
    fn resolve_stored(&self, key: SessionKey, reply: RpcReplyPort<Result<Resolved, RpcError>>) {
        let reader = self.ctx.reader.clone();
        tokio::spawn(async move {
            let found = reader.get_session(&key.0, &key.1).await;
            let _ = reply.send(match found {
                Ok(Some(row)) if row.status == SessionStatus::Closed => {
                    Ok(Resolved::Closed(Box::new(row)))
                }
                Ok(Some(row)) => Ok(Resolved::Stored(Box::new(row))),
                Ok(None) => Ok(Resolved::NotFound),
                Err(e) => Err(e.into()),
            });
        });
    }

    /// Brings a stored session live; concurrent callers share one load.
    fn load(
        &mut self,
        myself: &ActorRef<RegistryMsg>,
        key: SessionKey,
        replies: Vec<RpcReplyPort<Result<Resolved, RpcError>>>,
    ) {
        match self.loading.entry(key.clone()) {
            Entry::Occupied(mut waiting) => waiting.get_mut().extend(replies),
            Entry::Vacant(slot) => {
                slot.insert(replies);
                let reader = self.ctx.reader.clone();
                let writer = self.ctx.writer();
                let myself = myself.clone();
                tokio::spawn(async move {
                    // The barrier inside queues behind a parked session's
                    // last patch at the writer, so the row read is current.
                    let result = load_session(reader.as_ref(), writer, &key).await;
                    let _ = myself.cast(RegistryMsg::Loaded { key, result });
                });
            }
        }
    }

    /// Asks a session to park, unless a resolve leased it just now. The
    /// session has the last word: it refuses with a peer, a turn or a
    /// queued prompt.
    fn park(
        &mut self,
        myself: &ActorRef<RegistryMsg>,
        key: SessionKey,
        gen: u64,
        reason: ParkReason,
    ) {
        let Some(live) = self.live.get(&key) else {
            return;
        };
        if live.leased_until > Instant::now() {
            let _ = myself.cast(RegistryMsg::ParkDone {
                key,
                gen,
                parked: false,
            });
            return;
        }
        let actor = live.actor.clone();
        let myself = myself.clone();
        tokio::spawn(async move {
            let parked = matches!(
                actor
                    .call(
                        |reply| SessionMsg::Park { reason, reply },
                        Some(Duration::from_secs(10))
                    )
                    .await,
                Ok(ractor::rpc::CallResult::Success(true))
            );
            let _ = myself.cast(RegistryMsg::ParkDone { key, gen, parked });
        });
    }

    fn gauges_of(&self, actor: &ActorRef<SessionMsg>) -> Arc<SessionGauges> {
        self.by_actor
            .get(&actor.get_id())
            .and_then(|key| self.live.get(key))
            .map(|l| l.gauges.clone())
            .unwrap_or_default()
    }

    fn report_live_count(&self) {
        self.ctx.metrics.sessions_live.set(self.live.len() as i64);
        if let Some(reaper) = self.ctx.reaper() {
            let _ = reaper.cast(ReaperMsg::LiveCount {
                live: self.live.len(),
            });
        }
    }

    async fn loaded(
        &mut self,
        myself: &ActorRef<RegistryMsg>,
        key: SessionKey,
        result: Result<Option<Loaded>, StoreError>,
    ) {
        let waiters = self.loading.remove(&key).unwrap_or_default();
        let answer = match result {
            Err(e) => Err(e.into()),
            Ok(None) => Ok(Resolved::NotFound),
            Ok(Some(loaded)) if loaded.row.status == SessionStatus::Closed => {
                Ok(Resolved::Closed(Box::new(loaded.row)))
            }
            Ok(Some(Loaded {
                mut row,
                barrier,
                todos,
            })) => {
                if row.status == SessionStatus::Parked {
                    // Live again: say so in the store too (listings read it).
                    row.status = SessionStatus::Idle;
                    if let Some(writer) = self.ctx.writer() {
                        let _ = writer.cast(crate::store_writer::StoreWriterMsg::Patch {
                            session_id: row.id.clone(),
                            patch: tether_store::SessionPatch {
                                status: Some(SessionStatus::Idle),
                                ..Default::default()
                            },
                            reply: None,
                        });
                    }
                }
                self.spawn_session(myself, key, row, barrier, todos, Vec::new())
                    .await
                    .map(|actor| {
                        let gauges = self.gauges_of(&actor);
                        Resolved::Live(LiveSession { actor, gauges })
                    })
            }
        };
        for w in waiters {
            let _ = w.send(answer.clone());
        }
    }

    async fn spawn_session(
        &mut self,
        myself: &ActorRef<RegistryMsg>,
        key: SessionKey,
        row: SessionRow,
        barrier: Barrier,
        todos: Option<Todos>,
        initial: Vec<EventRecord>,
    ) -> Result<ActorRef<SessionMsg>, RpcError> {
        let gauges = Arc::new(SessionGauges::default());
        let args = SessionArgs {
            row,
            todos,
            barrier,
            initial,
            ctx: self.ctx.clone(),
            gauges: gauges.clone(),
        };
        let (actor, _) = Actor::spawn_linked(None, Session, args, myself.get_cell())
            .await
            .map_err(|e| RpcError::internal(format!("session failed to start: {e}")))?;
        debug!(session_id = %key.1, profile = %key.0, "session brought live");
        self.by_actor.insert(actor.get_id(), key.clone());
        self.live.insert(
            key,
            Live {
                actor: actor.clone(),
                gauges,
                leased_until: Instant::now() + RESOLVE_LEASE,
            },
        );
        self.report_live_count();
        Ok(actor)
    }

    fn forget(&mut self, myself: &ActorRef<RegistryMsg>, cell: &ActorCell, reason: &str) {
        let Some(key) = self.by_actor.remove(&cell.get_id()) else {
            return;
        };
        info!(session_id = %key.1, reason, "session left the registry");
        if self
            .live
            .get(&key)
            .is_some_and(|l| l.actor.get_id() == cell.get_id())
        {
            self.live.remove(&key);
        }
        if let Some(reaper) = self.ctx.reaper() {
            let _ = reaper.cast(ReaperMsg::Gone { key: key.clone() });
        }
        self.report_live_count();
        if let Some(waiting) = self.after_park.remove(&key) {
            self.load(myself, key, waiting);
        }
    }

    /// Counts from the gauges; running turns and hosts are asked for on a
    /// task so the registry does not wait on sessions or the supervisor.
    /// Everything but the hosts' pids and states (and the process-wide
    /// outbox counters) is of `profile` alone.
    fn stats(&self, profile: &str, reply: RpcReplyPort<StatsResult>) {
        let mut ring = RingStats {
            sessions: 0,
            events: 0,
            bytes: 0,
        };
        let mut sessions_live = 0;
        let mut running = Vec::new();
        for ((p, _), live) in &self.live {
            if p != profile {
                continue;
            }
            sessions_live += 1;
            let events = live.gauges.ring_events.load(Ordering::Relaxed);
            if events > 0 {
                ring.sessions += 1;
            }
            ring.events += events;
            ring.bytes += live.gauges.ring_bytes.load(Ordering::Relaxed);
            if live.gauges.running() {
                running.push(live.actor.clone());
            }
        }
        let mut result = StatsResult {
            sessions_live,
            peers: self.peers_by_profile.get(profile).copied().unwrap_or(0),
            ring,
            active_turns: Vec::new(),
            hosts: Vec::new(),
            // Process-wide, unlike the rest: outboxes belong to no profile.
            outbox: self.ctx.outbox_metrics.snapshot(),
        };
        let hosts = self.ctx.hosts();
        tokio::spawn(async move {
            let wait = Some(std::time::Duration::from_secs(2));
            for actor in running {
                if let Ok(ractor::rpc::CallResult::Success(Some(turn))) = actor
                    .call(|reply| SessionMsg::ActiveTurn { reply }, wait)
                    .await
                {
                    result.active_turns.push(turn);
                }
            }
            if let Some(hosts) = hosts {
                if let Ok(ractor::rpc::CallResult::Success(h)) = hosts
                    .call(
                        |reply| crate::host_supervisor::HostSupervisorMsg::Hosts { reply },
                        wait,
                    )
                    .await
                {
                    result.hosts = h;
                }
            }
            // Every profile may see that the hosts are there (pid, state,
            // restarts), but not how busy other profiles keep them: a
            // host's count is of the caller's turns only.
            for host in &mut result.hosts {
                host.active_turns = result
                    .active_turns
                    .iter()
                    .filter(|t| t.host_id == host.host_id)
                    .count() as u32;
            }
            let _ = reply.send(result);
        });
    }

    fn drain_all(&self, reply: RpcReplyPort<()>) {
        let actors: Vec<_> = self.live.values().map(|l| l.actor.clone()).collect();
        tokio::spawn(async move {
            // At once, not one after another: each waits for its commit,
            // and the writer batches them together.
            let drains = actors
                .iter()
                .map(|actor| actor.call(|port| SessionMsg::Drain { reply: port }, None));
            futures::future::join_all(drains).await;
            let _ = reply.send(());
        });
    }

    fn flush_all(&self, reply: RpcReplyPort<()>) {
        let actors: Vec<_> = self.live.values().map(|l| l.actor.clone()).collect();
        tokio::spawn(async move {
            for actor in actors {
                let _ = actor
                    .call(|port| SessionMsg::Flush { reply: port }, None)
                    .await;
            }
            let _ = reply.send(());
        });
    }
}

fn storage_unavailable() -> RpcError {
    RpcError::new(
        tether_protocol::codes::STORAGE_UNAVAILABLE,
        "storage unavailable",
    )
}
