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

use std::collections::VecDeque;

use bytes::Bytes;

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

    /// Deltas are merged once what waits is half the bound (by frames or
    /// by bytes), not only when it is full: the merged deltas then take one
    /// slot instead of many, which keeps the other half free for durable
    /// frames, so a long stream of deltas alone cannot bring the peer to
    /// the bound where its next durable frame would close it. Merging
    /// costs no latency (only the last queued item, which the writer has
    /// not reached yet, is ever extended) but does cost one re-encoding,
    /// which is why a peer that keeps up gets the deltas as they came.
    pub fn under_pressure(&self, bounds: Bounds) -> bool {
        let (frames, bytes) = self.waiting();
        frames.saturating_mul(2) >= bounds.max_frames || bytes.saturating_mul(2) >= bounds.max_bytes
    }

    /// Joins `next` to the last queued item if that item is a delta it
    /// continues (only the last item is a candidate, so a delta is never
    /// moved across a frame queued after its predecessor), that item is not
    /// the head (the head does not count, so growing it would grow what the
    /// bound does not cover) and the text still fits the byte bound.
    pub fn merge(&mut self, bounds: Bounds, next: &DeltaMeta) -> bool {
        let (_, waiting) = self.waiting();
        let len = next.text.len();
        if self.items.len() < 2 || waiting.saturating_add(len) > bounds.max_bytes {
            return false;
        }
        let Some(Item::Delta(last)) = self.items.back_mut() else {
            return false;
        };
        if !last.continued_by(next) {
            return false;
        }
        self.bytes += last.merge(next);
        true
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

    #[test]
    fn pressure_is_half_of_what_waits_behind_the_head() {
        let mut q = Queue::default();
        offer(&mut q, Kind::Kept, frame(1_000));
        assert!(!q.under_pressure(BOUNDS));
        offer(&mut q, Kind::Kept, frame(1));
        assert!(!q.under_pressure(BOUNDS));
        offer(&mut q, Kind::Kept, frame(1));
        assert!(q.under_pressure(BOUNDS), "2 of 4 frames wait");
        let mut q = Queue::default();
        offer(&mut q, Kind::Kept, frame(1));
        offer(&mut q, Kind::Kept, frame(50));
        assert!(q.under_pressure(BOUNDS), "50 of 100 bytes wait");
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
