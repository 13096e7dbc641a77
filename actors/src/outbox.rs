//! A peer's bounded outbound queue: the small sink between actors and sockets.
//!
//! Sessions push event frames straight into the outboxes of their peers and
//! never wait: a push either enqueues, merges a delta into the delta queued
//! before it, drops a transient frame, or (when the durable backlog exceeds
//! the bound) closes the peer as a slow consumer so that it reconnects and
//! resumes from its watermark (PROTOCOL 1.8). The transport's writer task is
//! the only consumer. Frames are `Bytes` shared by every peer: a frame is
//! serialized once per event, not once per peer; only a merged delta is
//! encoded again, once, when the writer takes it.
//!
//! Replies to the peer's own requests do not count against the bound (a
//! large resume must not make its own requester a "slow consumer").

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bytes::Bytes;
use tokio::sync::Notify;

use crate::event::DeltaMeta;
use crate::metrics::OutboxMetrics;

/// WebSocket close code for a peer that cannot keep up (RFC 6455 "try again later").
pub const CLOSE_SLOW_CONSUMER: u16 = 1013;
/// WebSocket close code for a gateway going away.
pub const CLOSE_GOING_AWAY: u16 = 1001;

/// What the transport writes, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Outbound {
    /// A complete JSON text frame.
    Frame(Bytes),
    /// Close the connection with this code and reason, then stop writing.
    Close { code: u16, reason: String },
}

/// Kind of frame pushed, which decides what happens under pressure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameClass {
    /// An answer to this peer's request; never dropped, not counted.
    Reply,
    /// A durable event: never dropped or merged; overflow closes the peer.
    Durable,
    /// A transient event: dropped when the outbox is full.
    Transient,
    /// A transient delta with what it takes to merge it into the delta
    /// queued right before it; dropped only when it cannot be merged and
    /// the outbox is full.
    Delta(Arc<DeltaMeta>),
}

/// Result of a push.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushed {
    Queued,
    /// The delta was joined to the delta queued before it.
    Coalesced,
    /// A transient frame was dropped because the outbox is over its bound.
    Dropped,
    /// The peer is (now) closed; forget it.
    Closed,
}

/// A queued delta and the text of the deltas merged into it since.
#[derive(Debug)]
struct QueuedDelta {
    /// The first delta's frame, written as is when nothing was merged.
    frame: Bytes,
    meta: Arc<DeltaMeta>,
    /// Text of the deltas merged behind the first one, in order. Kept as
    /// text and encoded once when the writer takes the item, so merging
    /// `n` deltas costs O(total text), not `n` re-encodings.
    merged: String,
    /// Bytes this item counts against the bound.
    counted: usize,
}

impl QueuedDelta {
    /// Offset just past the text this item carries now.
    fn text_len(&self) -> u64 {
        (self.meta.text.len() + self.merged.len()) as u64
    }

    fn into_frame(self) -> Bytes {
        if self.merged.is_empty() {
            return self.frame;
        }
        let mut text = String::with_capacity(self.meta.text.len() + self.merged.len());
        text.push_str(&self.meta.text);
        text.push_str(&self.merged);
        self.meta.frame_with_text(&text)
    }
}

#[derive(Debug)]
enum Item {
    /// Not counted against the bound.
    Reply(Bytes),
    /// Counted: one frame, its length in bytes.
    Event(Bytes),
    Delta(QueuedDelta),
    Close {
        code: u16,
        reason: String,
    },
}

impl Item {
    /// Bytes this item counts against the bound; `None` if it is not
    /// counted at all.
    fn counted(&self) -> Option<usize> {
        match self {
            Item::Event(frame) => Some(frame.len()),
            Item::Delta(delta) => Some(delta.counted),
            Item::Reply(_) | Item::Close { .. } => None,
        }
    }
}

#[derive(Debug, Default)]
struct Queue {
    items: VecDeque<Item>,
    /// Counted (non-reply) frames queued, and their bytes.
    frames: usize,
    bytes: usize,
    /// No push is accepted any more: a close is queued, or the consumer
    /// is gone.
    closed: bool,
    dropped: usize,
}

#[derive(Debug)]
struct Shared {
    queue: Mutex<Queue>,
    /// Wakes the single consumer when an item is queued or the last
    /// producer is gone.
    ready: Notify,
    /// Live `Outbox` handles; the consumer ends once there are none.
    senders: AtomicUsize,
    max_frames: usize,
    max_bytes: usize,
    metrics: Arc<OutboxMetrics>,
}

impl Shared {
    /// A panic while the lock was held can at worst leave a counter off by
    /// one frame; that is no reason to take the peer's socket down with it.
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn fits(&self, q: &Queue, len: usize) -> bool {
        q.frames < self.max_frames && q.bytes.saturating_add(len) <= self.max_bytes
    }

    /// Deltas are merged once the outbox is half full (by frames or by
    /// bytes), not only when it is full: the merged deltas then take one
    /// slot instead of many, which keeps the other half free for durable
    /// frames, so a long stream of deltas alone cannot bring the peer to
    /// the bound where its next durable frame would close it. Merging
    /// costs no latency (only the last queued item, which the writer has
    /// not reached yet, is ever extended) but does cost one re-encoding,
    /// which is why a peer that keeps up gets the deltas as they came.
    fn under_pressure(&self, q: &Queue) -> bool {
        q.frames.saturating_mul(2) >= self.max_frames || q.bytes.saturating_mul(2) >= self.max_bytes
    }

    /// Queues the close item; the caller holds the lock and notifies.
    fn close_locked(&self, q: &mut Queue, code: u16, reason: &str) -> bool {
        if q.closed {
            return false;
        }
        q.closed = true;
        q.items.push_back(Item::Close {
            code,
            reason: reason.to_string(),
        });
        if code == CLOSE_SLOW_CONSUMER {
            self.metrics.slow_consumer_closed();
        }
        true
    }
}

/// Joins `meta`'s delta to the last queued item if that item is a delta
/// it continues (only the last item is a candidate, so a delta is never
/// moved across a frame queued after its predecessor) and the text still
/// fits the byte bound.
fn try_merge(q: &mut Queue, meta: &DeltaMeta, max_bytes: usize) -> bool {
    let Some(Item::Delta(last)) = q.items.back_mut() else {
        return false;
    };
    if !last.meta.continued_by(meta, last.text_len()) {
        return false;
    }
    let len = meta.text.len();
    if q.bytes.saturating_add(len) > max_bytes {
        return false;
    }
    last.merged.push_str(&meta.text);
    last.counted += len;
    q.bytes += len;
    true
}

/// Producer side; cheap to clone (sessions and the peer each hold one).
#[derive(Debug)]
pub struct Outbox {
    shared: Arc<Shared>,
}

/// Consumer side, owned by the transport's writer task.
#[derive(Debug)]
pub struct OutboxReceiver {
    shared: Arc<Shared>,
}

/// Creates an outbox bounded by `max_frames` frames or `max_bytes` bytes,
/// counting what it coalesces, drops and closes into `metrics`.
pub fn outbox(
    max_frames: usize,
    max_bytes: usize,
    metrics: Arc<OutboxMetrics>,
) -> (Outbox, OutboxReceiver) {
    let shared = Arc::new(Shared {
        queue: Mutex::new(Queue::default()),
        ready: Notify::new(),
        senders: AtomicUsize::new(1),
        max_frames,
        max_bytes,
        metrics,
    });
    (
        Outbox {
            shared: shared.clone(),
        },
        OutboxReceiver { shared },
    )
}

impl Outbox {
    /// Pushes one frame. Never blocks (the lock is only held to append).
    pub fn push(&self, frame: Bytes, class: FrameClass) -> Pushed {
        let shared = &*self.shared;
        let mut guard = shared.lock();
        let q = &mut *guard;
        if q.closed {
            return Pushed::Closed;
        }
        if let FrameClass::Delta(meta) = &class {
            if shared.under_pressure(q) && try_merge(q, meta, shared.max_bytes) {
                shared.metrics.coalesced();
                // Nothing new to wake the writer for: the item it extends
                // was announced when it was queued.
                return Pushed::Coalesced;
            }
        }
        let item = match class {
            FrameClass::Reply => Item::Reply(frame),
            FrameClass::Durable if !shared.fits(q, frame.len()) => {
                shared.close_locked(q, CLOSE_SLOW_CONSUMER, "slow consumer");
                drop(guard);
                shared.ready.notify_one();
                return Pushed::Closed;
            }
            FrameClass::Transient | FrameClass::Delta(_) if !shared.fits(q, frame.len()) => {
                q.dropped += 1;
                shared.metrics.dropped();
                return Pushed::Dropped;
            }
            FrameClass::Durable | FrameClass::Transient => Item::Event(frame),
            FrameClass::Delta(meta) => Item::Delta(QueuedDelta {
                counted: frame.len(),
                frame,
                meta,
                merged: String::new(),
            }),
        };
        if let Some(len) = item.counted() {
            q.frames += 1;
            q.bytes += len;
        }
        q.items.push_back(item);
        drop(guard);
        shared.ready.notify_one();
        Pushed::Queued
    }

    /// Queues a close frame; every later push answers `Closed`.
    pub fn close(&self, code: u16, reason: &str) {
        let queued = self
            .shared
            .close_locked(&mut self.shared.lock(), code, reason);
        if queued {
            self.shared.ready.notify_one();
        }
    }

    pub fn is_closed(&self) -> bool {
        self.shared.lock().closed
    }

    /// Frames waiting to be written (replies excluded).
    pub fn backlog(&self) -> usize {
        self.shared.lock().frames
    }

    /// Transient frames this outbox dropped so far.
    pub fn dropped(&self) -> usize {
        self.shared.lock().dropped
    }
}

impl Clone for Outbox {
    fn clone(&self) -> Self {
        self.shared.senders.fetch_add(1, Ordering::Relaxed);
        Self {
            shared: self.shared.clone(),
        }
    }
}

impl Drop for Outbox {
    fn drop(&mut self) {
        if self.shared.senders.fetch_sub(1, Ordering::AcqRel) == 1 {
            // The consumer may be waiting for an item that can no longer come.
            self.shared.ready.notify_one();
        }
    }
}

/// What the consumer finds when it looks at the queue.
enum Next {
    Item(Outbound),
    Empty,
    /// Empty, and nothing can be queued any more.
    Ended,
}

impl OutboxReceiver {
    /// Next item to write; `None` once nothing more can come (every
    /// producer is gone, or the outbox is closed and drained).
    ///
    /// Cancel-safe: an item is only taken from the queue when it is
    /// returned, so this can sit in a `select!`.
    pub async fn recv(&mut self) -> Option<Outbound> {
        loop {
            match self.take() {
                Next::Item(item) => return Some(item),
                Next::Ended => return None,
                // `notify_one` stores a permit when nobody waits, so an
                // item queued between `take` and here still wakes us.
                Next::Empty => self.shared.ready.notified().await,
            }
        }
    }

    /// Like `recv` but without waiting (the writer batches what is ready).
    pub fn try_recv(&mut self) -> Option<Outbound> {
        match self.take() {
            Next::Item(item) => Some(item),
            Next::Empty | Next::Ended => None,
        }
    }

    /// Whether nothing is queued right now.
    pub fn is_empty(&self) -> bool {
        self.shared.lock().items.is_empty()
    }

    /// Marks the outbox closed from the consumer side (socket gone), so
    /// producers stop pushing. What is queued can still be taken.
    pub fn close(&mut self) {
        self.shared.lock().closed = true;
    }

    fn take(&mut self) -> Next {
        let mut q = self.shared.lock();
        let Some(item) = q.items.pop_front() else {
            let ended = q.closed || self.shared.senders.load(Ordering::Acquire) == 0;
            return if ended { Next::Ended } else { Next::Empty };
        };
        if let Some(len) = item.counted() {
            q.frames -= 1;
            q.bytes -= len;
            // Counted items are exactly the event frames: a delivery.
            self.shared.metrics.delivered();
        }
        drop(q);
        Next::Item(match item {
            Item::Reply(frame) | Item::Event(frame) => Outbound::Frame(frame),
            // Encoded outside the lock: producers never wait on it.
            Item::Delta(delta) => Outbound::Frame(delta.into_frame()),
            Item::Close { code, reason } => Outbound::Close { code, reason },
        })
    }
}

impl Drop for OutboxReceiver {
    /// Nobody will write what is queued: free it now rather than when the
    /// last session lets go of this peer's outbox.
    fn drop(&mut self) {
        let mut q = self.shared.lock();
        q.closed = true;
        q.items.clear();
        q.frames = 0;
        q.bytes = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{frame_of, EventRecord, TurnTag};
    use serde_json::Value;
    use tether_protocol::{DeltaPayload, EventType, SessionId, TraceId, TurnId};

    fn frame(n: usize) -> Bytes {
        Bytes::from(vec![b'x'; n])
    }

    fn with_metrics(
        max_frames: usize,
        max_bytes: usize,
    ) -> (Outbox, OutboxReceiver, Arc<OutboxMetrics>) {
        let metrics = Arc::new(OutboxMetrics::default());
        let (tx, rx) = outbox(max_frames, max_bytes, metrics.clone());
        (tx, rx, metrics)
    }

    fn plain(max_frames: usize, max_bytes: usize) -> (Outbox, OutboxReceiver) {
        let (tx, rx, _) = with_metrics(max_frames, max_bytes);
        (tx, rx)
    }

    fn record(kind: EventType, turn: &str, text: &str, offset: u64) -> EventRecord {
        EventRecord::new(
            kind,
            &DeltaPayload {
                text: text.into(),
                offset,
            },
            Some(TurnTag {
                turn_id: TurnId::from(turn),
                trace_id: TraceId::from("tr"),
            }),
            1_764_470_000_000,
        )
    }

    /// A delta's frame and class, as a session pushes it.
    fn delta_of(kind: EventType, turn: &str, text: &str, offset: u64) -> (Bytes, FrameClass) {
        let sid = SessionId::from("s_1");
        let rec = record(kind, turn, text, offset);
        let meta = rec.delta_meta(&sid).expect("a delta");
        (
            frame_of(&rec.params_of(&sid)),
            FrameClass::Delta(Arc::new(meta)),
        )
    }

    fn delta(text: &str, offset: u64) -> (Bytes, FrameClass) {
        delta_of(EventType::MessageDelta, "t_1", text, offset)
    }

    fn push_delta(tx: &Outbox, (frame, class): (Bytes, FrameClass)) -> Pushed {
        tx.push(frame, class)
    }

    fn drain(rx: &mut OutboxReceiver) -> Vec<Outbound> {
        std::iter::from_fn(|| rx.try_recv()).collect()
    }

    /// `(type, text, offset)` of a delta frame, or `(type, "", 0)`.
    fn summary(item: &Outbound) -> (String, String, u64) {
        let Outbound::Frame(bytes) = item else {
            return ("close".into(), String::new(), 0);
        };
        let Ok(v) = serde_json::from_slice::<Value>(bytes) else {
            return ("raw".into(), String::new(), 0);
        };
        let p = &v["params"];
        (
            p["type"].as_str().unwrap_or_default().to_string(),
            p["payload"]["text"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            p["payload"]["offset"].as_u64().unwrap_or_default(),
        )
    }

    /// Fills an outbox of bound 4 to half with durable frames.
    fn pressured() -> (Outbox, OutboxReceiver, Arc<OutboxMetrics>) {
        let (tx, rx, metrics) = with_metrics(4, 100_000);
        assert_eq!(tx.push(frame(1), FrameClass::Durable), Pushed::Queued);
        assert_eq!(tx.push(frame(1), FrameClass::Durable), Pushed::Queued);
        (tx, rx, metrics)
    }

    #[tokio::test]
    async fn frames_arrive_in_push_order() {
        let (tx, mut rx) = plain(10, 1000);
        for i in 0..3u8 {
            assert_eq!(
                tx.push(Bytes::from(vec![i]), FrameClass::Durable),
                Pushed::Queued
            );
        }
        for i in 0..3u8 {
            assert_eq!(rx.recv().await, Some(Outbound::Frame(Bytes::from(vec![i]))));
        }
        assert_eq!(tx.backlog(), 0);
    }

    #[tokio::test]
    async fn transient_frames_are_dropped_and_durable_overflow_closes() {
        let (tx, mut rx, metrics) = with_metrics(2, 1000);
        assert_eq!(tx.push(frame(1), FrameClass::Durable), Pushed::Queued);
        assert_eq!(tx.push(frame(1), FrameClass::Transient), Pushed::Queued);
        assert_eq!(tx.push(frame(1), FrameClass::Transient), Pushed::Dropped);
        assert_eq!(tx.dropped(), 1);
        // Replies are not bounded.
        assert_eq!(tx.push(frame(1), FrameClass::Reply), Pushed::Queued);
        assert_eq!(tx.push(frame(1), FrameClass::Durable), Pushed::Closed);
        assert!(tx.is_closed());
        assert_eq!(tx.push(frame(1), FrameClass::Reply), Pushed::Closed);
        let got = drain(&mut rx);
        assert_eq!(got.len(), 4);
        assert_eq!(
            got[3],
            Outbound::Close {
                code: CLOSE_SLOW_CONSUMER,
                reason: "slow consumer".into()
            }
        );
        let m = metrics.snapshot();
        assert_eq!((m.dropped, m.slow_consumer_closes, m.coalesced), (1, 1, 0));
        // Closed and drained: nothing more can come.
        assert_eq!(rx.recv().await, None);
    }

    #[tokio::test]
    async fn byte_bound_counts_too() {
        let (tx, mut rx) = plain(100, 10);
        assert_eq!(tx.push(frame(6), FrameClass::Durable), Pushed::Queued);
        assert_eq!(tx.push(frame(6), FrameClass::Transient), Pushed::Dropped);
        assert!(rx.recv().await.is_some());
        assert_eq!(tx.push(frame(6), FrameClass::Transient), Pushed::Queued);
    }

    #[tokio::test]
    async fn a_gone_receiver_reads_as_closed() {
        let (tx, mut rx) = plain(10, 100);
        rx.close();
        assert!(tx.is_closed());
        assert_eq!(tx.push(frame(1), FrameClass::Durable), Pushed::Closed);
        drop(rx);
        let (tx, rx) = plain(10, 100);
        drop(rx);
        assert_eq!(tx.push(frame(1), FrameClass::Durable), Pushed::Closed);
    }

    #[tokio::test]
    async fn recv_wakes_on_a_push_and_ends_with_the_last_producer() {
        let (tx, mut rx) = plain(10, 100);
        let other = tx.clone();
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            while let Some(item) = rx.recv().await {
                got.push(item);
            }
            got
        });
        tokio::task::yield_now().await;
        assert_eq!(tx.push(frame(1), FrameClass::Durable), Pushed::Queued);
        drop(tx);
        assert_eq!(other.push(frame(2), FrameClass::Transient), Pushed::Queued);
        drop(other);
        let got = tokio::time::timeout(std::time::Duration::from_secs(10), reader)
            .await
            .expect("the reader ends once every producer is gone")
            .expect("reader task");
        assert_eq!(got, [Outbound::Frame(frame(1)), Outbound::Frame(frame(2))]);
    }

    #[tokio::test]
    async fn contiguous_deltas_are_coalesced_under_pressure_and_keep_all_text() {
        let (tx, mut rx, metrics) = pressured();
        assert_eq!(push_delta(&tx, delta("hé", 0)), Pushed::Queued);
        assert_eq!(push_delta(&tx, delta("llo \"w", 3)), Pushed::Coalesced);
        assert_eq!(push_delta(&tx, delta("orld\"\n", 9)), Pushed::Coalesced);
        assert_eq!(tx.backlog(), 3);
        let got = drain(&mut rx);
        assert_eq!(got.len(), 3);
        assert_eq!(
            summary(&got[2]),
            ("message.delta".into(), "héllo \"world\"\n".into(), 0)
        );
        // The merged frame is exactly the frame of one delta with the
        // joined text: same shape, ids and ts as a live event frame.
        let whole = delta("héllo \"world\"\n", 0).0;
        assert_eq!(got[2], Outbound::Frame(whole));
        assert_eq!(metrics.snapshot().coalesced, 2);
        assert_eq!(tx.backlog(), 0);
    }

    #[tokio::test]
    async fn deltas_are_not_merged_without_pressure() {
        let (tx, mut rx, metrics) = with_metrics(4, 100_000);
        assert_eq!(push_delta(&tx, delta("a", 0)), Pushed::Queued);
        assert_eq!(push_delta(&tx, delta("b", 1)), Pushed::Queued);
        let got: Vec<_> = drain(&mut rx).iter().map(summary).collect();
        assert_eq!(
            got,
            [
                ("message.delta".into(), "a".into(), 0),
                ("message.delta".into(), "b".into(), 1)
            ]
        );
        assert_eq!(metrics.snapshot().coalesced, 0);
    }

    #[tokio::test]
    async fn only_the_continuation_of_the_same_stream_is_merged() {
        let (tx, mut rx, metrics) = with_metrics(100, 100_000);
        for _ in 0..50 {
            assert_eq!(tx.push(frame(1), FrameClass::Durable), Pushed::Queued);
        }
        assert_eq!(push_delta(&tx, delta("ab", 0)), Pushed::Queued);
        // A gap, then an overlap: not contiguous.
        assert_eq!(push_delta(&tx, delta("x", 5)), Pushed::Queued);
        assert_eq!(push_delta(&tx, delta("y", 5)), Pushed::Queued);
        // Another turn, and the reasoning stream of the same turn.
        assert_eq!(
            push_delta(&tx, delta_of(EventType::MessageDelta, "t_2", "z", 7)),
            Pushed::Queued
        );
        assert_eq!(
            push_delta(&tx, delta_of(EventType::ReasoningDelta, "t_2", "r", 8)),
            Pushed::Queued
        );
        assert_eq!(metrics.snapshot().coalesced, 0);
        let got: Vec<_> = drain(&mut rx)[50..].iter().map(summary).collect();
        let texts: Vec<_> = got.iter().map(|(_, t, o)| (t.as_str(), *o)).collect();
        assert_eq!(texts, [("ab", 0), ("x", 5), ("y", 5), ("z", 7), ("r", 8)]);
    }

    #[tokio::test]
    async fn a_frame_queued_after_a_delta_keeps_the_next_delta_apart() {
        let (tx, mut rx, metrics) = pressured();
        assert_eq!(push_delta(&tx, delta("a", 0)), Pushed::Queued);
        assert_eq!(tx.push(frame(1), FrameClass::Durable), Pushed::Queued);
        assert_eq!(push_delta(&tx, delta("b", 1)), Pushed::Dropped);
        // Room again: the delta is queued behind the durable frame, never
        // merged across it.
        let (tx, mut rx2, _) = with_metrics(10, 100_000);
        for _ in 0..5 {
            tx.push(frame(1), FrameClass::Durable);
        }
        assert_eq!(push_delta(&tx, delta("a", 0)), Pushed::Queued);
        assert_eq!(tx.push(frame(9), FrameClass::Durable), Pushed::Queued);
        assert_eq!(tx.push(frame(1), FrameClass::Reply), Pushed::Queued);
        assert_eq!(push_delta(&tx, delta("b", 1)), Pushed::Queued);
        let got: Vec<_> = drain(&mut rx2)[5..].to_vec();
        assert_eq!(summary(&got[0]).1, "a");
        assert_eq!(got[1], Outbound::Frame(frame(9)));
        assert_eq!(got[2], Outbound::Frame(frame(1)));
        assert_eq!(summary(&got[3]).1, "b");
        assert_eq!(metrics.snapshot().coalesced, 0);
        assert_eq!(drain(&mut rx).len(), 4);
    }

    #[tokio::test]
    async fn a_full_outbox_still_coalesces_and_drops_what_it_cannot_merge() {
        let (tx, mut rx, metrics) = with_metrics(3, 100_000);
        tx.push(frame(1), FrameClass::Durable);
        tx.push(frame(1), FrameClass::Durable);
        assert_eq!(push_delta(&tx, delta("a", 0)), Pushed::Queued);
        // Full now: a continuation is still merged (it takes no new slot)...
        assert_eq!(push_delta(&tx, delta("b", 1)), Pushed::Coalesced);
        // ...anything else transient is dropped.
        assert_eq!(push_delta(&tx, delta("d", 3)), Pushed::Dropped);
        assert_eq!(
            push_delta(&tx, delta_of(EventType::MessageDelta, "t_2", "x", 0)),
            Pushed::Dropped
        );
        assert_eq!(tx.push(frame(1), FrameClass::Transient), Pushed::Dropped);
        let m = metrics.snapshot();
        assert_eq!((m.coalesced, m.dropped, m.slow_consumer_closes), (1, 3, 0));
        assert_eq!(tx.dropped(), 3);
        let got = drain(&mut rx);
        assert_eq!(got.len(), 3);
        assert_eq!(summary(&got[2]).1, "ab");
    }

    #[tokio::test]
    async fn merging_respects_the_byte_bound() {
        let first = delta("abcd", 0);
        let bound = first.0.len() + 2;
        let (tx, mut rx, metrics) = with_metrics(100, bound);
        assert_eq!(push_delta(&tx, first), Pushed::Queued);
        assert_eq!(push_delta(&tx, delta("ef", 4)), Pushed::Coalesced);
        assert_eq!(push_delta(&tx, delta("g", 6)), Pushed::Dropped);
        let m = metrics.snapshot();
        assert_eq!((m.coalesced, m.dropped), (1, 1));
        let got = drain(&mut rx);
        assert_eq!(summary(&got[0]).1, "abcdef");
        // Everything counted was released by the take.
        assert_eq!(push_delta(&tx, delta("g", 6)), Pushed::Queued);
    }

    #[tokio::test]
    async fn slow_consumer_closes_are_counted_once() {
        let (tx, mut rx, metrics) = pressured();
        tx.push(frame(1), FrameClass::Durable);
        tx.push(frame(1), FrameClass::Durable);
        assert_eq!(tx.push(frame(1), FrameClass::Durable), Pushed::Closed);
        assert_eq!(tx.push(frame(1), FrameClass::Durable), Pushed::Closed);
        tx.close(CLOSE_SLOW_CONSUMER, "slow consumer");
        assert_eq!(metrics.snapshot().slow_consumer_closes, 1);
        let got = drain(&mut rx);
        assert_eq!(got.len(), 5);
        assert_eq!(
            got[4],
            Outbound::Close {
                code: 1013,
                reason: "slow consumer".into()
            }
        );
        // Other closes are not slow consumers.
        let (tx, _rx, metrics) = with_metrics(4, 100);
        tx.close(CLOSE_GOING_AWAY, "bye");
        assert_eq!(metrics.snapshot().slow_consumer_closes, 0);
    }
}
