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

use load::{end_interrupted_turns, load_session};

use crate::ctx::{Ctx, SessionGauges};
use crate::event::EventRecord;
use crate::session::{PeerLink, Session, SessionArgs, SessionMsg};
use crate::store_writer::Barrier;

/// A live session is found by profile and id.
pub type SessionKey = (String, SessionId);

/// What a lookup found.
#[derive(Debug, Clone)]
pub enum Resolved {
    Live(ActorRef<SessionMsg>),
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
    FlushAll {
        reply: RpcReplyPort<()>,
    },
    /// The StoreWriter was restarted: sessions must rebase.
    WriterRestarted,
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
}

pub struct RegistryState {
    ctx: Ctx,
    live: HashMap<SessionKey, Live>,
    by_actor: HashMap<ActorId, SessionKey>,
    /// Loads in flight and the callers waiting for them.
    loading: HashMap<SessionKey, Vec<RpcReplyPort<Result<Resolved, RpcError>>>>,
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
        Ok(RegistryState {
            ctx,
            live: HashMap::new(),
            by_actor: HashMap::new(),
            loading: HashMap::new(),
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
                        Some((id, live.gauges.peers()))
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
            RegistryMsg::WriterRestarted => {
                for live in state.live.values() {
                    let _ = live.actor.cast(SessionMsg::WriterRestarted);
                }
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        _myself: ActorRef<Self::Msg>,
        evt: SupervisionEvent,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // Override ractor's default, which would stop the registry when any
        // session exits. A stopped session just leaves the map.
        match evt {
            SupervisionEvent::ActorTerminated(cell, _, reason) => {
                state.forget(&cell, reason.as_deref().unwrap_or("stopped"));
            }
            SupervisionEvent::ActorFailed(cell, err) => {
                warn!(error = %err, "session actor failed; it will be reloaded from the store on next use");
                state.forget(&cell, "failed");
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
        if let Some(live) = self.live.get(&key) {
            let _ = reply.send(Ok(Resolved::Live(live.actor.clone())));
            return;
        }
        if !load {
            // Read the row on a task; the caller only needs stored data.
            let reader = self.ctx.reader.clone();
            tokio::spawn(async move {
                let found = reader.get_session(&key.0, &key.1).await;
                let _ = reply.send(match found {
                    Ok(Some(row)) if row.status == SessionStatus::Closed => {
                        Ok(Resolved::Closed(Box::new(row)))
                    }
                    Ok(Some(row)) => Ok(Resolved::Stored(Box::new(row))),
                    Ok(None) => Ok(Resolved::NotFound),
                    Err(e) => Err(RpcError::new(e.code(), e.to_string())),
                });
            });
            return;
        }
        match self.loading.entry(key.clone()) {
            Entry::Occupied(mut waiting) => waiting.get_mut().push(reply),
            Entry::Vacant(slot) => {
                slot.insert(vec![reply]);
                let reader = self.ctx.reader.clone();
                let writer = self.ctx.writer();
                let myself = myself.clone();
                tokio::spawn(async move {
                    let result = load_session(reader.as_ref(), writer, &key).await;
                    let _ = myself.cast(RegistryMsg::Loaded { key, result });
                });
            }
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
            Err(e) => Err(RpcError::new(e.code(), e.to_string())),
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
                    row.status = SessionStatus::Idle;
                }
                self.spawn_session(myself, key, row, barrier, todos, Vec::new())
                    .await
                    .map(Resolved::Live)
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
            },
        );
        Ok(actor)
    }

    fn forget(&mut self, cell: &ActorCell, reason: &str) {
        if let Some(key) = self.by_actor.remove(&cell.get_id()) {
            info!(session_id = %key.1, reason, "session left the registry");
            self.live.remove(&key);
        }
    }

    /// Counts from the gauges; running turns and hosts are asked for on a
    /// task so the registry does not wait on sessions or the supervisor.
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
            let _ = reply.send(result);
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
