//! `Session`: the one owner of a live session's state.
//!
//! Everything about a session (its peers, its seq counter, its ring, its
//! pending appends) lives in this actor's state and changes only through its
//! mailbox. Attach and detach are messages; nothing is keyed by connection.
//!
//! Durable events: the session assigns the next `seq`, sends the rows to the
//! `StoreWriter` and keeps the encoded frames pending. Only when the writer
//! answers `Committed` do they enter the ring and go out to peers, in
//! emission order; a transient frame emitted meanwhile waits behind them.
//! Those rules are [`commit::CommitPipeline`]'s, a pure state machine that
//! `pipeline.rs` wires to the messages below. Each frame is serialized once
//! and the same `Bytes` is pushed to every peer's outbox, which never blocks
//! the session.

mod about;
mod attach;
mod branch;
mod close;
mod cluster;
mod commit;
mod compress;
mod deferred;
mod delete;
mod encoded_history;
mod handoff;
mod history;
mod limits;
mod marker;
mod owed;
mod peers;
mod pipeline;
mod presence;
mod presence_remote;
mod reap;
mod replace;
pub(crate) mod replay;
mod row;
mod start;
mod turns;
mod write;

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use tether_protocol::{
    now_ms, ActiveTurnStat, PeerId, ResumeParams, RpcError, SessionId, SessionInfo, SessionStatus,
    SessionWrite, SinceParams, SinceResult, Todos, TurnId,
};
use tether_store::SessionRow;
use tracing::debug;

pub use attach::ResumeReply;
pub use cluster::ClusterMsg;
pub(crate) use delete::ERASE_BATCH;
pub use peers::PeerLink;
pub(crate) use write::{host_wait, WriteReply};

use crate::ctx::{Ctx, SessionGauges};
use crate::event::EventRecord;
use crate::host_supervisor::ControlError;
use crate::reaper::ParkReason;
use crate::ring::Ring;
use crate::store_writer::Barrier;
use crate::turn::{ControlOutcome, TurnUpdate};
use compress::{Compacting, CompressReply};
use history::Transcript;
use peers::PeerSlot;
use pipeline::{Commit, Waiter};
use reap::Reported;
use turns::Turns;

pub enum SessionMsg {
    /// `session.resume`: fix the cut point, maybe attach, answer with the replay.
    Resume {
        params: ResumeParams,
        peer: Option<PeerLink>,
        reply: RpcReplyPort<Result<ResumeReply, RpcError>>,
    },
    /// Attach a peer that must see every event from seq 1 (`session.create`).
    AttachFromStart { peer: PeerLink },
    /// The peer has queued the resume reply: release the frames held for it.
    Joined { peer_id: PeerId },
    /// Internal: events read from the store for a peer attached from the start.
    Backfill {
        peer_id: PeerId,
        frames: Result<Vec<Bytes>, RpcError>,
    },
    /// The peer leaves (disconnect or `session.detach`).
    Detach {
        peer_id: PeerId,
        reply: Option<RpcReplyPort<bool>>,
    },
    /// `session.events.since`.
    Since {
        params: SinceParams,
        reply: RpcReplyPort<Result<SinceResult, RpcError>>,
    },
    /// A `SessionInfo` snapshot.
    Info { reply: RpcReplyPort<SessionInfo> },
    /// `session.presence`.
    Presence {
        reply: RpcReplyPort<Result<tether_protocol::PresenceResult, RpcError>>,
    },
    /// Internal: time to tell the peers who joined and left (`presence.rs`).
    PresenceFlush,
    /// Emit events from outside unless the session is closed (or closing):
    /// nothing may follow `session.closed`. A handoff transition announces
    /// itself so; the benchmarks and tests inject events so (`hooks.rs`).
    /// Answers, if asked, whether they were emitted; a `Flush` sent after
    /// it answers once they are committed.
    EmitIfOpen {
        events: Vec<EventRecord>,
        reply: Option<RpcReplyPort<bool>>,
    },
    /// A request that changes the session (`write.rs`): run here on its
    /// owner, forwarded there from a follower.
    Write {
        write: SessionWrite,
        reply: WriteReply,
    },
    /// From the host supervisor: what happened to a turn.
    Turn { turn_id: TurnId, update: TurnUpdate },
    /// From the host supervisor: the late answer of a control request.
    ControlLate {
        request_id: String,
        result: Result<serde_json::Value, ControlError>,
    },
    /// The running turn's stats entry, if a turn runs.
    ActiveTurn {
        reply: RpcReplyPort<Option<ActiveTurnStat>>,
    },
    /// Internal: a compression's answer within its wait (or `Pending`).
    ControlDone {
        request_id: String,
        outcome: ControlOutcome,
    },
    /// Internal: a turn's deadline passed.
    TurnDeadline { turn_id: TurnId },
    /// Internal: the segment's transcript was read from the store.
    TranscriptLoaded {
        result: Result<history::LoadedSegment, RpcError>,
    },
    /// Answered once every event emitted so far is committed and fanned out.
    Flush { reply: RpcReplyPort<()> },
    /// The session it was branched from was erased.
    Unlinked,
    /// From the retention sweep: events before `retained_from_seq` were
    /// trimmed from the store.
    Trimmed { retained_from_seq: u64 },
    /// Internal: the store's answer to this session's erase (`delete.rs`):
    /// whether its row was still there.
    Erased { result: Result<bool, RpcError> },
    /// From the retention sweep: close as `session.close` does, but only if
    /// nobody uses the session and nobody has since `idle_before_ms` (the
    /// sweep's cutoff), decided here, where a client's resume or prompt is
    /// ordered against it (`close.rs`). Answers whether it closed.
    CloseIfIdle {
        idle_before_ms: i64,
        reply: RpcReplyPort<bool>,
    },
    /// What only a session on a cluster is told (`cluster.rs`).
    Cluster(ClusterMsg),
    /// The gateway drains: end the running and queued turns, then answer
    /// as `Flush` does.
    Drain { reply: RpcReplyPort<()> },
    /// From the writer: every pending event with `seq <= upto_seq` is on
    /// disk. `append_gen` is the generation the append was sent under.
    Committed { append_gen: u64, upto_seq: u64 },
    /// From the writer: the append of generation `append_gen` starting at
    /// `from_seq` was not written.
    AppendFailed {
        append_gen: u64,
        from_seq: u64,
        code: i64,
        /// The writer refused it because another node owns the session now
        /// (`StoreError::NotOwner`, on a cluster): not a storage failure.
        lost: bool,
    },
    /// The StoreWriter was restarted: an append in flight may be lost.
    WriterRestarted,
    /// Internal: emit again the `message.complete`s a failed append lost.
    RepayCompletions,
    /// Internal: what the new writer says is committed.
    Rebased { barrier: Result<Barrier, i64> },
    /// From the Registry (for the reaper): park if still parkable; answers
    /// whether the session parked (and is stopping).
    Park {
        reason: ParkReason,
        reply: RpcReplyPort<bool>,
    },
    /// A new reaper knows nothing: report orphaned/adopted again.
    ReportToReaper,
    /// The HostSupervisor was restarted: its hosts, and the turn and
    /// compression this session had on them, are gone.
    HostsLost,
}

impl SessionMsg {
    /// Whether a client sent it (through a peer, a front-end view or a
    /// forward): what makes a session "used" for retention.
    fn is_a_clients(&self) -> bool {
        matches!(
            self,
            SessionMsg::Resume { .. }
                | SessionMsg::AttachFromStart { .. }
                | SessionMsg::Detach { .. }
                | SessionMsg::Since { .. }
                | SessionMsg::Presence { .. }
                | SessionMsg::Write { .. }
        )
    }
}

/// How a session is started: from its stored row (after a barrier told it
/// the committed `latest_seq`) plus, for a new session, its first events.
pub struct SessionArgs {
    pub row: SessionRow,
    /// The latest todo snapshot in the store, if any.
    pub todos: Option<Todos>,
    pub barrier: Barrier,
    pub initial: Vec<EventRecord>,
    pub ctx: Ctx,
    pub gauges: Arc<SessionGauges>,
    /// On a cluster: owned (taken over from a dead node, whose turns end
    /// `node_lost`) or followed. `None`: the store's only gateway.
    pub claimed: Option<crate::node::Claimed>,
}

pub struct SessionState {
    id: SessionId,
    profile: String,
    title: String,
    status: SessionStatus,
    parent_session_id: Option<SessionId>,
    history_version: u64,
    close_on_disconnect: bool,
    created_at_ms: i64,
    updated_at_ms: i64,
    retained_from_seq: u64,
    /// Seqs, pending frames, the append in flight, its waiters.
    commit: Commit,
    /// The session row as the appends sent so far left it.
    row_written: row::Written,
    ring: Ring,
    peers: HashMap<PeerId, PeerSlot>,
    /// Whether any peer was ever attached, on any node (a
    /// `close_on_disconnect` session created without one is not "left" by
    /// anybody).
    ever_attached: bool,
    engine_pin: Option<serde_json::Value>,
    /// Use the profile's current engine config instead of `engine_pin`.
    follow_profile_config: bool,
    turns: Turns,
    transcript: Transcript,
    compacting: Option<Compacting>,
    pending_compress: Option<(Option<String>, CompressReply)>,
    /// Prompts waiting for the segment to load (`replace.rs`): bounded by
    /// the queue's bound.
    pending_submits: std::collections::VecDeque<replace::PendingSubmit>,
    /// The turn marker found in the store at start, handled in post_start.
    marker_at_start: Option<serde_json::Value>,
    /// Why the turns of that marker ended: `gateway_restart`, or
    /// `node_lost` when the session was taken over from a dead node.
    marker_reason: &'static str,
    /// On a cluster: following, forwarding, this node's peer count
    /// (`cluster.rs`; empty on a single gateway).
    cluster: cluster::ClusterState,
    /// Who the peers were told is attached (`presence.rs`).
    presence: presence::Presence,
    /// What the reaper was last told (`None`: nothing yet).
    reported: Option<Reported>,
    /// `message.complete`s of accepted turns that a failed append lost.
    owed: owed::Owed,
    /// The seq of the `session.closed` this actor emitted: nothing is
    /// emitted after it (`pipeline.rs`).
    closed_at: Option<u64>,
    /// A `session.delete` under way, or done (`delete.rs`).
    deleting: Option<delete::Deleting>,
    /// When a client's request last reached this actor; `None` since it was
    /// brought live (retention's close decides on it: `close.rs`).
    used_at_ms: Option<i64>,
    ctx: Ctx,
    gauges: Arc<SessionGauges>,
    /// Its running and queued turns, as its profile's counts hold them
    /// (`limits.rs`).
    turn_count: crate::registry::ledger::TurnCount,
}

pub struct Session;

impl Actor for Session {
    type Msg = SessionMsg;
    type State = SessionState;
    type Arguments = SessionArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: SessionArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let state = SessionState::new(args);
        state.publish_gauges();
        // Being brought live counts as activity for the idle TTL.
        state
            .gauges
            .last_activity_ms
            .store(now_ms(), std::sync::atomic::Ordering::Relaxed);
        debug!(session_id = %state.id, latest_seq = state.commit.committed_seq(), "session live");
        Ok(state)
    }

    async fn post_start(
        &self,
        myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let marker = state.marker_at_start.take();
        // A follower writes nothing: the owner ends its own turns, or the
        // follower does once it takes the session over (`cluster/follow.rs`).
        if !state.following() {
            state.end_orphaned_turns(&myself, marker);
            // Requests forwarded before this owner was live.
            state.forwards_wake(&myself);
        }
        state.send_unsent(&myself);
        state.report_to_reaper(true);
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let me = &myself;
        let Some(msg) = state.unless_erased(msg) else {
            return Ok(());
        };
        let Some(msg) = state.unless_following(me, msg) else {
            return Ok(());
        };
        let Some(msg) = state.unless_cut_off(me, msg) else {
            return Ok(());
        };
        if msg.is_a_clients() {
            state.used_at_ms = Some(now_ms());
        }
        match msg {
            SessionMsg::Resume {
                params,
                peer,
                reply,
            } => state.resume_when_caught_up(me, params, peer, reply),
            SessionMsg::AttachFromStart { peer } => state.attach_from_start(me, peer),
            SessionMsg::Joined { peer_id } => state.joined(&peer_id, Vec::new()),
            SessionMsg::Backfill { peer_id, frames } => state.backfilled(&peer_id, frames),
            SessionMsg::Detach { peer_id, reply } => state.detach_and_answer(&peer_id, reply),
            SessionMsg::Since { params, reply } => state.since(params, reply),
            SessionMsg::Info { reply } => {
                let _ = reply.send(state.info());
            }
            SessionMsg::Presence { reply } => state.presence_answer(reply),
            SessionMsg::PresenceFlush => state.presence_flush(me),
            SessionMsg::EmitIfOpen { events, reply } => state.emit_if_open(events, reply),
            SessionMsg::Write { write, reply } => state.write(me, write, reply),
            SessionMsg::Turn { turn_id, update } => state.turn_update(me, turn_id, update),
            SessionMsg::ControlLate { request_id, result } => {
                state.control_late(me, request_id, result)
            }
            SessionMsg::ControlDone {
                request_id,
                outcome,
            } => state.control_done(me, request_id, outcome),
            SessionMsg::TurnDeadline { turn_id } => state.turn_deadline(me, turn_id),
            SessionMsg::TranscriptLoaded { result } => state.transcript_loaded(me, result),
            SessionMsg::ActiveTurn { reply } => {
                let _ = reply.send(state.active_turn_stat());
            }
            SessionMsg::Flush { reply } => state.when_settled(me, reply),
            SessionMsg::Erased { result } => state.erased(me, result),
            SessionMsg::Unlinked => state.parent_session_id = None,
            SessionMsg::Trimmed { retained_from_seq } => {
                state.retained_from_seq = state.retained_from_seq.max(retained_from_seq);
                state.ring.forget_before(retained_from_seq);
            }
            SessionMsg::CloseIfIdle {
                idle_before_ms,
                reply,
            } => state.close_if_idle(me, idle_before_ms, reply),
            SessionMsg::Cluster(msg) => state.cluster_msg(me, msg),
            SessionMsg::Drain { reply } => state.drain(me, reply),
            SessionMsg::Committed {
                append_gen,
                upto_seq,
            } => state.committed(me, append_gen, upto_seq),
            SessionMsg::AppendFailed {
                append_gen,
                from_seq,
                code,
                lost,
            } => {
                let unstored = state.append_failed(me, append_gen, from_seq, code);
                if lost {
                    state.lost(me);
                } else {
                    state.fail_unstored_turn(me, &unstored, code);
                }
            }
            SessionMsg::RepayCompletions => state.repay_completions(me),
            SessionMsg::WriterRestarted => state.writer_restarted(me),
            SessionMsg::Rebased { barrier } => state.rebased(me, barrier),
            SessionMsg::Park { reason, reply } => state.park(me, reason, reply),
            SessionMsg::ReportToReaper => state.report_to_reaper(true),
            SessionMsg::HostsLost => state.hosts_lost(me),
        }
        state.close_if_left(me);
        state.send_unsent(me);
        state.presence_tick(me);
        state.publish_gauges();
        state.count_turns();
        state.report_to_reaper(false);
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        state.gauges.set(0, 0, 0);
        // A clean stop (closed, parked, shutdown): the peers stay connected.
        for slot in state.peers.values_mut() {
            slot.armed = false;
        }
        debug!(session_id = %state.id, "session stopped");
        Ok(())
    }
}
