//! The accounting of one outbox: what is queued, what counts against the
//! bound, and what a push of each class may do. Pure logic under the
//! outbox's lock; no waking, no metrics.
//!
//! The rule (PROTOCOL 1.8): a peer is slow when what *waits* for it is
//! over the bound, never because one frame is large.
//!
//! - The *head* of the queue, the frame the writer is on or takes next,
//!   never counts: a frame larger than the whole bound can be queued, and
//!   frames behind it are judged on their own. (The frame the writer has
//!   already taken is out of the queue and so not counted either.)
//! - A frame that must not be dropped (a reply, a durable event) is queued
//!   as long as what already waits behind the head is under the bound,
//!   whatever its own size; it closes the peer only when the backlog it
//!   would join is already at the bound. So the queue holds at most the
//!   head, the bound, and one frame beyond it, and a large frame arriving
//!   behind a few small ones does not close a peer that reads.
//! - A transient frame is queued only if it fits within the bound (behind
//!   the head), otherwise dropped: losing it costs nothing durable.
//!
//! Replies count like every other frame: a peer that asks and never reads
//! would otherwise make the gateway hold every answer it asked for.
//!
//! Deltas: a delta that continues the delta queued last is merged into it
//! (see [`Queue::merge`]), and the last item may be a delta held back by
//! its peer's latency budget; it is released the moment anything is
//! queued behind it (see [`Queue::take_batch`]).

use std::collections::VecDeque;

use bytes::Bytes;
use tokio::time::Instant;

use super::delta::QueuedDelta;
use crate::event::DeltaMeta;

/// The bound of one outbox: frames and bytes that may wait behind the head.
#[derive(Debug, Clone, Copy)]
pub(super) struct Bounds {
    pub max_frames: usize,
    pub max_bytes: usize,
}

#[derive(Debug)]
pub(super) enum Item {
    /// An answer to the peer's own request.
    Reply(Bytes),
    /// A durable or transient event frame.
    Event(Bytes),
    Delta(QueuedDelta),
    /// Not counted: it is the last item, and nothing is pushed after it.
    Close {
        code: u16,
        reason: String,
    },
}

impl Item {
    /// Bytes this item counts against the bound; `None` if it is not a
    /// frame.
    fn counted(&self) -> Option<usize> {
        match self {
            Item::Reply(frame) | Item::Event(frame) => Some(frame.len()),
            Item::Delta(delta) => Some(delta.counted()),
            Item::Close { .. } => None,
        }
    }

    /// Whether taking this item delivers an event (for the metrics, which
    /// count fan-out, not answers).
    pub(super) fn is_event(&self) -> bool {
        matches!(self, Item::Event(_) | Item::Delta(_))
    }
}

/// What may happen to a frame that is pushed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Admit {
    Queue,
    /// A transient frame that does not fit.
    Drop,
    /// A frame that must not be dropped, behind a backlog at the bound.
    Close,
}

/// How a push is treated under pressure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// Never dropped; queued unless the backlog is at the bound.
    Kept,
    /// Dropped unless it fits.
    Droppable,
}

#[derive(Debug, Default)]
pub(super) struct Queue {
    items: VecDeque<Item>,
    /// Frames queued (the head included) and their bytes.
    frames: usize,
    bytes: usize,
    /// No push is accepted any more: a close is queued, or the consumer
    /// is gone.
    pub closed: bool,
    /// Transient frames dropped so far.
    pub dropped: usize,
}

impl Queue {
    /// Frames and bytes waiting behind the head (see the module doc).
    pub fn waiting(&self) -> (usize, usize) {
        match self.items.front().and_then(Item::counted) {
            Some(head) => (self.frames - 1, self.bytes - head),
            None => (self.frames, self.bytes),
        }
    }

    /// Frames queued, the head included.
    #[cfg(test)]
    pub fn frames(&self) -> usize {
        self.frames
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Frees the queue's buffer if nothing is in it.
    pub fn release(&mut self) {
        if self.items.is_empty() {
            self.items = VecDeque::new();
        }
    }

    /// What a push of a frame of `len` bytes may do.
    pub fn admit(&self, bounds: Bounds, kind: Kind, len: usize) -> Admit {
        // It would be the head: nothing waits, so nothing is over.
        if self.items.is_empty() {
            return Admit::Queue;
        }
        let (frames, bytes) = self.waiting();
        match kind {
            Kind::Kept if frames >= bounds.max_frames || bytes >= bounds.max_bytes => Admit::Close,
            Kind::Kept => Admit::Queue,
            Kind::Droppable
                if frames < bounds.max_frames && bytes.saturating_add(len) <= bounds.max_bytes =>
            {
                Admit::Queue
            }
            Kind::Droppable => Admit::Drop,
        }
    }

    /// Joins `next` (whose frame is `frame`) to the last queued item if
    /// that item is a delta it continues: the last item only, so a delta is
    /// never moved across a frame queued after its predecessor. Whatever
    /// is still queued is merged, not only under pressure: a peer then gets
    /// fewer, larger frames exactly when its writer is behind, and a peer
    /// that keeps up (its queue empty at each push) gets every delta as it
    /// came. The merged frame stays within [`super::delta::MAX_MERGED_FRAME`];
    /// behind the head it must also fit the byte bound. The head may grow
    /// too (it is not being written until taken): the cap bounds it.
    pub fn merge(&mut self, bounds: Bounds, next: &DeltaMeta, frame: &[u8]) -> bool {
        let (_, waiting) = self.waiting();
        let is_head = self.items.len() == 1;
        let Some(Item::Delta(last)) = self.items.back_mut() else {
            return false;
        };
        let Some(add) = last.would_add(next, frame) else {
            return false;
        };
        if !is_head && waiting.saturating_add(add) > bounds.max_bytes {
            return false;
        }
        self.bytes += last.merge(next, frame);
        true
    }

    /// Moves ready items to `out`, oldest first, until `max_bytes` are
    /// taken (at least one item, however large). The last item stays when
    /// it is a delta its budget still holds at `now` (unless `release`:
    /// nothing more can come, so nothing is worth waiting for); its
    /// deadline is returned then, so the writer knows how long to wait for
    /// it when nothing else is ready.
    ///
    /// Nothing else is ever held: a held delta is the last item by
    /// definition, so a frame queued behind it (durable, a reply, another
    /// delta that could not join it, a close) releases it with itself.
    pub fn take_batch(
        &mut self,
        now: Instant,
        release: bool,
        max_bytes: usize,
        out: &mut Vec<Item>,
    ) -> Option<Instant> {
        let mut taken = 0usize;
        while let Some(front) = self.items.front() {
            if let (1, Item::Delta(d), false) = (self.items.len(), front, release) {
                if d.held_at(now) {
                    return d.hold_until;
                }
            }
            if taken >= max_bytes && !out.is_empty() {
                return None;
            }
            taken = taken.saturating_add(front.counted().unwrap_or(0));
            if let Some(item) = self.take() {
                out.push(item);
            }
        }
        None
    }

    pub fn push(&mut self, item: Item) {
        if let Some(len) = item.counted() {
            self.frames += 1;
            self.bytes += len;
        }
        self.items.push_back(item);
    }

    pub fn take(&mut self) -> Option<Item> {
        let item = self.items.pop_front()?;
        if let Some(len) = item.counted() {
            self.frames -= 1;
            self.bytes -= len;
        }
        Some(item)
    }

    /// Forgets everything queued (the consumer is gone).
    pub fn clear(&mut self) {
        self.items.clear();
        self.frames = 0;
        self.bytes = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOUNDS: Bounds = Bounds {
        max_frames: 4,
        max_bytes: 100,
    };

    fn frame(n: usize) -> Item {
        Item::Event(Bytes::from(vec![b'x'; n]))
    }

    fn reply(n: usize) -> Item {
        Item::Reply(Bytes::from(vec![b'r'; n]))
    }

    /// Pushes `item` if a push of `kind` would queue it; what was decided.
    fn offer(q: &mut Queue, kind: Kind, item: Item) -> Admit {
        let len = item.counted().unwrap_or(0);
        let admit = q.admit(BOUNDS, kind, len);
        if admit == Admit::Queue {
            q.push(item);
        }
        admit
    }

    #[test]
    fn a_frame_larger_than_the_bound_is_queued_into_an_empty_outbox() {
        let mut q = Queue::default();
        assert_eq!(offer(&mut q, Kind::Kept, frame(1_000)), Admit::Queue);
        assert_eq!(q.waiting(), (0, 0), "the head does not count");
        // Even a transient one: an empty outbox is not full.
        let mut q = Queue::default();
        assert_eq!(offer(&mut q, Kind::Droppable, frame(1_000)), Admit::Queue);
    }

    #[test]
    fn frames_behind_a_large_head_are_judged_on_their_own() {
        let mut q = Queue::default();
        offer(&mut q, Kind::Kept, reply(1_000));
        for _ in 0..BOUNDS.max_frames {
            assert_eq!(offer(&mut q, Kind::Kept, frame(10)), Admit::Queue);
        }
        assert_eq!(q.waiting(), (4, 40));
        // Now full by frames: the next durable frame closes.
        assert_eq!(offer(&mut q, Kind::Kept, frame(10)), Admit::Close);
    }

    #[test]
    fn a_large_frame_joins_a_backlog_under_the_bound_whatever_its_size() {
        let mut q = Queue::default();
        offer(&mut q, Kind::Kept, frame(10));
        offer(&mut q, Kind::Kept, frame(30));
        assert_eq!(offer(&mut q, Kind::Kept, frame(1_000)), Admit::Queue);
        assert_eq!(q.waiting(), (2, 1_030));
        // What waits is over the bound now: the next kept frame closes,
        // a transient one is dropped, however small.
        assert_eq!(q.admit(BOUNDS, Kind::Kept, 1), Admit::Close);
        assert_eq!(q.admit(BOUNDS, Kind::Droppable, 1), Admit::Drop);
    }

    #[test]
    fn the_backlog_closes_the_peer_only_at_the_bound() {
        let mut q = Queue::default();
        offer(&mut q, Kind::Kept, frame(1));
        assert_eq!(offer(&mut q, Kind::Kept, frame(99)), Admit::Queue);
        assert_eq!(q.waiting(), (1, 99));
        assert_eq!(offer(&mut q, Kind::Kept, frame(1)), Admit::Queue);
        assert_eq!(q.waiting(), (2, 100));
        assert_eq!(q.admit(BOUNDS, Kind::Kept, 1), Admit::Close);
    }

    #[test]
    fn transient_frames_must_fit_behind_the_head() {
        let mut q = Queue::default();
        offer(&mut q, Kind::Kept, frame(500));
        assert_eq!(offer(&mut q, Kind::Droppable, frame(60)), Admit::Queue);
        assert_eq!(offer(&mut q, Kind::Droppable, frame(41)), Admit::Drop);
        assert_eq!(offer(&mut q, Kind::Droppable, frame(40)), Admit::Queue);
        assert_eq!(q.waiting(), (2, 100));
    }

    #[test]
    fn replies_count_like_events() {
        let mut q = Queue::default();
        offer(&mut q, Kind::Kept, reply(1));
        for _ in 0..2 {
            assert_eq!(offer(&mut q, Kind::Kept, reply(50)), Admit::Queue);
        }
        assert_eq!(q.waiting(), (2, 100));
        assert_eq!(offer(&mut q, Kind::Kept, reply(1)), Admit::Close);
        assert_eq!(offer(&mut q, Kind::Kept, frame(1)), Admit::Close);
    }

    #[test]
    fn taking_the_head_makes_the_next_frame_the_head() {
        let mut q = Queue::default();
        offer(&mut q, Kind::Kept, frame(1_000));
        offer(&mut q, Kind::Kept, frame(1_000));
        assert_eq!(q.waiting(), (1, 1_000));
        assert_eq!(q.admit(BOUNDS, Kind::Kept, 1), Admit::Close);
        // The writer takes the first: the second is the head now.
        assert!(matches!(q.take(), Some(Item::Event(_))));
        assert_eq!(q.waiting(), (0, 0));
        assert_eq!(offer(&mut q, Kind::Kept, frame(1)), Admit::Queue);
        q.take();
        q.take();
        assert_eq!((q.frames(), q.waiting()), (0, (0, 0)));
        assert!(q.is_empty());
    }

    #[test]
    fn a_close_is_not_counted() {
        let mut q = Queue::default();
        q.push(frame(10));
        q.push(Item::Close {
            code: 1013,
            reason: "slow consumer".into(),
        });
        assert_eq!((q.frames(), q.waiting()), (1, (0, 0)));
        q.take();
        assert_eq!((q.frames(), q.waiting()), (0, (0, 0)));
        assert!(matches!(q.take(), Some(Item::Close { .. })));
        assert!(q.take().is_none());
    }

    /// A `message.delta` frame of turn `t_1` and what the outbox reads of it.
    fn delta(text: &str, offset: u64) -> (bytes::Bytes, crate::event::DeltaMeta) {
        use crate::event::{frame_of, EventRecord, TurnTag};
        use tether_protocol::{DeltaPayload, EventType, SessionId, TraceId, TurnId};
        let sid = SessionId::from("s_1");
        let rec = EventRecord::new(
            EventType::MessageDelta,
            &DeltaPayload {
                text: text.into(),
                offset,
            },
            Some(TurnTag {
                turn_id: TurnId::from("t_1"),
                trace_id: TraceId::from("tr"),
            }),
            0,
        );
        let frame = frame_of(&rec.params_of(&sid));
        let meta = rec.delta_meta(&sid, &frame).expect("a delta");
        (frame, meta)
    }

    fn held_delta(text: &str, offset: u64, until: Option<Instant>) -> Item {
        let (frame, meta) = delta(text, offset);
        Item::Delta(QueuedDelta::new(frame, std::sync::Arc::new(meta), until))
    }

    fn kinds(items: &[Item]) -> Vec<&'static str> {
        items
            .iter()
            .map(|i| match i {
                Item::Reply(_) => "reply",
                Item::Event(_) => "event",
                Item::Delta(_) => "delta",
                Item::Close { .. } => "close",
            })
            .collect()
    }

    #[test]
    fn only_a_last_delta_within_its_budget_is_held() {
        let now = Instant::now();
        let later = now + std::time::Duration::from_millis(50);
        let mut q = Queue::default();
        q.push(frame(1));
        q.push(held_delta("a", 0, Some(later)));
        let mut out = Vec::new();
        assert_eq!(q.take_batch(now, false, usize::MAX, &mut out), Some(later));
        assert_eq!(kinds(&out), ["event"], "what is before it goes out");
        out.clear();
        // Nothing behind it: still held, and nothing is taken.
        assert_eq!(q.take_batch(now, false, usize::MAX, &mut out), Some(later));
        assert!(out.is_empty());
        // Its deadline passed: it goes.
        assert_eq!(q.take_batch(later, false, usize::MAX, &mut out), None);
        assert_eq!(kinds(&out), ["delta"]);
    }

    #[test]
    fn a_frame_behind_a_held_delta_releases_it() {
        let now = Instant::now();
        let later = now + std::time::Duration::from_secs(60);
        for behind in [frame(1), reply(1), held_delta("x", 9, Some(later))] {
            let mut q = Queue::default();
            q.push(held_delta("a", 0, Some(later)));
            q.push(behind);
            let mut out = Vec::new();
            let held = q.take_batch(now, false, usize::MAX, &mut out);
            assert_eq!(kinds(&out)[0], "delta", "the held delta goes first");
            // A delta behind it is held in its turn; anything else is not.
            assert_eq!(held.is_some(), out.len() == 1);
        }
        // A close behind it, or no producer left: nothing is held.
        let mut q = Queue::default();
        q.push(held_delta("a", 0, Some(later)));
        let mut out = Vec::new();
        assert_eq!(q.take_batch(now, true, usize::MAX, &mut out), None);
        assert_eq!(kinds(&out), ["delta"]);
    }

    #[test]
    fn a_held_head_still_takes_continuations_but_not_past_64_kib() {
        let later = Instant::now() + std::time::Duration::from_secs(60);
        let mut q = Queue::default();
        q.push(held_delta("a", 0, Some(later)));
        let (f, m) = delta("b", 1);
        assert!(
            q.merge(BOUNDS, &m, &f),
            "the head is extended while it waits"
        );
        assert_eq!(q.waiting(), (0, 0));
        let big = "y".repeat(70_000);
        let (f, m) = delta(&big, 2);
        assert!(!q.merge(BOUNDS, &m, &f), "past 64 KiB: a frame of its own");
    }

    #[test]
    fn a_batch_stops_at_its_byte_budget_but_takes_one_frame_at_least() {
        let mut q = Queue::default();
        for _ in 0..3 {
            q.push(frame(40));
        }
        let mut out = Vec::new();
        q.take_batch(Instant::now(), false, 50, &mut out);
        assert_eq!(out.len(), 2, "40 taken, under 50: one more");
        out.clear();
        q.take_batch(Instant::now(), false, 0, &mut out);
        assert_eq!(out.len(), 1);
    }

    #[test]
    fn clear_forgets_everything() {
        let mut q = Queue::default();
        q.push(frame(10));
        q.push(reply(10));
        q.clear();
        assert_eq!((q.frames(), q.waiting()), (0, (0, 0)));
        assert!(q.is_empty());
    }
}
