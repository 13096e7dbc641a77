//! `Session`: the one owner of a live session's state.
//!
//! Everything about a session (its peers, its seq counter, its ring, its
//! pending appends) lives in this actor's state and changes only through its
//! mailbox. Attach and detach are messages; nothing is keyed by connection.
//!
//! Durable events: the session assigns the next `seq`, sends the rows to the
//! `StoreWriter` and keeps the encoded frames in `pending`. Only when the
//! writer answers `Committed` do they enter the ring and go out to peers, in
//! emission order; a transient frame emitted meanwhile waits behind them.
//! Each frame is serialized once and the same `Bytes` is pushed to every
//! peer's outbox, which never blocks the session.

mod attach;
mod compress;
mod history;
mod marker;
mod owed;
mod pipeline;
mod reap;
pub(crate) mod replay;
mod turns;

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use bytes::Bytes;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use serde_json::value::RawValue;
use tether_protocol::{
    format_ts, now_ms, ActiveTurnStat, EventType, InterruptResult, Message, PeerId, ResumeParams,
    RpcError, SessionClosedPayload, SessionId, SessionInfo, SessionStatus, SinceParams,
    SinceResult, SubmitResult, Todos, TurnId,
};
use tether_store::{EventRow, SessionRow};
use tracing::{debug, info};

pub use attach::ResumeReply;

use crate::ctx::{Ctx, SessionGauges};
use crate::event::EventRecord;
use crate::outbox::{FrameClass, Outbox};
use crate::reaper::ParkReason;
use crate::ring::{Ring, RingEntry};
use crate::store_writer::Barrier;
use crate::turn::{ControlOutcome, TurnUpdate};
use compress::{Compacting, CompressReply};
use history::Transcript;
use reap::Reported;
use turns::Turns;

/// A peer as a session sees it: an id and the outbox to push frames into.
#[derive(Debug, Clone)]
pub struct PeerLink {
    pub peer_id: PeerId,
    pub outbox: Outbox,
}

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
    /// `session.close`: emit `session.closed`, then stop.
    Close {
        reason: String,
        reply: Option<RpcReplyPort<Result<(), RpcError>>>,
    },
    /// A `SessionInfo` snapshot.
    Info { reply: RpcReplyPort<SessionInfo> },
    /// Emit events (from a benchmark driving the fan-out).
    Emit { events: Vec<EventRecord> },
    /// Emit events unless the session is closed (or closing): an
    /// announcement from outside, such as a handoff transition, must never
    /// follow `session.closed`. Answers whether they were emitted; a
    /// `Flush` sent after it answers once they are committed.
    EmitIfOpen {
        events: Vec<EventRecord>,
        reply: RpcReplyPort<bool>,
    },
    /// `prompt.submit`.
    Submit {
        text: String,
        reply: RpcReplyPort<Result<SubmitResult, RpcError>>,
    },
    /// `session.interrupt`.
    Interrupt {
        reply: RpcReplyPort<Result<InterruptResult, RpcError>>,
    },
    /// `session.compress`.
    Compress {
        focus: Option<String>,
        reply: CompressReply,
    },
    /// From the host supervisor: what happened to a turn.
    Turn { turn_id: TurnId, update: TurnUpdate },
    /// From the host supervisor: the late answer of a control request.
    ControlLate {
        request_id: String,
        result: Result<serde_json::Value, String>,
    },
    /// The running turn's stats entry, if a turn runs.
    ActiveTurn {
        reply: RpcReplyPort<Option<ActiveTurnStat>>,
    },
    /// Internal: a compression's answer within its wait (or `Pending`).
    ControlDone {
        request_id: String,
        outcome: ControlOutcome,
        reply: CompressReply,
    },
    /// Internal: a turn's deadline passed.
    TurnDeadline { turn_id: TurnId },
    /// Internal: the segment's transcript was read from the store.
    TranscriptLoaded {
        result: Result<Vec<Message>, RpcError>,
    },
    /// Answered once every event emitted so far is committed and fanned out.
    Flush { reply: RpcReplyPort<()> },
    /// The gateway drains: end the running and queued turns, then answer
    /// as `Flush` does.
    Drain { reply: RpcReplyPort<()> },
    /// From the writer: every pending event with `seq <= upto_seq` is on disk.
    Committed { gen: u64, upto_seq: u64 },
    /// From the writer: the append starting at `from_seq` was not written.
    AppendFailed { gen: u64, from_seq: u64, code: i64 },
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
}

/// An encoded event waiting for its commit (or, if transient, for the
/// durable events before it).
struct Pending {
    seq: Option<u64>,
    params: Option<Arc<RawValue>>,
    frame: Bytes,
    /// A transient delta's fields, for outboxes that merge deltas.
    delta: Option<Arc<crate::event::DeltaMeta>>,
    /// Segment message count once this event is committed.
    message_count: u64,
    /// The transcript message this event is, if it is one.
    message: Option<Message>,
    /// Emission time, kept to rebuild the store row after a writer restart.
    ts_ms: i64,
}

/// Something to do when a seq is committed (or fails).
enum Waiter {
    Close(Option<RpcReplyPort<Result<(), RpcError>>>),
    /// `prompt.submit` is answered once its `message.user` is on disk.
    Submit {
        reply: RpcReplyPort<Result<SubmitResult, RpcError>>,
        result: SubmitResult,
    },
}

struct PeerSlot {
    outbox: Outbox,
    /// `None` once joined; while joining, live frames are held here.
    held: Option<Vec<(Bytes, FrameClass)>>,
    /// Whether dropping the slot closes the peer's connection (see Drop).
    armed: bool,
}

impl PeerSlot {
    fn new(outbox: Outbox, held: Option<Vec<(Bytes, FrameClass)>>) -> Self {
        Self {
            outbox,
            held,
            armed: true,
        }
    }
}

/// A session that dies without stopping cleanly (killed, or crashed in a
/// handler) drops its state without telling anyone; its peers would wait
/// for events that never come. Each slot therefore closes its peer's
/// connection when dropped, unless the session let go of it on purpose
/// (detach, clean stop): the client reconnects and resumes from its
/// watermark on the session brought back from the store.
impl Drop for PeerSlot {
    fn drop(&mut self) {
        if self.armed && !self.outbox.is_closed() {
            self.outbox.close(CLOSE_SESSION_LOST, "session restarted");
        }
    }
}

/// WebSocket close code for a peer whose session actor died (RFC 6455
/// "internal error"); it reconnects and resumes.
pub const CLOSE_SESSION_LOST: u16 = 1011;

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
    /// Messages in the current segment, counting only committed events.
    committed_message_count: u64,
    /// Messages in the current segment, counting pending events too.
    message_count: u64,
    committed_seq: u64,
    next_seq: u64,
    gen: u64,
    pending: VecDeque<Pending>,
    /// Rows emitted but not yet sent to the writer.
    unsent: Vec<EventRow>,
    /// Waiting for the new writer's barrier after a writer restart.
    rebasing: bool,
    /// The writer the append in flight was sent to.
    in_flight_to: Option<ractor::ActorId>,
    /// Whether an append of this session is at the writer now. One at a
    /// time: what is emitted meanwhile goes out as one larger append when
    /// it returns, so a busy session makes fewer, bigger writes.
    append_in_flight: bool,
    waiters: Vec<(u64, Waiter)>,
    flush_waiters: Vec<RpcReplyPort<()>>,
    ring: Ring,
    peers: HashMap<PeerId, PeerSlot>,
    /// Whether any peer was ever attached (a `close_on_disconnect` session
    /// created without one is not "left" by anybody).
    ever_attached: bool,
    engine_pin: Option<serde_json::Value>,
    /// Use the profile's current engine config instead of `engine_pin`.
    follow_profile_config: bool,
    turns: Turns,
    transcript: Transcript,
    compacting: Option<Compacting>,
    pending_compress: Option<(Option<String>, CompressReply)>,
    /// The turn marker found in the store at start, handled in post_start.
    marker_at_start: Option<serde_json::Value>,
    /// What the reaper was last told (`None`: nothing yet).
    reported: Option<Reported>,
    /// `message.complete`s of accepted turns that a failed append lost.
    owed: owed::Owed,
    ctx: Ctx,
    gauges: Arc<SessionGauges>,
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
        let SessionArgs {
            row,
            todos,
            barrier,
            initial,
            ctx,
            gauges,
        } = args;
        let mut ring = Ring::new(ctx.config.ring_events, ctx.config.ring_bytes);
        for rec in &initial {
            if let Some(seq) = rec.seq {
                ring.push(RingEntry {
                    seq,
                    params: rec.params_of(&row.id),
                });
            }
        }
        let state = SessionState {
            id: row.id,
            profile: row.profile,
            title: row.title,
            status: row.status,
            parent_session_id: row.parent_session_id,
            history_version: row.history_version,
            close_on_disconnect: row.close_on_disconnect,
            created_at_ms: row.created_at_ms,
            updated_at_ms: row.updated_at_ms,
            retained_from_seq: row.retained_from_seq,
            committed_message_count: row.message_count,
            message_count: row.message_count,
            committed_seq: barrier.latest_seq,
            next_seq: barrier.latest_seq + 1,
            gen: barrier.gen,
            pending: VecDeque::new(),
            unsent: Vec::new(),
            append_in_flight: false,
            rebasing: false,
            in_flight_to: None,
            waiters: Vec::new(),
            flush_waiters: Vec::new(),
            ring,
            peers: HashMap::new(),
            ever_attached: false,
            engine_pin: row.engine_pin,
            follow_profile_config: row.follow_profile_config,
            turns: Turns {
                todos,
                ..Turns::default()
            },
            transcript: Transcript::NotLoaded,
            compacting: None,
            pending_compress: None,
            marker_at_start: row.turn_marker,
            reported: None,
            owed: owed::Owed::default(),
            ctx,
            gauges,
        };
        state.publish_gauges();
        // Being brought live counts as activity for the idle TTL.
        state
            .gauges
            .last_activity_ms
            .store(now_ms(), std::sync::atomic::Ordering::Relaxed);
        debug!(session_id = %state.id, latest_seq = state.committed_seq, "session live");
        Ok(state)
    }

    async fn post_start(
        &self,
        myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let marker = state.marker_at_start.take();
        state.end_orphaned_turns(marker);
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
        match msg {
            SessionMsg::Resume {
                params,
                peer,
                reply,
            } => state.resume(params, peer, reply),
            SessionMsg::AttachFromStart { peer } => state.attach_from_start(&myself, peer),
            SessionMsg::Joined { peer_id } => state.joined(&peer_id, Vec::new()),
            SessionMsg::Backfill { peer_id, frames } => state.backfilled(&peer_id, frames),
            SessionMsg::Detach { peer_id, reply } => {
                let was = state.detach(&peer_id);
                if let Some(reply) = reply {
                    let _ = reply.send(was);
                }
            }
            SessionMsg::Since { params, reply } => state.since(params, reply),
            SessionMsg::Close { reason, reply } => state.close(&reason, reply),
            SessionMsg::Info { reply } => {
                let _ = reply.send(state.info());
            }
            SessionMsg::Emit { events } => {
                for rec in events {
                    state.emit(rec);
                }
            }
            SessionMsg::EmitIfOpen { events, reply } => {
                let open = state.status != SessionStatus::Closed;
                if open {
                    for rec in events {
                        state.emit(rec);
                    }
                }
                let _ = reply.send(open);
            }
            SessionMsg::Submit { text, reply } => state.submit(&myself, text, reply),
            SessionMsg::Interrupt { reply } => state.interrupt(&myself, reply),
            SessionMsg::Compress { focus, reply } => state.compress(&myself, focus, reply),
            SessionMsg::Turn { turn_id, update } => state.turn_update(&myself, turn_id, update),
            SessionMsg::ControlLate { request_id, result } => {
                state.control_late(request_id, result)
            }
            SessionMsg::ControlDone {
                request_id,
                outcome,
                reply,
            } => state.control_done(request_id, outcome, reply),
            SessionMsg::TurnDeadline { turn_id } => state.turn_deadline(&myself, turn_id),
            SessionMsg::TranscriptLoaded { result } => state.transcript_loaded(&myself, result),
            SessionMsg::ActiveTurn { reply } => {
                let stat = state.turns.running.as_ref().map(|t| ActiveTurnStat {
                    session_id: state.id.clone(),
                    turn_id: t.tag.turn_id.clone(),
                    trace_id: t.tag.trace_id.clone(),
                    elapsed_s: state.running_for().map_or(0.0, |d| d.as_secs_f64()),
                    host_id: t.host_id.unwrap_or(0),
                });
                let _ = reply.send(stat);
            }
            SessionMsg::Flush { reply } => {
                if state.pending.is_empty() && state.unsent.is_empty() {
                    let _ = reply.send(());
                } else {
                    state.flush_waiters.push(reply);
                }
            }
            SessionMsg::Drain { reply } => state.drain(&myself, reply),
            SessionMsg::Committed { gen, upto_seq } => {
                state.committed(&myself, gen, upto_seq);
                state.store_recovered();
            }
            SessionMsg::AppendFailed {
                gen,
                from_seq,
                code,
            } => {
                if gen == state.gen {
                    state.owe_completions(&myself, from_seq);
                }
                state.append_failed(gen, from_seq, code);
            }
            SessionMsg::RepayCompletions => state.repay_completions(&myself),
            SessionMsg::WriterRestarted => state.writer_restarted(&myself),
            SessionMsg::Rebased { barrier } => state.rebased(&myself, barrier),
            SessionMsg::Park { reason, reply } => state.park(&myself, reason, reply),
            SessionMsg::ReportToReaper => state.report_to_reaper(true),
            SessionMsg::HostsLost => state.hosts_lost(&myself),
        }
        state.close_if_left(&myself);
        state.send_unsent(&myself);
        state.publish_gauges();
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

impl SessionState {
    pub(crate) fn info(&self) -> SessionInfo {
        SessionInfo {
            session_id: self.id.clone(),
            profile: self.profile.clone(),
            title: self.title.clone(),
            status: self.status,
            created_at: format_ts(self.created_at_ms),
            updated_at: format_ts(self.updated_at_ms),
            parent_session_id: self.parent_session_id.clone(),
            history_version: self.history_version,
            message_count: self.committed_message_count,
            latest_seq: self.committed_seq,
            peers: self.peers.len() as u32,
            close_on_disconnect: self.close_on_disconnect,
        }
    }

    fn publish_gauges(&self) {
        self.gauges
            .set(self.peers.len(), self.ring.len(), self.ring.bytes());
        self.gauges.set_running(self.turns.running.is_some());
    }

    fn set_status(&mut self, status: SessionStatus) {
        self.status = status;
    }

    fn detach(&mut self, peer_id: &PeerId) -> bool {
        let was = match self.peers.remove(peer_id) {
            Some(mut slot) => {
                slot.armed = false;
                true
            }
            None => false,
        };
        if was {
            debug!(session_id = %self.id, peer_id = %peer_id, peers = self.peers.len(), "peer detached");
        }
        was
    }

    /// PROTOCOL 1.7: a `close_on_disconnect` session whose last peer left is
    /// closed at once, its running turn interrupted.
    fn close_if_left(&mut self, myself: &ActorRef<SessionMsg>) {
        if !self.peers.is_empty() {
            self.ever_attached = true;
            return;
        }
        if !(self.ever_attached && self.close_on_disconnect) || self.status == SessionStatus::Closed
        {
            return;
        }
        info!(session_id = %self.id, "last peer left a close_on_disconnect session; closing");
        self.stop_turns(myself, None);
        self.close("disconnect", None);
    }

    fn close(&mut self, reason: &str, reply: Option<RpcReplyPort<Result<(), RpcError>>>) {
        if self.status == SessionStatus::Closed {
            // Idempotent: a second close (or one racing the first) just waits
            // for the first one's commit if it is still pending.
            match self
                .waiters
                .iter()
                .position(|(_, w)| matches!(w, Waiter::Close(_)))
            {
                Some(_) => self.waiters.push((self.next_seq - 1, Waiter::Close(reply))),
                None => {
                    if let Some(reply) = reply {
                        let _ = reply.send(Ok(()));
                    }
                }
            }
            return;
        }
        self.status = SessionStatus::Closed;
        let rec = EventRecord::new(
            EventType::SessionClosed,
            &SessionClosedPayload {
                reason: reason.to_string(),
            },
            None,
            now_ms(),
        );
        self.emit(rec);
        self.waiters.push((self.next_seq - 1, Waiter::Close(reply)));
    }

    fn since(&mut self, params: SinceParams, reply: RpcReplyPort<Result<SinceResult, RpcError>>) {
        replay::since(self, params, reply);
    }
}
