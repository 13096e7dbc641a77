//! `Registry`: the process-wide owner of live sessions.
//!
//! Live sessions are keyed by `(profile, session_id)`, never by connection:
//! a client that reconnects on a new socket resumes the same live session.
//! Creating and bringing sessions live is serialized here, so there is never
//! more than one actor per session; the store I/O it needs runs on tasks
//! that report back, so the registry's mailbox never waits on the disk.
//!
//! Requests for a session reach it through here (`Forward`, see `route`):
//! the registry orders them with parking, so a request is never lost to a
//! session that parks between the lookup and the message.
//!
//! The registry supervises its sessions. A session that stops for any reason
//! leaves the map; the next request for it brings it back from the store
//! (restart on demand), so a crashed session loses nothing that was
//! committed.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use ractor::{Actor, ActorId, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};
use tether_protocol::{CreateParams, CreateResult, RpcError, SessionId, StatsResult, Todos};
use tether_store::{SessionRow, StoreError};
use tracing::warn;

mod bound;
mod create;
mod fleet;
mod follow;
pub(crate) mod ledger;
mod load;
mod route;

pub(crate) use create::number_from_one;

use load::end_interrupted_turns;
use route::Routed;

use crate::ctx::{Ctx, SessionGauges};
use crate::event::EventRecord;
use crate::reaper::{ParkReason, ReaperMsg};
use crate::session::{PeerLink, SessionMsg};
use crate::store_writer::Barrier;

/// A live session is found by profile and id.
pub type SessionKey = (String, SessionId);

/// A live session as a lookup hands it out.
#[derive(Debug, Clone)]
pub struct LiveSession {
    pub actor: ActorRef<SessionMsg>,
}

/// What a lookup found, or where a forwarded request went.
#[derive(Debug, Clone)]
pub enum Resolved {
    /// Live; for a `Forward`, this actor has the message.
    Live(LiveSession),
    /// Exists in the store but is not live (only with `load: false`).
    Stored(Box<SessionRow>),
    Closed(Box<SessionRow>),
    NotFound,
}

pub enum RegistryMsg {
    /// `session.create`: persist (one transaction), bring live, maybe attach.
    /// `id` is the new session's id when the caller chose it (the chat
    /// sessions of `crate::named`); `None` mints one.
    Create {
        profile: String,
        id: Option<SessionId>,
        params: CreateParams,
        attach: Option<PeerLink>,
        reply: RpcReplyPort<Result<CreatedSession, RpcError>>,
    },
    /// Find a session; with `load`, bring a stored (parked) one live. A
    /// lookup only: a message sent to the actor it returns may meet a park
    /// on the way (tests and benchmarks drive sessions so); requests go
    /// through `Forward`.
    Resolve {
        key: SessionKey,
        load: bool,
        reply: RpcReplyPort<Result<Resolved, RpcError>>,
    },
    /// Deliver `msg` to the session (with `load`, brought live if stored),
    /// ordered with parking so it is never lost to one (`route`). Answers
    /// `Live` with the actor that has the message (its own reply port then
    /// answers), or, when nobody took it, what was found instead.
    Forward {
        key: SessionKey,
        load: bool,
        msg: SessionMsg,
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
    /// `orphaning` names the reaper's entry the park belongs to, so that a
    /// refusal reaches only that one (`reaper.rs`).
    Park {
        key: SessionKey,
        orphaning: u64,
        reason: ParkReason,
    },
    /// From the reaper: a session became an idle orphan while more are
    /// live than `--max-live-sessions`; park past the bound (`bound.rs`).
    EnforceBound,
    /// Internal: sessions that refused a park for the bound are
    /// candidates again.
    BoundRetry,
    /// Internal: the session `actor` answered a park.
    ParkDone {
        key: SessionKey,
        orphaning: u64,
        actor: ActorId,
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
    /// Internal: a create that was not committed (refused, failed) ended:
    /// the requests held for its id go on as if it never began.
    CreateEnded {
        key: SessionKey,
    },
    /// Internal: a new session's first events are committed.
    Created {
        row: Box<SessionRow>,
        /// The generation its appends start at (the writer's answer).
        append_gen: u64,
        initial: Vec<EventRecord>,
        attach: Option<PeerLink>,
        reply: RpcReplyPort<Result<CreatedSession, RpcError>>,
        /// Its place under the profile's live sessions, held from before
        /// the write until the session is live and counted as such.
        place: crate::Hold,
    },
    /// From the node's event listener: `session_id` committed events (`None`:
    /// the listener reconnected; every follower reads once).
    FollowWake {
        session_id: Option<SessionId>,
    },
    /// From the node's event listener: a request was forwarded for
    /// `session_id` (`None`: reconnected; every owned session looks).
    ForwardWake {
        session_id: Option<SessionId>,
    },
    /// From the node's event listener: transient events of a session owned
    /// by another node.
    FollowDeltas {
        session_id: SessionId,
        body: String,
    },
    /// From the node's event listener: another node wrote who is attached
    /// to `session_id` there (`None`: reconnected; every live session reads).
    PresenceWake {
        session_id: Option<SessionId>,
    },
    /// From the node's event listener: some node erased `session_id` or
    /// trimmed its events (`None`: reconnected; every follower reads its
    /// row).
    ErasedWake {
        session_id: Option<SessionId>,
    },
    /// Internal: time to read the owners of the followed sessions.
    PollOwners,
    /// Internal: peers other nodes have on these live sessions.
    OtherPeers {
        ids: Vec<SessionId>,
        counts: Vec<(SessionId, u64)>,
    },
    /// From a session that lost its ownership and follows it now, its
    /// peers still attached (`session/cluster/lost.rs`).
    Demoted {
        key: SessionKey,
    },
    /// Internal: what that read found.
    Owners {
        owners: Vec<tether_store::cluster::Ownership>,
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
    /// On a cluster: whether this node owns the session now (and whether it
    /// took it over from a dead node) or follows its live owner.
    claimed: Option<crate::node::Claimed>,
}

struct Live {
    actor: ActorRef<SessionMsg>,
    gauges: Arc<SessionGauges>,
    /// Counted among its profile's live sessions while it is in the map.
    _counted: crate::Hold,
    /// `Some` from the moment a park is asked until the session refuses it,
    /// or, once it parked or began to stop, until the actor has left the
    /// map: requests wait here instead of in a mailbox that may be dropped.
    /// At most one request per peer (a peer answers in order) and a few of
    /// the registry's own, for the span of one park.
    held: Option<Vec<Routed>>,
}

pub struct RegistryState {
    ctx: Ctx,
    live: HashMap<SessionKey, Live>,
    by_actor: HashMap<ActorId, SessionKey>,
    /// The key of each live session by its id alone: a cluster's
    /// notifications name no profile (`follow.rs`).
    by_id: HashMap<SessionId, SessionKey>,
    /// Loads in flight and the requests waiting for them, in order.
    loading: HashMap<SessionKey, Vec<Routed>>,
    /// Creates in flight (how many) and the requests for their ids that
    /// came meanwhile: held, not loaded, so that a session being created is
    /// never brought live a second time from the row its create just wrote
    /// (two actors of one session, the first with a stale generation).
    creating: HashMap<SessionKey, (u32, Vec<Routed>)>,
    peers_by_profile: HashMap<String, u64>,
    /// On a cluster: the live sessions this node follows (`follow.rs`).
    followers: HashMap<SessionId, SessionKey>,
    /// The listener and the owner poll, while the registry runs.
    _follow: Option<follow::Tasks>,
    /// Sessions asked to park, until they refuse or leave the map: they no
    /// longer count as live (`bound.rs`).
    parking: HashSet<SessionKey>,
    /// Sessions that refused a park for the bound, sitting out until the
    /// retry (`bound.rs`).
    bound_refused: HashSet<SessionKey>,
    bound_retry_armed: bool,
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
        // On a cluster the turns a stop cut short are another node's to end
        // (with `node_lost`) once it claims their session: this node's
        // fresh id owns nothing yet, and sessions of live nodes are not
        // its to touch.
        if ctx.cluster.is_none() {
            end_interrupted_turns(&ctx, &myself);
        } else {
            ctx.lifecycle.set_recovered(true);
        }
        // A restarted registry starts empty (its sessions stopped with the old one).
        ctx.metrics.sessions_live.set(0);
        let follow = follow::start(&ctx, &myself);
        Ok(RegistryState {
            ctx,
            live: HashMap::new(),
            by_id: HashMap::new(),
            by_actor: HashMap::new(),
            loading: HashMap::new(),
            creating: HashMap::new(),
            peers_by_profile: HashMap::new(),
            followers: HashMap::new(),
            _follow: follow,
            parking: HashSet::new(),
            bound_refused: HashSet::new(),
            bound_retry_armed: false,
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
                id,
                params,
                attach,
                reply,
            } => state.create(&myself, profile, id, params, attach, reply),
            RegistryMsg::CreateFrom {
                new,
                initial,
                attach,
                reply,
            } => state.commit_new(&myself, *new, initial, attach, reply),
            RegistryMsg::CreateEnded { key } => state.create_ended(&myself, key),
            RegistryMsg::Created {
                row,
                append_gen,
                initial,
                attach,
                reply,
                place,
            } => {
                state
                    .created(&myself, *row, append_gen, initial, attach, reply)
                    .await;
                drop(place);
            }
            RegistryMsg::Resolve { key, load, reply } => {
                state.route(&myself, key, Routed::lookup(load, reply))
            }
            RegistryMsg::Forward {
                key,
                load,
                msg,
                reply,
            } => state.route(&myself, key, Routed::forward(load, msg, reply)),
            RegistryMsg::Loaded { key, result } => state.loaded(&myself, key, result).await,
            RegistryMsg::FollowWake { session_id } => state.follow_wake(session_id),
            RegistryMsg::ForwardWake { session_id } => state.forward_wake(&myself, session_id),
            RegistryMsg::FollowDeltas { session_id, body } => {
                state.follow_deltas(&session_id, body)
            }
            RegistryMsg::PresenceWake { session_id } => state.presence_wake(session_id),
            RegistryMsg::ErasedWake { session_id } => state.erased_wake(session_id),
            RegistryMsg::PollOwners => state.poll_owners(&myself),
            RegistryMsg::Owners { owners } => state.owners(owners),
            RegistryMsg::Demoted { key } => state.demoted(key),
            RegistryMsg::OtherPeers { ids, counts } => state.other_peers(ids, counts),
            RegistryMsg::PeerCounts {
                profile,
                ids,
                reply,
            } => state.peer_counts(&profile, ids, reply),
            RegistryMsg::Stats { profile, reply } => state.stats(&profile, reply),
            RegistryMsg::PeerUp { profile } => state.peer_up(profile),
            RegistryMsg::PeerDown { profile } => state.peer_down(&profile),
            RegistryMsg::FlushAll { reply } => state.flush_all(reply),
            RegistryMsg::DrainAll { reply } => state.drain_all(reply),
            RegistryMsg::WriterRestarted => state.tell_all(|| SessionMsg::WriterRestarted),
            RegistryMsg::HostsRestarted => state.tell_all(|| SessionMsg::HostsLost),
            RegistryMsg::ReaperRestarted => {
                state.tell_all(|| SessionMsg::ReportToReaper);
                state.report_live_count();
            }
            RegistryMsg::Park {
                key,
                orphaning,
                reason,
            } => state.park(&myself, key, orphaning, reason),
            RegistryMsg::ParkDone {
                key,
                orphaning,
                actor,
                parked,
            } => state.park_done(&myself, key, orphaning, actor, parked),
            RegistryMsg::EnforceBound => state.enforce_bound(&myself, None),
            RegistryMsg::BoundRetry => state.bound_retry(&myself),
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
        // Bounded: a session's post_stop only zeroes its gauges, so one that
        // takes longer is stuck, and the registry's own stop must not be.
        myself
            .get_cell()
            .stop_children_and_wait(Some("registry stopping".into()), Some(CHILDREN_STOP_WAIT))
            .await;
        Ok(())
    }
}

impl RegistryState {
    /// The live sessions, as the bound counts them (`bound.rs`), to the
    /// gauge and the reaper.
    pub(super) fn report_live_count(&self) {
        let live = self.live_counted();
        self.ctx.metrics.sessions_live.set(live as i64);
        if let Some(reaper) = self.ctx.reaper() {
            let _ = reaper.cast(ReaperMsg::LiveCount { live });
        }
    }
}

/// How long the registry's stop waits for its sessions to stop.
const CHILDREN_STOP_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

fn storage_unavailable() -> RpcError {
    RpcError::new(
        tether_protocol::codes::STORAGE_UNAVAILABLE,
        "storage unavailable",
    )
}
