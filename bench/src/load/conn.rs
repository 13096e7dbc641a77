//! One generator connection to any of the three servers, and what it reads.
//!
//! Frames are read without a full JSON parse where it matters (every
//! delivered event): at 200k deliveries a second on one core the generator
//! must not be the bottleneck. Each target's module says what its frames
//! look like; this file only holds the shapes they are read into.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use futures::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;

use super::{socketio, tether, TargetKind};
use crate::harness::Ws;

/// Read buffer of a generator connection; frames are a few hundred bytes,
/// and tungstenite zeroes the whole buffer before each read (see
/// bench/storm.rs), so a small one is cheaper.
const READ_BUFFER: usize = 8 * 1024;

/// Longest wait for a request's answer; only bounds a stall.
pub const STALL: Duration = Duration::from_secs(60);

/// A published event as a client received it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flood {
    /// Position in its room's schedule, from 0.
    pub n: u64,
    /// When it was meant to be sent, unix microseconds.
    pub t_us: u64,
}

/// An event frame.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Event {
    /// tether's durable `seq`.
    pub seq: Option<u64>,
    /// The benchmark payload, when the event is one.
    pub flood: Option<Flood>,
    /// Socket.IO's recovery offset (the packet's last argument).
    pub offset: Option<String>,
    /// Turn shape: a durable event (tether: it has a `seq`; the baselines:
    /// any of a turn's five non-delta messages).
    pub durable: bool,
    /// Turn shape: the deltas this frame carries (a merged tether delta
    /// carries several: one per word, each word ending with a space).
    pub pieces: u32,
    /// Turn shape: the turn's `message.complete`.
    pub complete: bool,
}

/// Turn shape: the deltas in a delta frame's text, one per word (every
/// word of a benchmark turn ends with a space, and nothing else in a
/// compact frame holds one).
pub fn spaces(text: &str) -> u32 {
    u32::try_from(text.bytes().filter(|&b| b == b' ').count()).unwrap_or(u32::MAX)
}

/// What one read gave.
#[derive(Debug)]
pub enum Frame {
    Event(Event),
    /// Anything else (a reply, a handshake packet), for the caller to read.
    Text(String),
}

/// A WebSocket to one of the servers.
pub struct Conn {
    kind: TargetKind,
    ws: Ws,
}

impl Conn {
    /// Opens the WebSocket (Nagle off, like the servers) without reading
    /// anything: each target's handshake is its module's business.
    pub async fn open(kind: TargetKind, url: &str) -> anyhow::Result<Conn> {
        let config = WebSocketConfig::default().read_buffer_size(READ_BUFFER);
        let (ws, _) = tokio::time::timeout(
            STALL,
            tokio_tungstenite::connect_async_with_config(url, Some(config), true),
        )
        .await
        .context("connect stalled")??;
        Ok(Conn { kind, ws })
    }

    pub async fn send(&mut self, text: String) -> anyhow::Result<()> {
        self.ws.send(Message::Text(text.into())).await?;
        Ok(())
    }

    /// Queues a frame without flushing (a publisher's burst).
    pub async fn feed(&mut self, text: String) -> anyhow::Result<()> {
        self.ws.feed(Message::Text(text.into())).await?;
        Ok(())
    }

    pub async fn flush(&mut self) -> anyhow::Result<()> {
        self.ws.flush().await?;
        Ok(())
    }

    /// The next frame; `Err` when the connection closed. Socket.IO's
    /// heartbeat (`2`) is answered here (`3`) and not returned.
    pub async fn next(&mut self) -> anyhow::Result<Frame> {
        loop {
            let msg = self.ws.next().await.context("connection closed")??;
            let text = match msg {
                Message::Text(t) => t,
                Message::Close(c) => anyhow::bail!("closed by the server: {c:?}"),
                _ => continue,
            };
            let frame = match self.kind {
                TargetKind::Tether => tether::parse(&text),
                TargetKind::Limit => super::limit::parse(&text),
                TargetKind::Socketio => {
                    if text.as_str() == socketio::PING {
                        self.send(socketio::PONG.into()).await?;
                        continue;
                    }
                    socketio::parse(&text)
                }
            };
            return Ok(frame.unwrap_or_else(|| Frame::Text(text.as_str().to_owned())));
        }
    }

    /// Reads until a non-event frame for which `want` returns a value,
    /// handing every event to `on_event`; bounded by [`STALL`].
    pub async fn until<T>(
        &mut self,
        on_event: &mut impl FnMut(Event),
        mut want: impl FnMut(&str) -> Option<anyhow::Result<T>>,
    ) -> anyhow::Result<T> {
        let read = async {
            loop {
                match self.next().await? {
                    Frame::Event(e) => on_event(e),
                    Frame::Text(t) => {
                        if let Some(r) = want(&t) {
                            return r;
                        }
                    }
                }
            }
        };
        tokio::time::timeout(STALL, read)
            .await
            .context("no answer from the server")?
    }
}

/// Now, in unix microseconds (the clock publishers stamp with).
pub fn unix_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// The unsigned integer that follows `key` (e.g. `"seq":`) in `text`.
pub fn number_after(text: &str, key: &str) -> Option<u64> {
    let at = text.find(key)? + key.len();
    let rest = &text[at..];
    let end = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    rest[..end].parse().ok()
}

/// The benchmark payload's `n` and `t_us`, wherever they sit in `text`.
pub fn flood_in(text: &str) -> Option<Flood> {
    Some(Flood {
        n: number_after(text, "\"n\":")?,
        t_us: number_after(text, "\"t_us\":")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_read_after_their_key() {
        let text = r#"{"seq":42,"payload":{"args":{"n":7,"pad":"xx","t_us":1700000000000001}}}"#;
        assert_eq!(number_after(text, "\"seq\":"), Some(42));
        assert_eq!(
            flood_in(text),
            Some(Flood {
                n: 7,
                t_us: 1_700_000_000_000_001
            })
        );
        assert_eq!(number_after(text, "\"nope\":"), None);
    }
}
