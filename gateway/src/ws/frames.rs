//! Writing a batch of text frames straight to the socket.
//!
//! A frame from a session is one `Bytes` shared by every peer that gets it.
//! Handed to tungstenite, each peer's socket would copy it into a write
//! buffer of its own, and keep that buffer, at the size of the largest
//! batch it ever wrote, for the connection's life. A server's frame is
//! never masked (RFC 6455 §5.1), so its bytes are the same for every
//! peer: the header is two to ten bytes computed from the length, and the
//! payload is the shared frame. [`RawFrames`] writes a run of them with one
//! vectored write, header and payload slices side by side, and keeps
//! nothing once the batch is written.
//!
//! Only text frames go this way. Control frames (pings, pongs, closes) stay
//! tungstenite's, which keeps the state of the closing handshake; the
//! caller flushes tungstenite before a run and holds its writes while a
//! frame of a run is half written ([`super::io`]).

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::AsyncWrite;

/// Frames gathered into one vectored write: two slices each, well under
/// Linux's `IOV_MAX` of 1024. A larger run takes more than one write.
const FRAMES_PER_WRITE: usize = 64;

/// The longest header of an unmasked frame: opcode byte, length byte,
/// 64-bit extended length.
const MAX_HEADER: usize = 10;

/// FIN set, opcode 1 (text).
const FIN_TEXT: u8 = 0x81;

/// The header of an unmasked, unfragmented text frame of `len` bytes
/// (RFC 6455 §5.2), written to the front of `out`; returns its length.
pub fn text_header(len: usize, out: &mut [u8; MAX_HEADER]) -> usize {
    out[0] = FIN_TEXT;
    if len < 126 {
        // Checked just above.
        out[1] = len as u8;
        2
    } else if let Ok(short) = u16::try_from(len) {
        out[1] = 126;
        out[2..4].copy_from_slice(&short.to_be_bytes());
        4
    } else {
        out[1] = 127;
        out[2..10].copy_from_slice(&(len as u64).to_be_bytes());
        10
    }
}

/// The length of [`text_header`] for a payload of `len` bytes.
pub fn header_len(len: usize) -> usize {
    text_header(len, &mut [0; MAX_HEADER])
}

/// Where the writing of a run of frames stands: how many whole frames are
/// written and how far into the next one (its header and payload counted
/// together).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RawFrames {
    pub done: usize,
    pub offset: usize,
}

impl RawFrames {
    /// Whether a frame is half written: nothing else may reach the socket
    /// until it is whole.
    pub fn mid_frame(&self) -> bool {
        self.offset != 0
    }

    /// Writes the payloads of `frames[self.done..]` to `io`, as many
    /// vectored writes as it takes; ready once all of them are written.
    /// Progress is kept across `Pending`, so the call is simply repeated
    /// with the same frames.
    pub fn poll_write<T, W: AsyncWrite + Unpin>(
        &mut self,
        frames: &[T],
        payload: impl Fn(&T) -> &[u8],
        mut io: Pin<&mut W>,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<()>> {
        while self.done < frames.len() {
            let run = &frames[self.done..frames.len().min(self.done + FRAMES_PER_WRITE)];
            let mut headers = [[0u8; MAX_HEADER]; FRAMES_PER_WRITE];
            let mut lens = [0usize; FRAMES_PER_WRITE];
            for (i, frame) in run.iter().enumerate() {
                lens[i] = text_header(payload(frame).len(), &mut headers[i]);
            }
            let mut slices = [IoSlice::new(&[]); 2 * FRAMES_PER_WRITE];
            let mut used = 0;
            let mut skip = self.offset;
            for (i, frame) in run.iter().enumerate() {
                for part in [&headers[i][..lens[i]], payload(frame)] {
                    if skip >= part.len() {
                        skip -= part.len();
                        continue;
                    }
                    slices[used] = IoSlice::new(&part[skip..]);
                    skip = 0;
                    used += 1;
                }
            }
            let n = ready!(io.as_mut().poll_write_vectored(cx, &slices[..used]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.advance(frames.iter().map(|f| payload(f).len()), n);
        }
        Poll::Ready(Ok(()))
    }

    /// Counts `n` more bytes written, given the payload length of every
    /// frame of the run.
    fn advance(&mut self, lens: impl Iterator<Item = usize>, mut n: usize) {
        let mut lens = lens.skip(self.done);
        while n > 0 {
            let Some(len) = lens.next() else {
                return;
            };
            let left = header_len(len) + len - self.offset;
            if n < left {
                self.offset += n;
                return;
            }
            n -= left;
            self.done += 1;
            self.offset = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use std::sync::{Arc, Mutex};

    /// A socket that takes at most `chunk` bytes a write and answers
    /// `Pending` every other call, as a slow client's would.
    struct Trickle {
        out: Arc<Mutex<Vec<u8>>>,
        chunk: usize,
        calls: usize,
    }

    impl AsyncWrite for Trickle {
        fn poll_write(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            self.poll_write_vectored(cx, &[IoSlice::new(buf)])
        }

        fn poll_write_vectored(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            bufs: &[IoSlice<'_>],
        ) -> Poll<io::Result<usize>> {
            self.calls += 1;
            if self.calls.is_multiple_of(2) {
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            let mut left = self.chunk;
            let mut out = self.out.lock().unwrap();
            for b in bufs {
                let take = b.len().min(left);
                out.extend_from_slice(&b[..take]);
                left -= take;
                if left == 0 {
                    break;
                }
            }
            Poll::Ready(Ok(self.chunk - left))
        }

        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    /// Reads the frames back with tungstenite's own parser, as a client
    /// would.
    fn parse(bytes: Vec<u8>) -> Vec<String> {
        let mut socket =
            tungstenite::protocol::frame::FrameSocket::new(std::io::Cursor::new(bytes));
        let mut texts = Vec::new();
        while let Some(frame) = socket.read(None).expect("a well-formed frame") {
            assert!(frame.header().is_final);
            assert_eq!(
                frame.header().opcode,
                tungstenite::protocol::frame::coding::OpCode::Data(
                    tungstenite::protocol::frame::coding::Data::Text
                )
            );
            assert!(frame.header().mask.is_none(), "a server never masks");
            texts.push(String::from_utf8(frame.into_payload().to_vec()).unwrap());
        }
        texts
    }

    fn write_all(frames: &[Bytes], chunk: usize) -> Vec<u8> {
        let out = Arc::new(Mutex::new(Vec::new()));
        let mut io = Trickle {
            out: out.clone(),
            chunk,
            calls: 0,
        };
        let mut raw = RawFrames::default();
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        let mut polls = 0;
        while raw
            .poll_write(frames, |f| &f[..], Pin::new(&mut io), &mut cx)
            .is_pending()
        {
            polls += 1;
            assert!(polls < 1_000_000, "no progress");
        }
        assert_eq!(raw.done, frames.len());
        assert!(!raw.mid_frame());
        let bytes = out.lock().unwrap().clone();
        bytes
    }

    #[test]
    fn headers_cover_every_length_class() {
        let mut h = [0u8; MAX_HEADER];
        for (len, expect) in [
            (0, vec![0x81, 0]),
            (125, vec![0x81, 125]),
            (126, vec![0x81, 126, 0, 126]),
            (65_535, vec![0x81, 126, 0xff, 0xff]),
            (65_536, vec![0x81, 127, 0, 0, 0, 0, 0, 1, 0, 0]),
        ] {
            let n = text_header(len, &mut h);
            assert_eq!(&h[..n], &expect[..], "length {len}");
            assert_eq!(header_len(len), n, "length {len}");
        }
    }

    #[test]
    fn a_batch_written_in_any_chunks_reads_back_frame_for_frame() {
        // Lengths on both sides of each header boundary, and more frames
        // than one vectored write takes.
        let mut texts: Vec<String> = [0, 1, 125, 126, 127, 65_535, 65_536, 70_000]
            .iter()
            .map(|&n| "x".repeat(n))
            .collect();
        texts.extend((0..150).map(|i| format!("{{\"seq\":{i},\"text\":\"é\"}}")));
        let frames: Vec<Bytes> = texts.iter().map(|t| Bytes::from(t.clone())).collect();
        for chunk in [1, 3, 10, 4096, 1 << 20] {
            assert_eq!(parse(write_all(&frames, chunk)), texts, "chunk {chunk}");
        }
    }

    #[test]
    fn progress_is_kept_mid_frame() {
        // Two frames of 5 bytes: 7 bytes each with their headers.
        let lens = || [5usize, 5].into_iter();
        let mut raw = RawFrames::default();
        raw.advance(lens(), 3);
        assert_eq!(raw, RawFrames { done: 0, offset: 3 });
        assert!(raw.mid_frame());
        raw.advance(lens(), 4);
        assert_eq!(raw, RawFrames { done: 1, offset: 0 });
        assert!(!raw.mid_frame());
        raw.advance(lens(), 7);
        assert_eq!(raw, RawFrames { done: 2, offset: 0 });
    }
}
