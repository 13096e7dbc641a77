//! The socket as tungstenite sees it: its writes wait while a text frame of
//! ours is half written.
//!
//! Text frames go to the socket beside tungstenite ([`super::frames`]), and
//! tungstenite writes on its own while it reads: it answers a ping with a
//! pong, a Close with its echo. Were those bytes to land inside one of our
//! frames, the client would read garbage. While [`GuardedIo::hold`] is set
//! every write of tungstenite's is refused as "would block", which it takes
//! as "try again later" and keeps the frame queued; reading goes on. The
//! connection clears `hold` at the next frame boundary and flushes
//! tungstenite before writing anything else.
//!
//! Refusing without registering a waker is safe only because `hold` is set
//! while our own write of the same socket is pending, and that write has
//! registered the task for the socket's writability: when it wakes, the
//! frame is finished and tungstenite flushed in the same poll.

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll};

use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

pub struct GuardedIo {
    /// The upgraded connection; the text frames' writes go to it directly.
    pub inner: TokioIo<Upgraded>,
    /// A text frame of ours is half written: tungstenite may not write.
    pub hold: bool,
}

impl GuardedIo {
    pub fn new(inner: TokioIo<Upgraded>) -> Self {
        Self { inner, hold: false }
    }
}

impl AsyncRead for GuardedIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for GuardedIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.hold {
            return Poll::Pending;
        }
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if self.hold {
            return Poll::Pending;
        }
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.hold {
            return Poll::Pending;
        }
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
