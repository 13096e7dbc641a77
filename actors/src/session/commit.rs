//! The commit pipeline of a session, as a pure state machine.
//!
//! A durable event gets the next `seq`, its row waits to be sent to the
//! StoreWriter and its frame waits in `pending` until the writer says it is
//! on disk; only then is it released to the ring and the peers. A transient
//! frame emitted while durable ones are pending waits behind them, so every
//! peer sees frames in emission order and no frame overtakes a durable one
//! that is not yet on disk.
//!
//! One append is in flight at a time: what is emitted meanwhile goes out as
//! one larger append when it returns, so a busy session makes fewer, bigger
//! writes. A failed append drops its events, and everything emitted after
//! them, and rewinds the seq under a new *append generation*: the writer
//! rejects any append of this session with an older one, so none of the
//! abandoned seqs can land after the rewind and leave a gap or a fork. A
//! writer that dies while an append of ours is at it leaves that append's
//! fate unknown: a barrier at the new writer tells what is on disk, and the
//! rest is sent again under the generation the barrier hands out.
//!
//! Nothing here sends, spawns or reads a clock. Each call returns what the
//! session must do (the append to send, the frames to fan out, the waiters
//! to answer), so that these rules can be tested on their own; the session
//! (`pipeline.rs`) wires them to its messages, the writer and its peers.

use std::collections::VecDeque;

use ractor::ActorId;
use tether_store::EventRow;

use crate::store_writer::Barrier;

#[cfg(test)]
mod props;
#[cfg(test)]
mod tests;

/// A frame that may go out to the peers now.
#[derive(Debug, PartialEq)]
pub(crate) enum Frame<D, T> {
    /// A durable event, on disk under `seq`: it enters the ring, then goes out.
    Durable {
        seq: u64,
        item: D,
    },
    Transient(T),
}

/// What a commit releases.
#[derive(Debug)]
#[must_use]
pub(crate) struct Released<D, T, W> {
    /// Frames to fan out, in emission order.
    pub frames: Vec<Frame<D, T>>,
    /// Waiters to answer with success: their seq is on disk, or (those of
    /// [`CommitPipeline::wait_settled`]) nothing is pending any more. Seq
    /// waiters come first.
    pub answered: Vec<W>,
}

impl<D, T, W> Default for Released<D, T, W> {
    fn default() -> Self {
        Self {
            frames: Vec::new(),
            answered: Vec::new(),
        }
    }
}

/// What a failed append drops.
#[derive(Debug)]
#[must_use]
pub(crate) struct Dropped<D, W> {
    /// The durable events that were not written, in seq order (the
    /// transient frames emitted after them are dropped with them).
    pub events: Vec<(u64, D)>,
    /// Waiters of those seqs: answer each with the failure.
    pub failed: Vec<W>,
    /// Waiters of [`CommitPipeline::wait_settled`] that the failure
    /// settles (nothing is pending any more): answer them after `failed`.
    pub settled: Vec<W>,
}

/// What to do after the new writer's barrier answered.
#[derive(Debug)]
#[must_use]
pub(crate) enum Rebase<D, T, W> {
    /// Nothing of ours is at the old writer any more (it answered before
    /// it died): only the new generation is taken.
    Unneeded,
    /// The barrier failed: what the old writer committed is unknown, so
    /// nothing may be dropped or renumbered. Report `WriterRestarted`
    /// again shortly.
    Retry { code: i64 },
    /// What is on disk is released; `resent` events that were at the old
    /// writer are sent again, ahead of the unsent ones.
    Rebased {
        released: Released<D, T, W>,
        resent: usize,
    },
}

/// An append to hand to the writer.
#[derive(Debug, PartialEq)]
pub(crate) struct Append {
    pub append_gen: u64,
    /// Contiguous seqs, from the first one not yet on disk.
    pub rows: Vec<EventRow>,
}

/// An emitted event not yet released.
#[derive(Debug)]
enum Staged<D, T> {
    Durable {
        seq: u64,
        /// The segment's message count once this event is committed.
        message_count: u64,
        item: D,
    },
    Transient(T),
}

/// Seq assignment, pending frames, the append in flight and the writer's
/// generation of one session. `D` is what a durable event carries to its
/// fan-out, `T` a transient one, `W` a waiter.
#[derive(Debug)]
pub(crate) struct CommitPipeline<D, T, W> {
    /// The last seq on disk (as far as this session knows).
    committed_seq: u64,
    next_seq: u64,
    /// The generation the writer accepts this session's appends under.
    append_gen: u64,
    /// Emitted and not yet released, in emission order. The front, if
    /// any, is durable: a transient frame waits only behind a durable one.
    pending: VecDeque<Staged<D, T>>,
    /// Rows of `pending`'s last durable events not yet sent to the writer.
    unsent: Vec<EventRow>,
    /// The writer the append in flight went to, while one is in flight.
    in_flight_to: Option<ActorId>,
    /// Waiting for the new writer's barrier after a writer restart.
    rebasing: bool,
    /// Answered once their seq is on disk (or failed with it).
    waiters: Vec<(u64, W)>,
    /// Answered once nothing is pending.
    settle_waiters: Vec<W>,
    /// Messages in the current segment, counting pending events too.
    message_count: u64,
    /// Messages in the current segment, counting only committed events.
    committed_message_count: u64,
}

impl<D, T, W> CommitPipeline<D, T, W> {
    /// A pipeline that starts where the writer's barrier says the session's
    /// events end, with `message_count` messages in its current segment.
    pub(crate) fn new(barrier: Barrier, message_count: u64) -> Self {
        Self {
            committed_seq: barrier.latest_seq,
            next_seq: barrier.latest_seq + 1,
            append_gen: barrier.gen,
            pending: VecDeque::new(),
            unsent: Vec::new(),
            in_flight_to: None,
            rebasing: false,
            waiters: Vec::new(),
            settle_waiters: Vec::new(),
            message_count,
            committed_message_count: message_count,
        }
    }

    /// The last seq on disk: what peers may have seen.
    pub(crate) fn committed_seq(&self) -> u64 {
        self.committed_seq
    }

    /// The seq the next durable event gets.
    pub(crate) fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// The seq of the last durable event emitted (committed or not).
    pub(crate) fn last_seq(&self) -> u64 {
        self.next_seq - 1
    }

    /// Messages in the current segment, counting pending events too.
    pub(crate) fn message_count(&self) -> u64 {
        self.message_count
    }

    /// Messages in the current segment, counting only committed events.
    pub(crate) fn committed_message_count(&self) -> u64 {
        self.committed_message_count
    }

    /// Whether every event emitted so far is released (or dropped).
    pub(crate) fn is_settled(&self) -> bool {
        self.pending.is_empty() && self.unsent.is_empty()
    }

    /// Settled, and no append or barrier under way: the store has the
    /// session exactly as this pipeline does.
    pub(crate) fn is_quiet(&self) -> bool {
        self.is_settled() && self.in_flight_to.is_none() && !self.rebasing
    }

    /// Whether [`Self::take_append`] would give an append now: rows are
    /// waiting, none is in flight, and no barrier is out. (An append sent
    /// while a barrier is out could be committed after the barrier looked,
    /// and the barrier's answer would then have it sent again.)
    pub(crate) fn has_append(&self) -> bool {
        !self.unsent.is_empty() && self.in_flight_to.is_none() && !self.rebasing
    }

    /// The durable events waiting for their commit, in seq order.
    pub(crate) fn pending_durable(&self) -> impl Iterator<Item = &D> {
        self.pending.iter().filter_map(|s| match s {
            Staged::Durable { item, .. } => Some(item),
            Staged::Transient(_) => None,
        })
    }

    /// Whether a seq waiter matches `f`.
    pub(crate) fn any_waiter(&self, f: impl Fn(&W) -> bool) -> bool {
        self.waiters.iter().any(|(_, w)| f(w))
    }

    /// Emits a durable event: `make` gets its seq and returns its row and
    /// what it carries to its fan-out. `message_count` is the segment's
    /// message count once it is committed. Returns the seq.
    pub(crate) fn emit_durable(
        &mut self,
        message_count: u64,
        make: impl FnOnce(u64) -> (EventRow, D),
    ) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.message_count = message_count;
        let (row, item) = make(seq);
        self.unsent.push(row);
        self.pending.push_back(Staged::Durable {
            seq,
            message_count,
            item,
        });
        seq
    }

    /// Emits a transient frame: returned if it may go out now, else it
    /// waits behind the pending durable events.
    pub(crate) fn emit_transient(&mut self, item: T) -> Option<T> {
        if self.pending.is_empty() {
            return Some(item);
        }
        self.pending.push_back(Staged::Transient(item));
        None
    }

    /// Answers `waiter` once `seq` is on disk, or with its failure; it is
    /// returned if `seq` is on disk already.
    pub(crate) fn wait_for(&mut self, seq: u64, waiter: W) -> Option<W> {
        if seq <= self.committed_seq {
            return Some(waiter);
        }
        self.waiters.push((seq, waiter));
        None
    }

    /// Answers `waiter` once every event emitted so far is released or
    /// dropped; it is returned if that is the case already.
    pub(crate) fn wait_settled(&mut self, waiter: W) -> Option<W> {
        if self.is_settled() {
            return Some(waiter);
        }
        self.settle_waiters.push(waiter);
        None
    }

    /// The rows to send to writer `to` as one append, unless there are
    /// none, an append is in flight already, or a barrier is out.
    pub(crate) fn take_append(&mut self, to: ActorId) -> Option<Append> {
        if !self.has_append() {
            return None;
        }
        self.in_flight_to = Some(to);
        Some(Append {
            append_gen: self.append_gen,
            rows: std::mem::take(&mut self.unsent),
        })
    }

    /// The writer could not take the append: its rows are held for the
    /// next one.
    pub(crate) fn append_not_sent(&mut self, mut rows: Vec<EventRow>) {
        self.in_flight_to = None;
        rows.append(&mut self.unsent);
        self.unsent = rows;
    }

    /// The writer could not take the append and its rows are gone too:
    /// every pending durable event is sent again, its row rebuilt.
    pub(crate) fn append_lost(&mut self, row_of: impl Fn(&D) -> Option<EventRow>) {
        self.in_flight_to = None;
        self.unsent = self.rows_to_resend(u64::MAX, row_of);
    }

    /// The writer committed every pending event with `seq <= upto_seq`.
    /// An answer to an older generation is stale and changes nothing.
    pub(crate) fn committed(&mut self, append_gen: u64, upto_seq: u64) -> Released<D, T, W> {
        if append_gen != self.append_gen {
            return Released::default();
        }
        self.in_flight_to = None;
        let mut frames = Vec::new();
        while let Some(front) = self.pending.front() {
            if matches!(front, Staged::Durable { seq, .. } if *seq > upto_seq) {
                break;
            }
            match self.pending.pop_front() {
                Some(Staged::Durable {
                    seq,
                    message_count,
                    item,
                }) => {
                    self.committed_seq = seq;
                    self.committed_message_count = message_count;
                    frames.push(Frame::Durable { seq, item });
                }
                Some(Staged::Transient(item)) => frames.push(Frame::Transient(item)),
                None => break,
            }
        }
        let committed = self.committed_seq;
        let (done, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut self.waiters)
            .into_iter()
            .partition(|(seq, _)| *seq <= committed);
        self.waiters = keep;
        let mut answered: Vec<W> = done.into_iter().map(|(_, w)| w).collect();
        answered.extend(self.settled_now());
        Released { frames, answered }
    }

    /// The append of generation `append_gen` starting at `from_seq` was not
    /// written: drops it and everything emitted after it, rewinds the seq
    /// and moves to the next generation. `None` for a stale answer.
    pub(crate) fn append_failed(
        &mut self,
        append_gen: u64,
        from_seq: u64,
    ) -> Option<Dropped<D, W>> {
        if append_gen != self.append_gen {
            return None;
        }
        self.in_flight_to = None;
        let cut = self
            .pending
            .iter()
            .position(|s| matches!(s, Staged::Durable { seq, .. } if *seq >= from_seq))
            .unwrap_or(self.pending.len());
        let events = self
            .pending
            .split_off(cut)
            .into_iter()
            .filter_map(|s| match s {
                Staged::Durable { seq, item, .. } => Some((seq, item)),
                Staged::Transient(_) => None,
            })
            .collect();
        self.unsent.retain(|r| r.seq < from_seq);
        self.next_seq = from_seq;
        self.append_gen += 1;
        self.message_count = self
            .pending
            .iter()
            .rev()
            .find_map(|s| match s {
                Staged::Durable { message_count, .. } => Some(*message_count),
                Staged::Transient(_) => None,
            })
            .unwrap_or(self.committed_message_count);
        let (failed, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut self.waiters)
            .into_iter()
            .partition(|(seq, _)| *seq >= from_seq);
        self.waiters = keep;
        Some(Dropped {
            events,
            failed: failed.into_iter().map(|(_, w)| w).collect(),
            settled: self.settled_now(),
        })
    }

    /// The writer was restarted; `current` is the new one. If an append of
    /// ours was at the old one, its fate is unknown: returns whether to ask
    /// the new writer for a barrier. Nothing is sent until it answers, even
    /// if the old writer's answer arrives meanwhile, so the barrier's
    /// answer is about that one append only.
    pub(crate) fn writer_restarted(&mut self, current: Option<ActorId>) -> bool {
        if !self.in_flight_at_old_writer(current) || self.rebasing {
            return false;
        }
        self.rebasing = true;
        true
    }

    /// The barrier asked for by [`Self::writer_restarted`] answered.
    /// What is on disk is committed; the rest of `pending` is sent again
    /// under the new writer's generation, its rows rebuilt with `row_of`,
    /// so that nothing emitted is lost or doubled.
    pub(crate) fn rebased(
        &mut self,
        current: Option<ActorId>,
        barrier: Result<Barrier, i64>,
        row_of: impl Fn(&D) -> Option<EventRow>,
    ) -> Rebase<D, T, W> {
        self.rebasing = false;
        if !self.in_flight_at_old_writer(current) {
            // The writer that answered rejects appends of an older
            // generation from now on, in flight or not.
            if let (Ok(b), None) = (&barrier, self.in_flight_to) {
                self.append_gen = b.gen;
            }
            return Rebase::Unneeded;
        }
        let barrier = match barrier {
            Ok(b) => b,
            Err(code) => return Rebase::Retry { code },
        };
        let released = self.committed(self.append_gen, barrier.latest_seq);
        self.append_gen = barrier.gen;
        let first_unsent = self.unsent.first().map_or(u64::MAX, |r| r.seq);
        let mut rows = self.rows_to_resend(first_unsent, row_of);
        let resent = rows.len();
        rows.append(&mut self.unsent);
        self.unsent = rows;
        Rebase::Rebased { released, resent }
    }

    /// Whether an append is in flight at a writer other than `current`
    /// (whose answer will never come).
    fn in_flight_at_old_writer(&self, current: Option<ActorId>) -> bool {
        self.in_flight_to.is_some_and(|to| Some(to) != current)
    }

    /// The rows of the pending durable events with `seq < before`.
    fn rows_to_resend(
        &self,
        before: u64,
        row_of: impl Fn(&D) -> Option<EventRow>,
    ) -> Vec<EventRow> {
        self.pending
            .iter()
            .filter_map(|s| match s {
                Staged::Durable { seq, item, .. } if *seq < before => row_of(item),
                _ => None,
            })
            .collect()
    }

    /// The settle waiters, if nothing is pending any more.
    fn settled_now(&mut self) -> Vec<W> {
        if self.pending.is_empty() {
            std::mem::take(&mut self.settle_waiters)
        } else {
            Vec::new()
        }
    }
}
