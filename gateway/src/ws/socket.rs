//! The socket of one connection and where its writing stands: the batch
//! being written, its text frames straight to the socket ([`super::frames`]),
//! then our Close or a ping through tungstenite; and the read beside it.

use std::pin::Pin;
use std::task::{ready, Context, Poll};

use futures::{Sink, Stream};
use tether_actors::Outbound;
use tracing::debug;
use tungstenite::error::Error as WsError;
use tungstenite::protocol::CloseFrame;
use tungstenite::Message;

use super::frames::RawFrames;
use super::upgrade::WsStream;
use super::Event;

/// The socket and where its writing stands: all that [`Socket::poll`]
/// touches, apart from the rest so the loop can wait on the outbox while
/// the socket is polled.
pub(super) struct Socket {
    pub(super) ws: WsStream,
    /// The batch being written, in order: `frames` text frames, then
    /// perhaps our Close.
    pub(super) pending: Vec<Outbound>,
    pub(super) frames: usize,
    /// How far the text frames of `pending` are written.
    pub(super) raw: RawFrames,
    /// tungstenite holds a control frame the socket has not flushed yet.
    pub(super) unflushed: bool,
    /// A heartbeat ping waits to be written.
    pub(super) ping_due: bool,
    /// Nothing more is read (a read failed, or the peer is gone); only
    /// writing goes on.
    pub(super) read_failed: bool,
}

impl Socket {
    /// The batch ends with our Close: the connection is over once it is
    /// flushed.
    pub(super) fn close_queued(&self) -> bool {
        self.frames < self.pending.len()
    }

    pub(super) fn is_writing(&self) -> bool {
        self.raw.done < self.pending.len() || self.unflushed || self.ping_due
    }

    /// Drives the socket: writes the batch, then reads. Neither direction
    /// waits for the other. tungstenite answers a ping as it reads it; its
    /// pong waits while a text frame of ours is half written ([`super::io`]).
    pub(super) fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Event> {
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
        if !self.read_failed {
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
                let io = self.ws.get_mut();
                let written = self.raw.poll_write(
                    &self.pending[..self.frames],
                    payload,
                    Pin::new(&mut io.inner),
                    cx,
                );
                // tungstenite may write again once our frame is whole.
                io.hold = self.raw.mid_frame();
                ready!(written)?;
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
            } else if self.ping_due && !self.close_queued() {
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
