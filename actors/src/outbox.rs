//! A peer's bounded outbound queue: the small sink between actors and sockets.
//!
//! Sessions push event frames straight into the outboxes of their peers and
//! never wait: a push either enqueues, drops a transient frame, or (when the
//! durable backlog exceeds the bound) closes the peer as a slow consumer so
//! that it reconnects and resumes from its watermark. The transport's writer
//! task is the only consumer. Frames are `Bytes` shared by every peer: a
//! frame is serialized once per event, not once per peer.
//!
//! Replies to the peer's own requests do not count against the bound (a
//! large resume must not make its own requester a "slow consumer").

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::mpsc;

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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameClass {
    /// An answer to this peer's request; never dropped, not counted.
    Reply,
    /// A durable event: never dropped; overflow closes the peer.
    Durable,
    /// A transient event (deltas): dropped under pressure.
    Transient,
}

/// Result of a push.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushed {
    Queued,
    /// A transient frame was dropped because the outbox is over its bound.
    Dropped,
    /// The peer is (now) closed; forget it.
    Closed,
}

#[derive(Debug)]
struct Shared {
    frames: AtomicUsize,
    bytes: AtomicUsize,
    closed: AtomicBool,
    max_frames: usize,
    max_bytes: usize,
    dropped: AtomicUsize,
}

/// Producer side; cheap to clone (sessions and the peer each hold one).
#[derive(Debug, Clone)]
pub struct Outbox {
    tx: mpsc::UnboundedSender<(Outbound, usize)>,
    shared: Arc<Shared>,
}

/// Consumer side, owned by the transport's writer task.
#[derive(Debug)]
pub struct OutboxReceiver {
    rx: mpsc::UnboundedReceiver<(Outbound, usize)>,
    shared: Arc<Shared>,
}

/// Creates an outbox bounded by `max_frames` frames or `max_bytes` bytes.
pub fn outbox(max_frames: usize, max_bytes: usize) -> (Outbox, OutboxReceiver) {
    let (tx, rx) = mpsc::unbounded_channel();
    let shared = Arc::new(Shared {
        frames: AtomicUsize::new(0),
        bytes: AtomicUsize::new(0),
        closed: AtomicBool::new(false),
        max_frames,
        max_bytes,
        dropped: AtomicUsize::new(0),
    });
    (
        Outbox {
            tx,
            shared: shared.clone(),
        },
        OutboxReceiver { rx, shared },
    )
}

impl Outbox {
    /// Pushes one frame. Never blocks.
    pub fn push(&self, frame: Bytes, class: FrameClass) -> Pushed {
        if self.is_closed() {
            return Pushed::Closed;
        }
        if class == FrameClass::Reply {
            return self.send(Outbound::Frame(frame), 0);
        }
        let len = frame.len();
        let frames = self.shared.frames.load(Ordering::Relaxed);
        let bytes = self.shared.bytes.load(Ordering::Relaxed);
        let over = frames + 1 > self.shared.max_frames || bytes + len > self.shared.max_bytes;
        if over {
            return match class {
                FrameClass::Transient => {
                    self.shared.dropped.fetch_add(1, Ordering::Relaxed);
                    Pushed::Dropped
                }
                _ => {
                    self.close(CLOSE_SLOW_CONSUMER, "slow consumer");
                    Pushed::Closed
                }
            };
        }
        self.shared.frames.fetch_add(1, Ordering::Relaxed);
        self.shared.bytes.fetch_add(len, Ordering::Relaxed);
        self.send(Outbound::Frame(frame), len)
    }

    /// Queues a close frame; every later push answers `Closed`.
    pub fn close(&self, code: u16, reason: &str) {
        if !self.shared.closed.swap(true, Ordering::AcqRel) {
            let _ = self.tx.send((
                Outbound::Close {
                    code,
                    reason: reason.to_string(),
                },
                0,
            ));
        }
    }

    pub fn is_closed(&self) -> bool {
        self.shared.closed.load(Ordering::Acquire) || self.tx.is_closed()
    }

    /// Frames waiting to be written (replies excluded).
    pub fn backlog(&self) -> usize {
        self.shared.frames.load(Ordering::Relaxed)
    }

    /// Transient frames dropped so far.
    pub fn dropped(&self) -> usize {
        self.shared.dropped.load(Ordering::Relaxed)
    }

    fn send(&self, item: Outbound, counted: usize) -> Pushed {
        match self.tx.send((item, counted)) {
            Ok(()) => Pushed::Queued,
            Err(_) => Pushed::Closed,
        }
    }
}

impl OutboxReceiver {
    /// Next item to write; `None` once every producer is gone.
    pub async fn recv(&mut self) -> Option<Outbound> {
        let (item, counted) = self.rx.recv().await?;
        if counted > 0 {
            self.shared.frames.fetch_sub(1, Ordering::Relaxed);
            self.shared.bytes.fetch_sub(counted, Ordering::Relaxed);
        }
        Some(item)
    }

    /// Like `recv` but without waiting (the writer batches what is ready).
    pub fn try_recv(&mut self) -> Option<Outbound> {
        let (item, counted) = self.rx.try_recv().ok()?;
        if counted > 0 {
            self.shared.frames.fetch_sub(1, Ordering::Relaxed);
            self.shared.bytes.fetch_sub(counted, Ordering::Relaxed);
        }
        Some(item)
    }

    /// Whether nothing is queued right now.
    pub fn is_empty(&self) -> bool {
        self.rx.is_empty()
    }

    /// Marks the outbox closed from the consumer side (socket gone), so
    /// producers stop pushing.
    pub fn close(&mut self) {
        self.shared.closed.store(true, Ordering::Release);
        self.rx.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(n: usize) -> Bytes {
        Bytes::from(vec![b'x'; n])
    }

    #[tokio::test]
    async fn frames_arrive_in_push_order() {
        let (tx, mut rx) = outbox(10, 1000);
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
        let (tx, mut rx) = outbox(2, 1000);
        assert_eq!(tx.push(frame(1), FrameClass::Durable), Pushed::Queued);
        assert_eq!(tx.push(frame(1), FrameClass::Transient), Pushed::Queued);
        assert_eq!(tx.push(frame(1), FrameClass::Transient), Pushed::Dropped);
        assert_eq!(tx.dropped(), 1);
        // Replies are not bounded.
        assert_eq!(tx.push(frame(1), FrameClass::Reply), Pushed::Queued);
        assert_eq!(tx.push(frame(1), FrameClass::Durable), Pushed::Closed);
        assert!(tx.is_closed());
        assert_eq!(tx.push(frame(1), FrameClass::Reply), Pushed::Closed);
        let mut got = Vec::new();
        while let Some(item) = rx.try_recv() {
            got.push(item);
        }
        assert_eq!(got.len(), 4);
        assert_eq!(
            got[3],
            Outbound::Close {
                code: CLOSE_SLOW_CONSUMER,
                reason: "slow consumer".into()
            }
        );
    }

    #[tokio::test]
    async fn byte_bound_counts_too() {
        let (tx, mut rx) = outbox(100, 10);
        assert_eq!(tx.push(frame(6), FrameClass::Durable), Pushed::Queued);
        assert_eq!(tx.push(frame(6), FrameClass::Transient), Pushed::Dropped);
        assert!(rx.recv().await.is_some());
        assert_eq!(tx.push(frame(6), FrameClass::Transient), Pushed::Queued);
    }

    #[tokio::test]
    async fn a_gone_receiver_reads_as_closed() {
        let (tx, mut rx) = outbox(10, 100);
        rx.close();
        assert!(tx.is_closed());
        assert_eq!(tx.push(frame(1), FrameClass::Durable), Pushed::Closed);
    }
}
