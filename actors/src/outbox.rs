//! A peer's bounded outbound queue: the small sink between actors and sockets.
//!
//! Sessions push event frames straight into the outboxes of their peers and
//! never wait; the peer pushes its replies into the same queue, so a reply
//! and the live frames around it keep their order. A push either enqueues,
//! merges a delta into the delta queued before it, drops a transient frame,
//! or (when what waits for the peer is at the bound) closes the peer as a
//! slow consumer so that it reconnects and resumes from its watermark
//! (PROTOCOL 1.8). The transport's writer (a WebSocket's task, an SSE
//! stream, the stdio loop) is the only consumer: it takes what is ready as
//! one batch ([`OutboxReceiver::recv_batch`]) and writes it with one flush.
//! Frames are `Bytes` shared by every peer: a frame is serialized once per
//! event, not once per peer; a merged delta is the first delta's frame with
//! the later texts spliced in, never encoded again.
//!
//! A peer may give a session a latency budget (`delivery.max_delay_ms`):
//! a delta that arrives with nothing queued behind it may then wait up to
//! that long for the deltas that continue it. It is written the moment any
//! other frame is queued behind it, so nothing else ever waits for it.
//!
//! Replies count against the bound like every frame: a peer that sends
//! requests and never reads is closed instead of making the gateway hold
//! every answer. What counts is what *waits* behind the frame being
//! written, so one frame larger than the bound (a long resume, a large
//! event) still reaches a peer that reads: see [`queue`] for the rule.

mod delta;
mod queue;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::event::DeltaMeta;
use crate::metrics::OutboxMetrics;
use delta::QueuedDelta;
use queue::{Admit, Bounds, Item, Kind, Queue};

/// WebSocket close code for a peer that cannot keep up (RFC 6455 "try again later").
pub const CLOSE_SLOW_CONSUMER: u16 = 1013;
/// WebSocket close code for a gateway going away.
pub const CLOSE_GOING_AWAY: u16 = 1001;
/// The most a writer takes in one batch (at least one frame, however
/// large): about what one `write` moves on a loopback or LAN socket, and
/// what bounds the frames a writer holds outside the counted queue.
pub const WRITE_BATCH_BYTES: usize = 64 * 1024;

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
    /// An answer to this peer's request: never dropped; counted, and
    /// overflow closes the peer, as for a durable event.
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

#[derive(Debug)]
struct Shared {
    queue: Mutex<Queue>,
    /// Wakes the single consumer when an item is queued or the last
    /// producer is gone.
    ready: Notify,
    /// Live `Outbox` handles; the consumer ends once there are none.
    senders: AtomicUsize,
    bounds: Bounds,
    metrics: Arc<OutboxMetrics>,
}

impl Shared {
    /// A panic while the lock was held can at worst leave a counter off by
    /// one frame; that is no reason to take the peer's socket down with it.
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues the close item; the caller holds the lock and notifies.
    fn close_locked(&self, q: &mut Queue, code: u16, reason: &str) -> bool {
        if q.closed {
            return false;
        }
        q.closed = true;
        q.push(Item::Close {
            code,
            reason: reason.to_string(),
        });
        if code == CLOSE_SLOW_CONSUMER {
            self.metrics.slow_consumer_closed();
        }
        true
    }
}

/// Producer side; cheap to clone (sessions and the peer each hold one).
#[derive(Debug)]
pub struct Outbox {
    shared: Arc<Shared>,
}

/// Consumer side, owned by the transport's writer.
#[derive(Debug)]
pub struct OutboxReceiver {
    shared: Arc<Shared>,
    /// Reused for each take, so a batch costs no allocation.
    scratch: Vec<Item>,
}

/// How long a drained outbox waits before it gives its buffers back.
const IDLE_RELEASE: Duration = Duration::from_millis(250);

/// Creates an outbox bounded by `max_frames` frames or `max_bytes` bytes
/// waiting behind the one being written, counting what it coalesces,
/// drops and closes into `metrics`.
pub fn outbox(
    max_frames: usize,
    max_bytes: usize,
    metrics: Arc<OutboxMetrics>,
) -> (Outbox, OutboxReceiver) {
    let shared = Arc::new(Shared {
        queue: Mutex::new(Queue::default()),
        ready: Notify::new(),
        senders: AtomicUsize::new(1),
        bounds: Bounds {
            max_frames,
            max_bytes,
        },
        metrics,
    });
    (
        Outbox {
            shared: shared.clone(),
        },
        OutboxReceiver {
            shared,
            scratch: Vec::new(),
        },
    )
}

impl Outbox {
    /// Pushes one frame with no latency budget. Never blocks (the lock is
    /// only held to append).
    pub fn push(&self, frame: Bytes, class: FrameClass) -> Pushed {
        self.push_within(frame, class, Duration::ZERO)
    }

    /// Pushes one frame; a delta that starts a new frame may be held up to
    /// `budget` for the deltas that continue it (only deltas: a budget
    /// means nothing to any other class).
    pub fn push_within(&self, frame: Bytes, class: FrameClass, budget: Duration) -> Pushed {
        let shared = &*self.shared;
        let bounds = shared.bounds;
        let mut guard = shared.lock();
        let q = &mut *guard;
        if q.closed {
            return Pushed::Closed;
        }
        if let FrameClass::Delta(meta) = &class {
            if q.merge(bounds, meta, &frame) {
                shared.metrics.coalesced();
                // Nothing new to wake the writer for: the item it extends
                // was announced when it was queued.
                return Pushed::Coalesced;
            }
        }
        let kind = match class {
            FrameClass::Reply | FrameClass::Durable => Kind::Kept,
            FrameClass::Transient | FrameClass::Delta(_) => Kind::Droppable,
        };
        match q.admit(bounds, kind, frame.len()) {
            Admit::Queue => {}
            Admit::Drop => {
                q.dropped += 1;
                shared.metrics.dropped();
                return Pushed::Dropped;
            }
            Admit::Close => {
                shared.close_locked(q, CLOSE_SLOW_CONSUMER, "slow consumer");
                drop(guard);
                shared.ready.notify_one();
                return Pushed::Closed;
            }
        }
        q.push(match class {
            FrameClass::Reply => Item::Reply(frame),
            FrameClass::Durable | FrameClass::Transient => Item::Event(frame),
            FrameClass::Delta(meta) => {
                let hold = (!budget.is_zero()).then(|| Instant::now() + budget);
                Item::Delta(QueuedDelta::new(frame, meta, hold))
            }
        });
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

    /// Frames queued and not yet taken by the writer, replies included.
    #[cfg(test)]
    pub fn backlog(&self) -> usize {
        self.shared.lock().frames()
    }

    /// Transient frames this outbox dropped so far.
    #[cfg(test)]
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
    /// Items were moved to the caller's batch.
    Taken,
    Empty,
    /// Only a delta its budget holds until then.
    Held(Instant),
    /// Empty, and nothing can be queued any more.
    Ended,
}

impl OutboxReceiver {
    /// Waits until something is ready and moves all of it (up to
    /// [`WRITE_BATCH_BYTES`]) to `out`, in order; `false` once nothing more
    /// can come (every producer is gone, or the outbox is closed and
    /// drained). A transport writes what it got with one flush.
    ///
    /// Nothing waits for a batch to fill: the first frame queued into an
    /// empty outbox is returned at once. Only a delta under a latency
    /// budget waits, and only while nothing is queued behind it.
    ///
    /// Cancel-safe: items leave the queue only in the poll that returns
    /// them, so this can sit in a `select!`.
    pub async fn recv_batch(&mut self, out: &mut Vec<Outbound>) -> bool {
        self.recv_upto(out, WRITE_BATCH_BYTES).await
    }

    /// Next item to write; `None` once nothing more can come. For
    /// consumers that handle one frame at a time (tests, `POST /rpc`); a
    /// socket writer uses [`Self::recv_batch`].
    pub async fn recv(&mut self) -> Option<Outbound> {
        let mut one = Vec::with_capacity(1);
        self.recv_upto(&mut one, 0).await;
        one.pop()
    }

    /// Like `recv` but without waiting.
    pub fn try_recv(&mut self) -> Option<Outbound> {
        let mut one = Vec::with_capacity(1);
        self.take(&mut one, 0);
        one.pop()
    }

    async fn recv_upto(&mut self, out: &mut Vec<Outbound>, max_bytes: usize) -> bool {
        loop {
            match self.take(out, max_bytes) {
                Next::Taken => return true,
                Next::Ended => return false,
                // `notify_one` stores a permit when nobody waits, so an
                // item queued between `take` and here still wakes us.
                Next::Empty if self.scratch.capacity() > 0 || out.capacity() > 0 => {
                    tokio::select! {
                        () = self.shared.ready.notified() => {}
                        () = tokio::time::sleep(IDLE_RELEASE) => self.release_buffers(out),
                    }
                }
                Next::Empty => self.shared.ready.notified().await,
                Next::Held(until) => {
                    tokio::select! {
                        () = self.shared.ready.notified() => {}
                        () = tokio::time::sleep_until(until) => {}
                    }
                }
            }
        }
    }

    /// Gives back the memory of the busiest moment once the outbox has
    /// been drained for [`IDLE_RELEASE`]: the queue, the scratch batch and
    /// the caller's batch keep their capacity, and an idle peer would
    /// otherwise hold, for the rest of its life, buffers the size of its
    /// attach (the reply and the replay). A busy peer is never idle that
    /// long, so it does not allocate them again for every batch.
    fn release_buffers(&mut self, out: &mut Vec<Outbound>) {
        self.scratch = Vec::new();
        if out.is_empty() {
            *out = Vec::new();
        }
        self.shared.lock().release();
    }

    /// Whether nothing is queued right now.
    pub fn is_empty(&self) -> bool {
        self.shared.lock().is_empty()
    }

    /// Marks the outbox closed from the consumer side (socket gone), so
    /// producers stop pushing. What is queued can still be taken.
    pub fn close(&mut self) {
        self.shared.lock().closed = true;
    }

    /// Moves up to `max_bytes` of ready items (at least one) to `out`.
    fn take(&mut self, out: &mut Vec<Outbound>, max_bytes: usize) -> Next {
        let mut items = std::mem::take(&mut self.scratch);
        let mut q = self.shared.lock();
        let ended = q.closed || self.shared.senders.load(Ordering::Acquire) == 0;
        let held = q.take_batch(Instant::now(), ended, max_bytes, &mut items);
        drop(q);
        if items.is_empty() {
            self.scratch = items;
            return match held {
                Some(until) => Next::Held(until),
                None if ended => Next::Ended,
                None => Next::Empty,
            };
        }
        let events = items.iter().filter(|i| i.is_event()).count();
        self.shared.metrics.delivered_n(events as u64);
        // Merged deltas are spliced outside the lock: producers never wait
        // on it.
        out.extend(items.drain(..).map(|item| match item {
            Item::Reply(frame) | Item::Event(frame) => Outbound::Frame(frame),
            Item::Delta(delta) => Outbound::Frame(delta.into_frame()),
            Item::Close { code, reason } => Outbound::Close { code, reason },
        }));
        self.scratch = items;
        Next::Taken
    }
}

impl Drop for OutboxReceiver {
    /// Nobody will write what is queued: free it now rather than when the
    /// last session lets go of this peer's outbox.
    fn drop(&mut self) {
        let mut q = self.shared.lock();
        q.closed = true;
        q.clear();
    }
}

#[cfg(test)]
mod tests;
