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
//! (docs/BENCHMARKS.md).
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
mod upgrade;

use std::future::poll_fn;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use futures::{Sink, SinkExt, Stream};
use ractor::ActorRef;
use tether_actors::metrics::{OpenConnection, Transport};
use tether_actors::{Outbound, OutboxReceiver, PeerMsg, CLOSE_GOING_AWAY};
use tokio::sync::{watch, Semaphore};
use tokio::time::{Duration, Instant};
use tracing::debug;
use tungstenite::error::{Error as WsError, ProtocolError};
use tungstenite::protocol::CloseFrame;
use tungstenite::Message;

use crate::server::AppState;
use frames::RawFrames;
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
    _open: OpenConnection,
    _permit: Option<tokio::sync::OwnedSemaphorePermit>,
}

/// The socket and where its writing stands: all that [`Socket::poll`]
/// touches, apart from the rest so the loop can wait on the outbox while
/// the socket is polled.
struct Socket {
    ws: WsStream,
    /// The batch being written, in order: `frames` text frames, then
    /// perhaps our Close.
    pending: Vec<Outbound>,
    frames: usize,
    /// How far the text frames of `pending` are written.
    raw: RawFrames,
    /// tungstenite holds a control frame the socket has not flushed yet.
    unflushed: bool,
    /// A heartbeat ping waits to be written.
    ping_due: bool,
    /// The batch ends with our Close: the connection is over once it is
    /// flushed.
    close_queued: bool,
    /// The read side ended with an error; only writing goes on.
    read_failed: bool,
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
}

impl Connection {
    async fn open(socket: Box<WsStream>, start: Start) -> Option<Connection> {
        let Start {
            app,
            caller,
            permit,
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
                close_queued: false,
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
            _open: open,
            _permit: permit,
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
            // A batch is taken only once the last one is on the wire, and
            // none after our Close.
            let take = !self.socket.is_writing() && !self.socket.close_queued;
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
                socket.pending.clear();
                socket.frames = 0;
                socket.raw = RawFrames::default();
                self.batch = std::mem::take(&mut socket.pending);
                if socket.close_queued {
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
                socket.close_queued = socket.frames < socket.pending.len();
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
            return Break(());
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
        } else if quiet >= self.heartbeat && !self.socket.close_queued {
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

impl Socket {
    fn is_writing(&self) -> bool {
        self.raw.done < self.pending.len() || self.unflushed || self.ping_due
    }

    /// Drives the socket: writes the batch, then reads. Neither direction
    /// waits for the other, except that nothing is read while a text frame
    /// is half written: tungstenite answers a ping as it reads it, and its
    /// pong must not land inside our frame.
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Event> {
        if self.is_writing() {
            match self.poll_write(cx) {
                Poll::Ready(Ok(())) => return Poll::Ready(Event::Written),
                Poll::Ready(Err(e)) => {
                    debug!(error = %e, "websocket write failed");
                    return Poll::Ready(Event::WriteFailed);
                }
                Poll::Pending => {}
            }
        }
        if !self.read_failed && !self.raw.mid_frame() {
            if let Poll::Ready(msg) = Pin::new(&mut self.ws).poll_next(cx) {
                return Poll::Ready(Event::Read(msg));
            }
        }
        Poll::Pending
    }

    /// Writes the batch's text frames straight to the socket, then our
    /// Close or a due ping through tungstenite, and flushes: ready once all
    /// of it is on the wire.
    fn poll_write(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), WsError>> {
        loop {
            if self.raw.done < self.frames {
                if !self.raw.mid_frame() {
                    // A pong tungstenite queued while reading goes out
                    // first, whole.
                    ready!(Pin::new(&mut self.ws).poll_flush(cx))?;
                }
                let io = Pin::new(self.ws.get_mut());
                ready!(self
                    .raw
                    .poll_write(&self.pending[..self.frames], payload, io, cx))?;
                continue;
            }
            let message = if self.raw.done < self.pending.len() {
                ready!(Pin::new(&mut self.ws).poll_ready(cx))?;
                let close = std::mem::replace(
                    &mut self.pending[self.raw.done],
                    Outbound::Frame(bytes::Bytes::new()),
                );
                self.raw.done = self.pending.len();
                let Outbound::Close { code, reason } = close else {
                    continue;
                };
                Message::Close(Some(CloseFrame {
                    code: code.into(),
                    reason: reason.into(),
                }))
            } else if self.ping_due && !self.close_queued {
                ready!(Pin::new(&mut self.ws).poll_ready(cx))?;
                self.ping_due = false;
                Message::Ping(bytes::Bytes::new())
            } else {
                self.ping_due = false;
                if self.unflushed {
                    ready!(Pin::new(&mut self.ws).poll_flush(cx))?;
                    self.unflushed = false;
                }
                return Poll::Ready(Ok(()));
            };
            Pin::new(&mut self.ws).start_send(message)?;
            self.unflushed = true;
        }
    }
}

/// The payload of a text frame of a batch (only frames are passed).
fn payload(item: &Outbound) -> &[u8] {
    match item {
        Outbound::Frame(bytes) => bytes,
        Outbound::Close { .. } => &[],
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
