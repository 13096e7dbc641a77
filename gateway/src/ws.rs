//! The WebSocket transport: one socket, one `Peer`, one task.
//!
//! The task owns the whole socket and drives both of its directions from
//! one poll ([`Socket::poll`]): it reads frames and hands them
//! to the peer, and writes what the peer's bounded outbox hands it. A
//! write that waits for a slow client never stops the reads, and a read
//! never stops a write. It is one task rather than axum's example of a
//! reader and a writer over a split socket because an idle peer is what a
//! gateway holds most of: the second task, the lock the split shares and
//! the channel between the two were about 1.2 KiB of every idle connection
//! (docs/benchmarks/2026-12.md, "The frame path and the house").
//!
//! A few frames may be in flight to the peer at once (a semaphore permit
//! travels with each), so a client that floods is slowed by TCP, not
//! buffered without bound.
//!
//! Writing: each batch the outbox hands over (whatever was ready, up to
//! `WRITE_BATCH_BYTES`) goes to the socket in one vectored write, each
//! frame a text frame of its own (never a JSON array) whose payload is the
//! frame every peer shares ([`frames`]). Nothing waits for a batch to
//! fill: a frame queued into an empty outbox is a batch of one. Control
//! frames (pings, the close) go through tungstenite.
//!
//! Liveness: a socket that has sent nothing for a heartbeat is pinged (a
//! WebSocket ping, answered by every browser and client library on its
//! own); one silent for `--idle-timeout-s` is closed, so a peer behind a
//! dead network path does not stay attached forever.
//!
//! Closing (RFC 6455 §5.5.1, §7.4): a client's Close is echoed with its
//! status code, then the TCP connection is closed; a frame that breaks the
//! framing rules is answered with a Close 1002 (see [`close_code_for`]).
//! A close of ours is queued by the peer behind what it already sent, and
//! the socket gets [`CLOSE_GRACE`] to write it all.

mod frames;
mod io;
mod socket;
mod upgrade;

use std::future::poll_fn;
use std::sync::Arc;

use futures::SinkExt;
use ractor::ActorRef;
use tether_actors::metrics::{OpenConnection, Transport};
use tether_actors::{Outbound, OutboxReceiver, PeerMsg, CLOSE_GOING_AWAY};
use tokio::sync::{watch, Semaphore};
use tokio::time::{Duration, Instant};
use tracing::debug;
use tungstenite::error::{Error as WsError, ProtocolError};
use tungstenite::Message;

use crate::server::AppState;
use frames::RawFrames;
use socket::Socket;
pub use upgrade::ws_upgrade;
use upgrade::WsStream;

/// Frames a peer may have queued but not yet handled.
const INBOUND_IN_FLIGHT: usize = 32;

/// Time the socket gets to send what the peer queued before a close.
const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// Time the closing handshake gets once the connection is over.
const FINISH_GRACE: Duration = Duration::from_secs(1);

/// What a socket needs to start its peer. It travels boxed: an async fn
/// keeps its arguments inline for as long as it runs, and this
/// connection's future lives as long as the connection, so inline they
/// would cost every idle peer about 650 bytes (measured with
/// `size_of_val`).
pub struct Start {
    pub app: AppState,
    pub caller: crate::auth::Caller,
    /// The connection's place under `--max-connections`, held to its end.
    pub permit: Option<tokio::sync::OwnedSemaphorePermit>,
    /// Its place under its profile's connections, held to its end.
    pub place: tether_actors::Hold,
}

/// Serves one upgraded socket until it closes.
/// The socket is boxed for the same reason as [`Start`].
async fn serve_socket(socket: Box<WsStream>, start: Box<Start>) {
    // Starting a peer (spawning its actor) is the largest await and happens
    // once, so its state is on the heap only while it runs.
    let Some(conn) = Box::pin(Connection::open(socket, *start)).await else {
        return;
    };
    conn.run().await;
}

/// One open socket: everything its loop holds for the connection's life,
/// and nothing more.
struct Connection {
    socket: Socket,
    peer: ActorRef<PeerMsg>,
    outbox: OutboxReceiver,
    /// What the outbox hands over; moved to the socket while it is
    /// written and back once it is, so the outbox can give its capacity
    /// back when the peer goes idle.
    batch: Vec<Outbound>,
    /// A close of ours was asked for: the connection ends by then at the
    /// latest.
    deadline: Option<Instant>,
    /// One for each frame the peer holds but has not handled yet.
    permits: Arc<Semaphore>,
    max: usize,
    heartbeat: Duration,
    idle_timeout: Duration,
    last_inbound: Instant,
    /// When the next heartbeat looks at the socket. One timer in the loop
    /// serves it and `deadline`: a `tokio::time::Interval` would box a
    /// timer of its own for every socket.
    next_tick: Instant,
    shutdown: watch::Receiver<bool>,
    /// Changes when the token configuration is reloaded: the peer then
    /// checks its token again (and closes with 4403 if it was revoked).
    reloads: watch::Receiver<u64>,
    _open: OpenConnection,
    _permit: Option<tokio::sync::OwnedSemaphorePermit>,
    _place: tether_actors::Hold,
}

/// What one turn of the loop found.
enum Event {
    Read(Option<Result<Message, WsError>>),
    /// Everything handed to the socket is flushed.
    Written,
    WriteFailed,
    /// A batch from the outbox, or `false`: nothing more can come.
    Batch(bool),
    /// The heartbeat or the close deadline is due.
    Timer,
    Shutdown,
    Reloaded,
}

impl Connection {
    async fn open(socket: Box<WsStream>, start: Start) -> Option<Connection> {
        let Start {
            app,
            caller,
            permit,
            place,
        } = start;
        let open = app.ctx.metrics.open_connection(Transport::WebSocket);
        let (peer, outbox) = app
            .start_peer(caller, true, tether_protocol::PeerTransport::WebSocket)
            .await?;
        let heartbeat = Duration::from_secs(app.ctx.config.heartbeat_s.max(1));
        Some(Connection {
            socket: Socket {
                ws: *socket,
                pending: Vec::new(),
                frames: 0,
                raw: RawFrames::default(),
                unflushed: false,
                ping_due: false,
                read_failed: false,
            },
            peer,
            outbox,
            batch: Vec::new(),
            deadline: None,
            permits: Arc::new(Semaphore::new(INBOUND_IN_FLIGHT)),
            max: app.ctx.config.max_frame_bytes,
            heartbeat,
            idle_timeout: app.ctx.config.idle_timeout,
            last_inbound: Instant::now(),
            next_tick: Instant::now() + heartbeat,
            shutdown: app.shutdown.clone(),
            reloads: app.auth.reloads(),
            _open: open,
            _permit: permit,
            _place: place,
        })
    }

    /// Runs until the client, the outbox, a failed write, the idle timeout
    /// or the drain ends the connection.
    async fn run(mut self) {
        let timer = tokio::time::sleep_until(self.next_wake());
        tokio::pin!(timer);
        loop {
            let wake = self.next_wake();
            if timer.deadline() != wake {
                timer.as_mut().reset(wake);
            }
            // A batch is taken only once the last one is on the wire (none
            // after our Close: the connection ends once that is).
            let take = !self.socket.is_writing();
            let deadline = self.deadline;
            let event = tokio::select! {
                event = poll_fn(|cx| self.socket.poll(cx)) => event,
                more = self.outbox.recv_batch(&mut self.batch), if take => Event::Batch(more),
                () = &mut timer => Event::Timer,
                changed = self.shutdown.changed(), if deadline.is_none() => {
                    if changed.is_err() || *self.shutdown.borrow() {
                        Event::Shutdown
                    } else {
                        continue;
                    }
                }
                Ok(()) = self.reloads.changed(), if deadline.is_none() => Event::Reloaded,
            };
            if self.on_event(event).await.is_break() {
                break;
            }
        }
        // Once, at the end: boxed, as this future lives as long as the
        // connection and would otherwise be as large as this await.
        Box::pin(self.finish()).await;
    }

    /// The heartbeat, or the close deadline when it comes first.
    fn next_wake(&self) -> Instant {
        match self.deadline {
            Some(at) => at.min(self.next_tick),
            None => self.next_tick,
        }
    }

    async fn on_event(&mut self, event: Event) -> std::ops::ControlFlow<()> {
        use std::ops::ControlFlow::{Break, Continue};
        match event {
            Event::Read(msg) => self.on_read(msg).await,
            Event::Written => {
                let socket = &mut self.socket;
                let closed = socket.close_queued();
                socket.pending.clear();
                socket.frames = 0;
                socket.raw = RawFrames::default();
                self.batch = std::mem::take(&mut socket.pending);
                if closed {
                    Break(())
                } else {
                    Continue(())
                }
            }
            Event::WriteFailed | Event::Batch(false) => Break(()),
            Event::Batch(true) => {
                let socket = &mut self.socket;
                socket.pending = std::mem::take(&mut self.batch);
                // Nothing follows a close (the outbox queues none).
                socket.frames = socket
                    .pending
                    .iter()
                    .position(|item| matches!(item, Outbound::Close { .. }))
                    .unwrap_or(socket.pending.len());
                socket.pending.truncate(socket.frames + 1);
                Continue(())
            }
            Event::Timer => {
                let now = Instant::now();
                if self.deadline.is_some_and(|at| now >= at) {
                    return Break(());
                }
                if now >= self.next_tick {
                    // A late tick is not made up for: the next is a
                    // heartbeat from now.
                    self.next_tick = now + self.heartbeat;
                    return self.on_tick();
                }
                Continue(())
            }
            Event::Shutdown => {
                self.close(CLOSE_GOING_AWAY, "gateway shutting down");
                Continue(())
            }
            Event::Reloaded => {
                let _ = self.peer.cast(PeerMsg::Recheck);
                Continue(())
            }
        }
    }

    /// One read of the socket: its frame handed to the peer, or the end
    /// of the connection.
    async fn on_read(
        &mut self,
        msg: Option<Result<Message, WsError>>,
    ) -> std::ops::ControlFlow<()> {
        use std::ops::ControlFlow::{Break, Continue};
        let Some(msg) = msg else {
            return Break(());
        };
        self.last_inbound = Instant::now();
        let msg = match msg {
            Ok(m) => m,
            Err(e) => return self.on_read_error(&e),
        };
        let max = self.max;
        let inbound = match msg {
            Message::Text(t) if t.len() > max => PeerMsg::TooLarge { len: t.len() },
            Message::Text(t) => {
                let Ok(permit) = self.permits.clone().acquire_owned().await else {
                    return Break(());
                };
                PeerMsg::Text {
                    text: t.as_str().to_owned(),
                    permit: Some(permit),
                }
            }
            Message::Binary(b) if b.len() > max => PeerMsg::TooLarge { len: b.len() },
            Message::Binary(_) => PeerMsg::Binary,
            Message::Close(frame) => {
                // tungstenite queued the echo of this Close when it read
                // it; `finish` flushes it. What the outbox still holds
                // cannot follow the client's Close.
                debug!(peer_actor = %self.peer.get_id(), code = frame.as_ref().map(|f| u16::from(f.code)), "the client closed");
                return Break(());
            }
            // tungstenite answers pings itself; a raw frame is never read.
            Message::Ping(_) | Message::Pong(_) | Message::Frame(_) => return Continue(()),
        };
        if self.peer.cast(inbound).is_err() {
            // The peer is gone (it stops once its outbox is closed, as a
            // slow consumer's is): nothing more is read, but what the
            // outbox still holds, its Close among it, is written first.
            self.socket.read_failed = true;
            self.deadline
                .get_or_insert_with(|| Instant::now() + CLOSE_GRACE);
        }
        Continue(())
    }

    /// A read that failed: the connection is over, though a frame that
    /// broke the rules is first answered with its close code (the peer
    /// queues it behind what it already sent).
    #[cold]
    fn on_read_error(&mut self, e: &WsError) -> std::ops::ControlFlow<()> {
        debug!(peer_actor = %self.peer.get_id(), error = %e, "websocket read ended");
        match close_code_for(e) {
            Some((code, reason)) => {
                self.socket.read_failed = true;
                self.close(code, reason);
                std::ops::ControlFlow::Continue(())
            }
            None => std::ops::ControlFlow::Break(()),
        }
    }

    /// A heartbeat: the close after `--idle-timeout-s` of silence, a ping
    /// after a heartbeat of it.
    fn on_tick(&mut self) -> std::ops::ControlFlow<()> {
        let quiet = self.last_inbound.elapsed();
        if quiet >= self.idle_timeout && self.deadline.is_none() {
            debug!(quiet_s = quiet.as_secs(), "closing an idle websocket");
            self.close(CLOSE_GOING_AWAY, "idle timeout");
        } else if quiet >= self.heartbeat && !self.socket.close_queued() {
            self.socket.ping_due = true;
        }
        std::ops::ControlFlow::Continue(())
    }

    /// Has the peer queue a close behind what it already sent; the loop
    /// writes it all within [`CLOSE_GRACE`].
    fn close(&mut self, code: u16, reason: &str) {
        if self.deadline.is_some() {
            return;
        }
        self.deadline = Some(Instant::now() + CLOSE_GRACE);
        let _ = self.peer.cast(PeerMsg::Close {
            code,
            reason: reason.into(),
        });
    }

    async fn finish(mut self) {
        self.peer.stop(None);
        // Producers stop pushing; what is queued is freed with the receiver.
        self.outbox.close();
        // Sends the echo tungstenite queued for a client's Close (a Close
        // of ours is refused after it) and otherwise flushes ours. A client
        // that does not read would keep the socket, and the frames it
        // holds, forever. A frame cut off halfway cannot be followed by
        // anything: the socket is just dropped then.
        if !self.socket.raw.mid_frame() {
            let _ = tokio::time::timeout(FINISH_GRACE, SinkExt::close(&mut self.socket.ws)).await;
        }
    }
}

/// The close code for a read error, or `None` when the connection is gone
/// and nothing can be sent: a frame over 4× the limit is 1009, a text
/// frame that is not UTF-8 1007, and any other breach of RFC 6455's framing
/// (an unmasked client frame, RSV bits without an extension, a reserved
/// opcode, a control frame over 125 bytes or fragmented, a continuation
/// of nothing, a bad Close payload) 1002.
fn close_code_for(e: &WsError) -> Option<(u16, &'static str)> {
    match e {
        WsError::Capacity(_) => Some((1009, "frame too large")),
        WsError::Utf8(_) => Some((1007, "invalid UTF-8")),
        // The TCP connection ended without a Close: nobody to tell.
        WsError::Protocol(ProtocolError::ResetWithoutClosingHandshake) => None,
        WsError::Protocol(_) => Some((1002, "protocol error")),
        _ => None,
    }
}

/// Broadcasts the drain signal to every socket task.
pub fn shutdown_channel() -> (watch::Sender<bool>, watch::Receiver<bool>) {
    watch::channel(false)
}
