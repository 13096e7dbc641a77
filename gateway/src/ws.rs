//! The WebSocket transport: one socket, one `Peer`.
//!
//! As in axum's examples the socket is split: this task reads frames and
//! hands them to the peer; a writer task drains the peer's bounded outbox.
//! A few frames may be in flight to the peer at once (a semaphore permit
//! travels with each), so a client that floods is slowed by TCP, not
//! buffered without bound.
//!
//! Liveness: a socket that has sent nothing for a heartbeat is pinged (a
//! WebSocket ping, answered by every browser and client library on its
//! own); one silent for `--idle-timeout-s` is closed, so a peer behind a
//! dead network path does not stay attached forever.
//!
//! Closing (RFC 6455 §5.5.1, §7.4): a client's Close is echoed with its
//! status code, then the TCP connection is closed; a frame that breaks the
//! framing rules is answered with a Close 1002 (see [`close_code_for`]).

use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use axum::extract::ws::{CloseFrame, Message, Utf8Bytes, WebSocket};
use futures::stream::SplitStream;
use futures::{SinkExt, StreamExt};
use ractor::ActorRef;
use tether_actors::metrics::{OpenConnection, Transport};
use tether_actors::{Outbound, OutboxReceiver, PeerMsg, CLOSE_GOING_AWAY};
use tokio::sync::{watch, Notify, Semaphore};
use tokio::task::JoinHandle;
use tokio::time::{Duration, Instant};
use tracing::debug;
use tungstenite::error::{Error as WsError, ProtocolError};

use crate::server::AppState;

/// Frames a peer may have queued but not yet handled.
const INBOUND_IN_FLIGHT: usize = 32;

/// Time the writer gets to send what the peer queued before a close.
const CLOSE_GRACE: Duration = Duration::from_secs(2);

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

/// Serves one upgraded socket until it closes. The socket is boxed for the
/// same reason as [`Start`]: it is split into its two halves at once.
pub async fn serve_socket(socket: Box<WebSocket>, start: Box<Start>) {
    // Starting a peer (spawning its actor) is the largest await and happens
    // once, so its state is on the heap only while it runs.
    let Some(conn) = Box::pin(Connection::open(*socket, *start)).await else {
        return;
    };
    conn.run().await;
}

/// One open socket: everything its read loop holds for the connection's
/// life, and nothing more.
struct Connection {
    stream: SplitStream<WebSocket>,
    reader: Reader,
    ticks: tokio::time::Interval,
    shutdown: watch::Receiver<bool>,
    _open: OpenConnection,
    _permit: Option<tokio::sync::OwnedSemaphorePermit>,
}

impl Connection {
    async fn open(socket: WebSocket, start: Start) -> Option<Connection> {
        let Start {
            app,
            caller,
            permit,
        } = start;
        let open = app.ctx.metrics.open_connection(Transport::WebSocket);
        let (peer, rx) = app
            .start_peer(caller, true, tether_protocol::PeerTransport::WebSocket)
            .await?;
        let (sink, stream) = socket.split();
        let signals = Arc::new(Signals::default());
        let writer = tokio::spawn(write_loop(sink, rx, signals.clone()));
        let heartbeat = Duration::from_secs(app.ctx.config.heartbeat_s.max(1));
        let reader = Reader {
            // The peer actor logs its `peer_id` in this actor's span: the id links them.
            peer_actor: peer.get_id(),
            peer,
            writer,
            signals,
            permits: Arc::new(Semaphore::new(INBOUND_IN_FLIGHT)),
            max: app.ctx.config.max_frame_bytes,
            heartbeat,
            idle_timeout: app.ctx.config.idle_timeout,
            last_inbound: Instant::now(),
        };
        let mut ticks = tokio::time::interval_at(Instant::now() + heartbeat, heartbeat);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Some(Connection {
            stream,
            reader,
            ticks,
            shutdown: app.shutdown.clone(),
            _open: open,
            _permit: permit,
        })
    }

    /// Reads until the client, the writer, the idle timeout or the drain
    /// ends the connection.
    async fn run(mut self) {
        loop {
            let flow = tokio::select! {
                msg = self.stream.next() => self.reader.on_read(msg).await,
                _ = &mut self.reader.writer => ControlFlow::Break(()),
                _ = self.ticks.tick() => self.reader.on_tick().await,
                changed = self.shutdown.changed() => {
                    if changed.is_err() || *self.shutdown.borrow() {
                        Box::pin(self.reader.close(CLOSE_GOING_AWAY, "gateway shutting down")).await;
                        ControlFlow::Break(())
                    } else {
                        ControlFlow::Continue(())
                    }
                }
            };
            if flow.is_break() {
                break;
            }
        }
        // Once, at the end: boxed for the same reason.
        Box::pin(self.reader.finish()).await;
    }
}

/// The reading side of one socket: what it hands the peer, and the
/// writer task it waits for when it closes.
struct Reader {
    peer: ActorRef<PeerMsg>,
    peer_actor: ractor::ActorId,
    writer: JoinHandle<()>,
    /// What it tells the writer besides the outbox.
    signals: Arc<Signals>,
    /// One for each frame the peer holds but has not handled yet.
    permits: Arc<Semaphore>,
    max: usize,
    heartbeat: Duration,
    idle_timeout: Duration,
    last_inbound: Instant,
}

impl Reader {
    /// One read of the socket: its frame handed to the peer, or the end
    /// of the connection.
    #[inline]
    async fn on_read(&mut self, msg: Option<Result<Message, axum::Error>>) -> ControlFlow<()> {
        let Some(msg) = msg else {
            return ControlFlow::Break(());
        };
        self.last_inbound = Instant::now();
        let msg = match msg {
            Ok(m) => m,
            Err(e) => {
                // The cold ends of a connection are boxed: this future lives
                // as long as the connection (see `serve_socket`).
                Box::pin(self.on_read_error(&e)).await;
                return ControlFlow::Break(());
            }
        };
        let max = self.max;
        let inbound = match msg {
            Message::Text(t) if t.len() > max => PeerMsg::TooLarge { len: t.len() },
            Message::Text(t) => {
                let Ok(permit) = self.permits.clone().acquire_owned().await else {
                    return ControlFlow::Break(());
                };
                PeerMsg::Text {
                    text: t.as_str().to_owned(),
                    permit: Some(permit),
                }
            }
            Message::Binary(b) if b.len() > max => PeerMsg::TooLarge { len: b.len() },
            Message::Binary(_) => PeerMsg::Binary,
            Message::Close(frame) => {
                Box::pin(self.on_client_close(frame)).await;
                return ControlFlow::Break(());
            }
            Message::Ping(_) | Message::Pong(_) => return ControlFlow::Continue(()),
        };
        if self.peer.cast(inbound).is_err() {
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    }

    async fn on_read_error(&mut self, e: &axum::Error) {
        debug!(peer_actor = %self.peer_actor, error = %e, "websocket read ended");
        if let Some((code, reason)) = close_code_for(e) {
            // The peer queues the close behind what it already
            // sent; wait for the writer before stopping it.
            self.close(code, reason).await;
        }
    }

    async fn on_client_close(&mut self, frame: Option<CloseFrame>) {
        debug!(peer_actor = %self.peer_actor, code = frame.as_ref().map(|f| f.code), "the client closed");
        // tungstenite queued the echo of this Close when it
        // read it; the writer flushes it (nothing else can
        // be sent after it) and the socket is then dropped.
        self.signals.client_closed();
        self.wait_writer().await;
    }

    /// A heartbeat: the close after `--idle-timeout-s` of silence, a ping
    /// after a heartbeat of it.
    async fn on_tick(&mut self) -> ControlFlow<()> {
        let quiet = self.last_inbound.elapsed();
        if quiet >= self.idle_timeout {
            debug!(quiet_s = quiet.as_secs(), "closing an idle websocket");
            Box::pin(self.close(CLOSE_GOING_AWAY, "idle timeout")).await;
            return ControlFlow::Break(());
        }
        if quiet >= self.heartbeat {
            self.signals.ping();
        }
        ControlFlow::Continue(())
    }

    /// Has the peer queue a close behind what it already sent, and lets
    /// the writer send it all.
    async fn close(&mut self, code: u16, reason: &str) {
        let _ = self.peer.cast(PeerMsg::Close {
            code,
            reason: reason.into(),
        });
        self.wait_writer().await;
    }

    async fn wait_writer(&mut self) {
        let _ = tokio::time::timeout(CLOSE_GRACE, &mut self.writer).await;
    }

    async fn finish(mut self) {
        self.peer.stop(None);
        // A JoinHandle must not be polled again once it returned its output.
        if !self.writer.is_finished()
            && tokio::time::timeout(Duration::from_secs(1), &mut self.writer)
                .await
                .is_err()
        {
            // A client that does not read would keep the writer (and the
            // socket, and the frames it holds) forever.
            self.writer.abort();
        }
    }
}

/// The close code for a read error, or `None` when the connection is gone
/// and nothing can be sent: a frame over 4× the limit is 1009, a text
/// frame that is not UTF-8 1007, and any other breach of RFC 6455's framing
/// (an unmasked client frame, RSV bits without an extension, a reserved
/// opcode, a control frame over 125 bytes or fragmented, a continuation
/// of nothing, a bad Close payload) 1002. axum wraps tungstenite's error;
/// its source is that error.
fn close_code_for(e: &axum::Error) -> Option<(u16, &'static str)> {
    let inner = std::error::Error::source(e)?.downcast_ref::<WsError>()?;
    match inner {
        WsError::Capacity(_) => Some((1009, "frame too large")),
        WsError::Utf8(_) => Some((1007, "invalid UTF-8")),
        // The TCP connection ended without a Close: nobody to tell.
        WsError::Protocol(ProtocolError::ResetWithoutClosingHandshake) => None,
        WsError::Protocol(_) => Some((1002, "protocol error")),
        _ => None,
    }
}

/// What the reader tells the writer besides the outbox: a ping is due, or
/// the client closed. A `Notify` and two flags rather than two channels: a
/// tokio channel allocates its first block of slots when it is made, about
/// 500 bytes for every idle socket (heaptrack), where this is one small
/// allocation. A notification sent while the writer is busy is kept as a
/// permit, so none is lost; several pings asked for meanwhile are one.
#[derive(Default)]
struct Signals {
    wake: Notify,
    ping: AtomicBool,
    client_closed: AtomicBool,
}

impl Signals {
    fn ping(&self) {
        self.ping.store(true, Ordering::Release);
        self.wake.notify_one();
    }

    fn client_closed(&self) {
        self.client_closed.store(true, Ordering::Release);
        self.wake.notify_one();
    }
}

/// Drains the outbox into the socket until a close is written, the client
/// closes, or the socket fails. Each batch the outbox hands over (whatever
/// was ready, up to `WRITE_BATCH_BYTES`) is fed frame by frame into
/// tungstenite's write buffer and flushed once: one `write` per batch
/// while it fits the buffer, however many frames it holds, and each frame
/// stays a text frame of its own (never a JSON array). Nothing waits for a
/// batch to fill: a frame queued into an empty outbox is a batch of one.
///
/// Every way out ends with `sink.close()`: it sends the echo tungstenite
/// queued for a client's Close (a `Close` message sent after that one is
/// refused) and otherwise flushes ours.
async fn write_loop(
    mut sink: futures::stream::SplitSink<WebSocket, Message>,
    mut rx: OutboxReceiver,
    signals: Arc<Signals>,
) {
    let mut batch = Vec::new();
    loop {
        let more = tokio::select! {
            more = rx.recv_batch(&mut batch) => more,
            () = signals.wake.notified() => {
                if signals.client_closed.load(Ordering::Acquire) {
                    // What is still queued cannot follow the client's Close.
                    break;
                }
                if signals.ping.swap(false, Ordering::AcqRel)
                    && sink.send(Message::Ping(bytes::Bytes::new())).await.is_err()
                {
                    break;
                }
                continue;
            }
        };
        if !more {
            break;
        }
        let mut close = None;
        let mut failed = false;
        for item in batch.drain(..) {
            match item {
                Outbound::Frame(bytes) if !failed && close.is_none() => {
                    failed = feed(&mut sink, bytes).await.is_err();
                }
                Outbound::Close { code, reason } if close.is_none() => {
                    close = Some((code, reason));
                }
                // Nothing follows a close (the outbox queues none) or a
                // failed write.
                _ => {}
            }
        }
        if failed || sink.flush().await.is_err() {
            break;
        }
        if let Some((code, reason)) = close {
            let _ = sink
                .send(Message::Close(Some(CloseFrame {
                    code,
                    reason: Utf8Bytes::from(reason),
                })))
                .await;
            break;
        }
    }
    rx.close();
    let _ = sink.close().await;
}

async fn feed(
    sink: &mut futures::stream::SplitSink<WebSocket, Message>,
    bytes: bytes::Bytes,
) -> Result<(), ()> {
    // Frames are built from Strings, so this check never fails; it only
    // re-validates UTF-8 (no copy), the price of sharing one buffer.
    let text = Utf8Bytes::try_from(bytes).map_err(|_| ())?;
    sink.feed(Message::Text(text)).await.map_err(|_| ())
}

/// Broadcasts the drain signal to every socket task.
pub fn shutdown_channel() -> (watch::Sender<bool>, watch::Receiver<bool>) {
    watch::channel(false)
}
