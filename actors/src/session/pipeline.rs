//! The session's side of the durable-event pipeline: encode what it emits,
//! and wire [`CommitPipeline`] (the rules, in `commit.rs`) to the
//! StoreWriter, the ring, the peers and the waiters. Each function here
//! does what the pipeline's answer says: send this append, fan out these
//! frames, answer these waiters.

use std::sync::Arc;

use bytes::Bytes;
use ractor::{ActorRef, RpcReplyPort};
use serde::Serialize;
use serde_json::value::RawValue;
use tether_protocol::{now_ms, CloseResult, EventType, Message, RpcError, SessionStatus};
use tether_store::EventRow;
use tracing::{debug, info, warn};

use super::commit::{CommitPipeline, Frame, Rebase, Released};
use super::deferred::Deferred;
use super::write::Reply;
use super::{SessionMsg, SessionState};
use crate::event::{frame_of, DeltaMeta, EventRecord, TurnTag};
use crate::outbox::FrameClass;
use crate::ring::RingEntry;
use crate::store_writer::{Barrier, StoreWriterMsg};
use crate::transcript;

/// The session's commit pipeline.
pub(super) type Commit = CommitPipeline<DurableFrame, TransientFrame, Waiter>;

/// A durable event, encoded, waiting for its commit.
#[derive(Debug)]
pub(super) struct DurableFrame {
    pub params: Arc<RawValue>,
    pub frame: Bytes,
    /// The transcript message this event is, if it is one.
    pub message: Option<Message>,
    /// Emission time, kept to rebuild the store row after a writer restart.
    pub ts_ms: i64,
}

/// A transient event, encoded, waiting for the durable events before it.
#[derive(Debug)]
pub(super) struct TransientFrame {
    pub frame: Bytes,
    /// A delta's fields, for outboxes that merge deltas.
    pub delta: Option<Arc<DeltaMeta>>,
}

/// Something to answer when a seq is committed (or fails), or when
/// nothing is pending any more.
#[derive(Debug)]
pub(super) enum Waiter {
    Close(Option<Reply<CloseResult>>),
    /// A request that wrote (`prompt.submit`, `session.interrupt`,
    /// `session.compress`) is answered once its last event is on disk.
    Reply(Deferred),
    /// `Flush` and `Drain`: every event emitted before is committed and
    /// fanned out (or dropped by a failure).
    Settled(RpcReplyPort<()>),
    /// As `Settled`, then the session stops.
    Stop,
    /// As `Settled`, then the session is erased (`delete.rs`).
    Delete,
}

impl SessionState {
    /// Emits a durable event and returns its seq.
    pub(crate) fn emit_durable<P: Serialize>(
        &mut self,
        kind: EventType,
        payload: &P,
        turn: Option<TurnTag>,
    ) -> u64 {
        let seq = self.commit.next_seq();
        self.emit(EventRecord::new(kind, payload, turn, now_ms()));
        seq
    }

    /// Emits a durable event after which the segment holds
    /// `message_count` messages (a replacing prompt, which removes some).
    pub(crate) fn emit_durable_counted<P: Serialize>(
        &mut self,
        kind: EventType,
        payload: &P,
        turn: Option<TurnTag>,
        message_count: u64,
    ) -> u64 {
        let seq = self.commit.next_seq();
        self.emit_with_count(
            EventRecord::new(kind, payload, turn, now_ms()),
            Some(message_count),
        );
        seq
    }

    pub(crate) fn emit_transient<P: Serialize>(
        &mut self,
        kind: EventType,
        payload: &P,
        turn: TurnTag,
    ) {
        self.emit(EventRecord::new(kind, payload, Some(turn), now_ms()));
    }

    /// Emits one event. Durable events get the next seq and wait for their
    /// commit; transient ones go out at once unless durable ones are pending.
    /// Nothing follows the `session.closed` this session emitted: an event
    /// emitted after it is a bug of its caller, logged and dropped (every
    /// request refuses a closed session before it writes, and a close ends
    /// every turn before it writes `session.closed`).
    pub(crate) fn emit(&mut self, rec: EventRecord) {
        self.emit_with_count(rec, None);
    }

    /// [`Self::emit`], with the segment's message count after the event
    /// when the caller knows it better than [`transcript::count_after`].
    fn emit_with_count(&mut self, mut rec: EventRecord, count: Option<u64>) {
        if let Some(closed_seq) = self.closed_at {
            warn!(session_id = %self.id, kind = rec.kind.as_str(), closed_seq, "event after session.closed dropped");
            return;
        }
        let now = now_ms();
        self.updated_at_ms = now;
        // Every event is activity, including a running turn's host frames.
        self.gauges
            .last_activity_ms
            .store(now, std::sync::atomic::Ordering::Relaxed);
        if !rec.kind.is_durable() {
            let frame = frame_of(&rec.params_of(&self.id));
            // Deltas carry what an outbox needs to merge them.
            let delta = rec.delta_meta(&self.id, &frame).map(Arc::new);
            // Followers elsewhere get it too, after the durable event
            // emitted before it (`crate::delta_relay`).
            if let Some(relay) = &self.ctx.deltas {
                if self.gauges.other_peers() > 0 && !self.following() {
                    relay.offer(&self.id, self.commit.last_seq(), &rec);
                }
            }
            let frame = TransientFrame { frame, delta };
            if let Some(t) = self.commit.emit_transient(frame) {
                self.fan_out(&t.frame, transient_class(t.delta));
            }
            return;
        }
        let message_count =
            count.unwrap_or_else(|| transcript::count_after(rec.kind, self.commit.message_count()));
        let (id, notes) = (&self.id, &mut self.transcript);
        self.commit.emit_durable(message_count, |seq| {
            rec.seq = Some(seq);
            let params = rec.params_of(id);
            let row = rec.to_row();
            let message = notes.note(&row, rec.kind);
            let frame = frame_of(&params);
            let ts_ms = rec.ts_ms;
            let durable = DurableFrame {
                params,
                frame,
                message,
                ts_ms,
            };
            (row, durable)
        });
    }

    /// `EmitIfOpen`: events from outside; nothing may follow
    /// `session.closed`.
    pub(super) fn emit_if_open(
        &mut self,
        events: Vec<EventRecord>,
        reply: Option<RpcReplyPort<bool>>,
    ) {
        let open = self.status != SessionStatus::Closed;
        if open {
            for rec in events {
                self.emit(rec);
            }
        }
        if let Some(reply) = reply {
            let _ = reply.send(open);
        }
    }

    /// Sends the rows emitted by this message to the writer as one append.
    ///
    /// While the writer is restarting (none published, or the published
    /// one already dead) the rows stay unsent: the root announces the
    /// new writer (`WriterRestarted`) and this runs again after that
    /// message. Failing them instead would drop events that the session
    /// already counts as emitted, a turn's `message.complete` among them.
    pub(super) fn send_unsent(&mut self, myself: &ActorRef<SessionMsg>) {
        if !self.commit.has_append() {
            return;
        }
        let Some(writer) = self.ctx.writer() else {
            debug!(session_id = %self.id, "store writer restarting; append held");
            return;
        };
        let Some(append) = self.commit.take_append(writer.get_id()) else {
            return;
        };
        let turn_marker = self.turns.marker_dirty.then(|| self.turns.marker());
        let patch = self.row_patch(turn_marker);
        let sent = writer.cast(StoreWriterMsg::Append {
            session_id: self.id.clone(),
            append_gen: append.append_gen,
            events: append.rows,
            patch,
            notify: myself.clone(),
        });
        match sent {
            Ok(()) => self.turns.marker_dirty = false,
            Err(ractor::MessagingErr::SendErr(StoreWriterMsg::Append { events, .. })) => {
                debug!(session_id = %self.id, "store writer gone; append held");
                self.commit.append_not_sent(events);
                self.row_written.forget();
            }
            Err(_) => {
                // Not reachable for a local actor; rebuild the rows regardless.
                self.commit.append_lost(row_of);
                self.row_written.forget();
            }
        }
    }

    /// `Committed`: moves committed events into the ring and out to the
    /// peers, in order, and answers their waiters.
    pub(super) fn committed(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        append_gen: u64,
        upto_seq: u64,
    ) {
        let released = self.commit.committed(append_gen, upto_seq);
        self.release(myself, released);
        self.store_recovered();
    }

    /// `AppendFailed`: what was not written is dropped (the completions of
    /// accepted turns among it are owed), its waiters get the error, and
    /// the turns whose prompt was among it are forgotten. Returns the
    /// turns that lost events of their own (`turns/unstored.rs`).
    pub(super) fn append_failed(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        append_gen: u64,
        from_seq: u64,
        code: i64,
    ) -> std::collections::HashSet<String> {
        let Some(dropped) = self.commit.append_failed(append_gen, from_seq) else {
            return Default::default();
        };
        self.row_written.forget();
        self.owe_completions(myself, &dropped.events);
        let unstored = super::owed::turns_with_events_dropped(&dropped.events);
        warn!(session_id = %self.id, from_seq, code, "durable events not written; rewinding");
        for waiter in dropped.failed {
            self.fail(waiter, code);
        }
        self.forget_unwritten_turns(from_seq);
        for waiter in dropped.settled {
            self.answer(myself, waiter);
        }
        unstored
    }

    /// Answers `waiter` once `seq` is on disk (at once if it is).
    pub(super) fn wait_for(&mut self, myself: &ActorRef<SessionMsg>, seq: u64, waiter: Waiter) {
        if let Some(waiter) = self.commit.wait_for(seq, waiter) {
            self.answer(myself, waiter);
        }
    }

    /// `Flush`: answers once every event emitted so far is committed and
    /// fanned out.
    pub(super) fn when_settled(&mut self, myself: &ActorRef<SessionMsg>, reply: RpcReplyPort<()>) {
        if let Some(waiter) = self.commit.wait_settled(Waiter::Settled(reply)) {
            self.answer(myself, waiter);
        }
    }

    /// Stops the session once every event emitted so far is committed
    /// and fanned out (or dropped by a failure).
    pub(super) fn stop_when_settled(&mut self, myself: &ActorRef<SessionMsg>) {
        if let Some(waiter) = self.commit.wait_settled(Waiter::Stop) {
            self.answer(myself, waiter);
        }
    }

    /// Erases the session once every event emitted so far is committed
    /// and fanned out (or dropped by a failure).
    pub(super) fn erase_when_settled(&mut self, myself: &ActorRef<SessionMsg>) {
        if let Some(waiter) = self.commit.wait_settled(Waiter::Delete) {
            self.answer(myself, waiter);
        }
    }

    /// Fans out what a commit released, in order, then answers its waiters.
    fn release(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        released: Released<DurableFrame, TransientFrame, Waiter>,
    ) {
        for frame in released.frames {
            match frame {
                Frame::Durable { seq, item } => {
                    self.ring.push(RingEntry {
                        seq,
                        params: item.params,
                    });
                    self.fan_out(&item.frame, FrameClass::Durable);
                }
                Frame::Transient(t) => self.fan_out(&t.frame, transient_class(t.delta)),
            }
        }
        for waiter in released.answered {
            self.answer(myself, waiter);
        }
    }

    /// What a waiter is told once its event is on disk.
    fn answer(&mut self, myself: &ActorRef<SessionMsg>, waiter: Waiter) {
        match waiter {
            Waiter::Close(reply) => {
                info!(session_id = %self.id, "session closed");
                if let Some(reply) = reply {
                    let _ = reply.send(Ok(CloseResult { closed: true }));
                }
                // Drain, not stop: what is already in the mailbox is
                // answered (4002, or read), and what comes later is
                // refused at the send, so the registry holds it for
                // the stopped session instead of it being dropped.
                let _ = myself.drain();
            }
            Waiter::Reply(deferred) => deferred.send(Ok(())),
            Waiter::Settled(reply) => {
                let _ = reply.send(());
            }
            Waiter::Stop => {
                info!(session_id = %self.id, "session stopped after its last events");
                let _ = myself.drain();
            }
            Waiter::Delete => self.erase_now(myself),
        }
    }

    /// What a waiter is told when its event was not written.
    fn fail(&mut self, waiter: Waiter, code: i64) {
        let err = RpcError::new(code, storage_message(code));
        match waiter {
            Waiter::Close(reply) => {
                // Not closed after all: open again (its turns were ended).
                self.closed_at = None;
                self.set_status(SessionStatus::Idle);
                if let Some(reply) = reply {
                    let _ = reply.send(Err(err));
                }
            }
            Waiter::Reply(deferred) => deferred.send(Err(err)),
            Waiter::Settled(reply) => {
                let _ = reply.send(());
            }
            // Only ever settled waiters, which a failure settles.
            Waiter::Stop | Waiter::Delete => {}
        }
    }

    /// The writer was restarted. If an append of ours was at the old one it
    /// may or may not have been committed: ask the new writer (a barrier)
    /// before sending anything else.
    pub(super) fn writer_restarted(&mut self, myself: &ActorRef<SessionMsg>) {
        let writer = self.ctx.writer();
        if !self
            .commit
            .writer_restarted(writer.as_ref().map(|w| w.get_id()))
        {
            return;
        }
        let id = self.id.clone();
        let me = myself.clone();
        tokio::spawn(async move {
            let barrier = match writer {
                Some(w) => match w
                    .call(
                        |reply| StoreWriterMsg::Barrier {
                            session_id: id,
                            reply,
                        },
                        Some(std::time::Duration::from_secs(10)),
                    )
                    .await
                {
                    Ok(ractor::rpc::CallResult::Success(Ok(b))) => Ok(b),
                    Ok(ractor::rpc::CallResult::Success(Err(e))) => Err(e.code()),
                    _ => Err(tether_protocol::codes::STORAGE_UNAVAILABLE),
                },
                None => Err(tether_protocol::codes::STORAGE_UNAVAILABLE),
            };
            let _ = me.cast(SessionMsg::Rebased { barrier });
        });
    }

    /// What is on disk is committed; the rest of the pending events is sent
    /// again under the new writer's generation, so nothing emitted is lost or doubled.
    pub(super) fn rebased(&mut self, myself: &ActorRef<SessionMsg>, barrier: Result<Barrier, i64>) {
        let current = self.ctx.writer().map(|w| w.get_id());
        let latest_seq = barrier.as_ref().map_or(0, |b| b.latest_seq);
        match self.commit.rebased(current, barrier, row_of) {
            // Answered meanwhile (by the old writer before it died), or the
            // append in flight went to the new writer: nothing to rebase.
            Rebase::Unneeded => {}
            Rebase::Retry { code } => {
                // What the old writer committed is unknown, so nothing may
                // be dropped or renumbered: ask again shortly.
                warn!(session_id = %self.id, code, "barrier after a writer restart failed; retrying");
                let me = myself.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                    let _ = me.cast(SessionMsg::WriterRestarted);
                });
            }
            Rebase::Rebased { released, resent } => {
                self.release(myself, released);
                info!(session_id = %self.id, latest_seq, resent, "rebased after a writer restart");
                self.row_written.forget();
                self.turns.marker_dirty = true;
            }
        }
    }
}

/// The store row of a pending durable event, rebuilt from its params.
fn row_of(durable: &DurableFrame) -> Option<EventRow> {
    row_from_params(&durable.params, durable.ts_ms)
}

/// Rebuilds the store row of an event from its encoded params.
pub(crate) fn row_from_params(
    params: &serde_json::value::RawValue,
    ts_ms: i64,
) -> Option<EventRow> {
    #[derive(serde::Deserialize)]
    struct Params<'a> {
        #[serde(rename = "type")]
        kind: String,
        seq: u64,
        turn_id: Option<String>,
        trace_id: Option<String>,
        #[serde(borrow)]
        payload: &'a serde_json::value::RawValue,
    }
    let p: Params = serde_json::from_str(params.get()).ok()?;
    Some(EventRow {
        seq: p.seq,
        kind: p.kind,
        payload: p.payload.get().to_string(),
        turn_id: p.turn_id,
        trace_id: p.trace_id,
        ts_ms,
    })
}

/// The message of a storage error code.
pub(crate) fn storage_message(code: i64) -> &'static str {
    match code {
        tether_protocol::codes::STORAGE_FULL => "storage full: nothing was written",
        tether_protocol::codes::STORAGE_UNAVAILABLE => "storage unavailable",
        _ => "storage write failed: nothing was written",
    }
}

pub(super) fn transient_class(delta: Option<Arc<DeltaMeta>>) -> FrameClass {
    delta.map_or(FrameClass::Transient, FrameClass::Delta)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tether_protocol::{SessionId, TextPayload, TraceId, TurnId};

    #[test]
    fn a_row_rebuilt_from_params_equals_the_original() {
        let tag = TurnTag {
            turn_id: TurnId::new(),
            trace_id: TraceId::new(),
        };
        for turn in [None, Some(tag)] {
            let mut rec = EventRecord::new(
                EventType::MessageUser,
                &TextPayload {
                    text: "héllo \"x\"".into(),
                },
                turn,
                1_764_470_000_123,
            );
            rec.seq = Some(7);
            let params = rec.params_of(&SessionId::new());
            assert_eq!(row_from_params(&params, rec.ts_ms), Some(rec.to_row()));
        }
    }
}
