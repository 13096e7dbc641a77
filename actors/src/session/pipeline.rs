//! The durable-event pipeline of a session: assign a seq, append through
//! the StoreWriter (one append in flight, the rest coalesced), and only on
//! `Committed` move events into the ring and out to every peer, in
//! emission order. A failed append rewinds the seq under a new `gen`.

use std::sync::Arc;

use bytes::Bytes;
use ractor::ActorRef;
use serde::Serialize;
use tether_protocol::{now_ms, EventType, RpcError, SessionStatus};
use tether_store::{EventRow, SessionPatch};
use tracing::{debug, info, warn};

use super::{Pending, SessionMsg, SessionState, Waiter};
use crate::event::{frame_of, DeltaMeta, EventRecord, TurnTag};
use crate::outbox::{FrameClass, Pushed};
use crate::ring::RingEntry;
use crate::store_writer::StoreWriterMsg;
use crate::transcript;

impl SessionState {
    /// Emits a durable event and returns its seq.
    pub(crate) fn emit_durable<P: Serialize>(
        &mut self,
        kind: EventType,
        payload: &P,
        turn: Option<TurnTag>,
    ) -> u64 {
        let seq = self.next_seq;
        self.emit(EventRecord::new(kind, payload, turn, now_ms()));
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
    pub(crate) fn emit(&mut self, mut rec: EventRecord) {
        let now = now_ms();
        self.updated_at_ms = now;
        // Every event is activity, including a running turn's host frames.
        self.gauges
            .last_activity_ms
            .store(now, std::sync::atomic::Ordering::Relaxed);
        if !rec.kind.is_durable() {
            let params = rec.params_of(&self.id);
            let frame = frame_of(&params);
            // Deltas carry what a pressured outbox needs to merge them.
            let delta = rec.delta_meta(&self.id).map(Arc::new);
            if self.pending.is_empty() {
                self.fan_out(&frame, transient_class(delta));
            } else {
                self.pending.push_back(Pending {
                    seq: None,
                    params: None,
                    frame,
                    delta,
                    message_count: self.message_count,
                    message: None,
                    ts_ms: rec.ts_ms,
                });
            }
            return;
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        rec.seq = Some(seq);
        self.message_count = transcript::count_after(rec.kind, self.message_count);
        let params = rec.params_of(&self.id);
        let frame = frame_of(&params);
        let row = rec.to_row();
        let message = self.note_message(&row, rec.kind);
        self.unsent.push(row);
        self.pending.push_back(Pending {
            seq: Some(seq),
            params: Some(params),
            frame,
            delta: None,
            message_count: self.message_count,
            message,
            ts_ms: rec.ts_ms,
        });
    }

    /// Sends the rows emitted by this message to the writer as one append.
    ///
    /// While the writer is restarting (none published, or the published
    /// one already dead) the rows stay in `unsent`: the root announces the
    /// new writer (`WriterRestarted`) and this runs again after that
    /// message. Failing them instead would drop events that the session
    /// already counts as emitted, a turn's `message.complete` among them.
    pub(super) fn send_unsent(&mut self, myself: &ActorRef<SessionMsg>) {
        if self.unsent.is_empty() || self.append_in_flight {
            return;
        }
        let Some(writer) = self.ctx.writer() else {
            debug!(session_id = %self.id, "store writer restarting; append held");
            return;
        };
        let events = std::mem::take(&mut self.unsent);
        let turn_marker = self.turns.marker_dirty.then(|| self.turns.marker());
        let patch = SessionPatch {
            status: Some(self.status),
            message_count: Some(self.message_count),
            history_version: Some(self.history_version),
            turn_marker,
            updated_at_ms: Some(self.updated_at_ms),
            ..SessionPatch::default()
        };
        let sent = writer.cast(StoreWriterMsg::Append {
            session_id: self.id.clone(),
            gen: self.gen,
            events,
            patch,
            notify: myself.clone(),
        });
        match sent {
            Ok(()) => {
                self.turns.marker_dirty = false;
                self.append_in_flight = true;
                self.in_flight_to = Some(writer.get_id());
            }
            Err(ractor::MessagingErr::SendErr(StoreWriterMsg::Append { events, .. })) => {
                debug!(session_id = %self.id, "store writer gone; append held");
                self.unsent = events;
            }
            Err(_) => {
                // Not reachable for a local actor; keep the rows regardless.
            }
        }
    }

    /// Moves committed events into the ring and out to the peers, in order.
    pub(super) fn committed(&mut self, myself: &ActorRef<SessionMsg>, gen: u64, upto_seq: u64) {
        if gen != self.gen {
            return;
        }
        self.append_in_flight = false;
        while let Some(front) = self.pending.front() {
            match front.seq {
                Some(seq) if seq > upto_seq => break,
                _ => {}
            }
            let Some(p) = self.pending.pop_front() else {
                break;
            };
            match (p.seq, p.params) {
                (Some(seq), Some(params)) => {
                    self.committed_seq = seq;
                    self.committed_message_count = p.message_count;
                    self.ring.push(RingEntry { seq, params });
                    self.fan_out(&p.frame, FrameClass::Durable);
                }
                _ => self.fan_out(&p.frame, transient_class(p.delta)),
            }
        }
        self.resolve_waiters(myself);
        if self.pending.is_empty() {
            for w in self.flush_waiters.drain(..) {
                let _ = w.send(());
            }
        }
    }

    /// Drops what was not written, rewinds the seq and moves to a new gen so
    /// that no later append of the old gen can land after the gap.
    pub(super) fn append_failed(&mut self, gen: u64, from_seq: u64, code: i64) {
        if gen != self.gen {
            return;
        }
        self.append_in_flight = false;
        warn!(session_id = %self.id, from_seq, code, "durable events not written; rewinding");
        // Transients emitted after the failed events go with them.
        if let Some(i) = self
            .pending
            .iter()
            .position(|p| p.seq.is_some_and(|s| s >= from_seq))
        {
            self.pending.truncate(i);
        }
        self.unsent.retain(|r| r.seq < from_seq);
        self.next_seq = from_seq;
        self.gen += 1;
        self.message_count = self
            .pending
            .back()
            .map(|p| p.message_count)
            .unwrap_or(self.committed_message_count);
        let failed: Vec<_> = {
            let (failed, keep) = std::mem::take(&mut self.waiters)
                .into_iter()
                .partition(|(seq, _)| *seq >= from_seq);
            self.waiters = keep;
            failed
        };
        for (_, waiter) in failed {
            let err = RpcError::new(code, storage_message(code));
            match waiter {
                Waiter::Close(reply) => {
                    self.status = SessionStatus::Idle;
                    if let Some(reply) = reply {
                        let _ = reply.send(Err(err));
                    }
                }
                Waiter::Submit { reply, .. } => {
                    let _ = reply.send(Err(err));
                }
            }
        }
        self.forget_unwritten_turns(from_seq);
        if self.pending.is_empty() {
            for w in self.flush_waiters.drain(..) {
                let _ = w.send(());
            }
        }
    }

    pub(super) fn resolve_waiters(&mut self, myself: &ActorRef<SessionMsg>) {
        let committed = self.committed_seq;
        let (done, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut self.waiters)
            .into_iter()
            .partition(|(seq, _)| *seq <= committed);
        self.waiters = keep;
        for (_, waiter) in done {
            match waiter {
                Waiter::Close(reply) => {
                    info!(session_id = %self.id, "session closed");
                    if let Some(reply) = reply {
                        let _ = reply.send(Ok(()));
                    }
                    // Drain, not stop: what is already in the mailbox is
                    // answered (4002, or read), and what comes later is
                    // refused at the send, so the registry holds it for
                    // the stopped session instead of it being dropped.
                    let _ = myself.drain();
                }
                Waiter::Submit { reply, result } => {
                    let _ = reply.send(Ok(result));
                }
            }
        }
    }

    /// Pushes a frame to every peer; a joining peer's frames are held until
    /// its resume reply is queued.
    pub(super) fn fan_out(&mut self, frame: &Bytes, class: FrameClass) {
        let limit = self.ctx.config.outbox_frames;
        let mut gone = Vec::new();
        for (peer_id, slot) in self.peers.iter_mut() {
            match &mut slot.held {
                Some(held) => {
                    if held.len() >= limit && class == FrameClass::Durable {
                        slot.outbox
                            .close(crate::outbox::CLOSE_SLOW_CONSUMER, "slow consumer");
                        gone.push(peer_id.clone());
                    } else if held.len() < limit {
                        held.push((frame.clone(), class.clone()));
                    }
                }
                None => {
                    if slot.outbox.push(frame.clone(), class.clone()) == Pushed::Closed {
                        gone.push(peer_id.clone());
                    }
                }
            }
        }
        for peer_id in gone {
            debug!(session_id = %self.id, peer_id = %peer_id, "peer gone during fan-out");
            self.detach(&peer_id);
        }
    }

    /// Whether an append is in flight at a writer that is no longer the
    /// current one (its answer will never come).
    fn in_flight_at_old_writer(&self) -> bool {
        self.append_in_flight && self.in_flight_to != self.ctx.writer().map(|w| w.get_id())
    }

    /// The writer was restarted. If an append of ours was at the old one it
    /// may or may not have been committed: ask the new writer (a barrier)
    /// before sending anything else.
    pub(super) fn writer_restarted(&mut self, myself: &ActorRef<SessionMsg>) {
        if !self.in_flight_at_old_writer() || self.rebasing {
            return;
        }
        self.rebasing = true;
        let writer = self.ctx.writer();
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

    /// What is on disk is committed; the rest of `pending` is sent again
    /// under the new writer's gen, so nothing emitted is lost or doubled.
    pub(super) fn rebased(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        barrier: Result<crate::store_writer::Barrier, i64>,
    ) {
        self.rebasing = false;
        if !self.in_flight_at_old_writer() {
            // Answered meanwhile (by the old writer before it died), or the
            // append in flight went to the new writer: nothing to rebase.
            return;
        }
        let barrier = match barrier {
            Ok(b) => b,
            Err(code) => {
                // What the old writer committed is unknown, so nothing may
                // be dropped or renumbered: ask again shortly.
                warn!(session_id = %self.id, code, "barrier after a writer restart failed; retrying");
                let me = myself.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                    let _ = me.cast(SessionMsg::WriterRestarted);
                });
                return;
            }
        };
        let gen = self.gen;
        self.committed(myself, gen, barrier.latest_seq);
        self.gen = barrier.gen;
        let first_unsent = self.unsent.first().map_or(u64::MAX, |r| r.seq);
        let mut rows: Vec<_> = self
            .pending
            .iter()
            .filter(|p| p.seq.is_some_and(|s| s < first_unsent))
            .filter_map(|p| {
                p.params
                    .as_deref()
                    .and_then(|params| row_from_params(params, p.ts_ms))
            })
            .collect();
        info!(session_id = %self.id, latest_seq = barrier.latest_seq, resent = rows.len(), "rebased after a writer restart");
        rows.append(&mut self.unsent);
        self.unsent = rows;
        self.turns.marker_dirty = true;
    }
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

fn transient_class(delta: Option<Arc<DeltaMeta>>) -> FrameClass {
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
