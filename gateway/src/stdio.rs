//! `tether serve --stdio`: one peer over stdin/stdout, one JSON-RPC
//! message per line. stdout carries only the protocol; logs go to stderr.

use std::sync::Arc;

use ractor::ActorRef;
use tether_actors::{Identity, Outbound, OutboxReceiver, PeerMsg};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{watch, Semaphore};

/// Why `--stdio` could not serve.
#[derive(Debug, thiserror::Error)]
pub enum StdioError {
    /// The peer actor that speaks for stdin/stdout could not be started.
    #[error(transparent)]
    Peer(#[from] ractor::SpawnErr),
}

/// Frames the peer may have queued but not yet handled.
const IN_FLIGHT: u32 = 32;

/// Serves until stdin closes or `drain` turns true.
pub async fn serve_stdio(
    ctx: &tether_actors::Ctx,
    mut drain: watch::Receiver<bool>,
) -> Result<(), StdioError> {
    let identity = Identity {
        profile: "default".into(),
        fixed: false,
        can_attach: true,
        transport: tether_protocol::PeerTransport::Stdio,
        limits: None,
    };
    let (peer, rx) = tether_actors::spawn_peer(ctx, identity).await?;
    let writer = tokio::spawn(write_lines(rx));
    let permits = Arc::new(Semaphore::new(IN_FLIGHT as usize));
    read_lines(&peer, &mut drain, &permits, ctx.config.max_frame_bytes).await;
    // Let the answers to the last requests go out before stopping.
    let _ = permits.acquire_many(IN_FLIGHT).await;
    peer.stop(None);
    let _ = tokio::time::timeout(std::time::Duration::from_secs(2), writer).await;
    Ok(())
}

/// Hands each line of stdin to the peer until stdin closes, `drain`
/// turns true or the peer is gone.
async fn read_lines(
    peer: &ActorRef<PeerMsg>,
    drain: &mut watch::Receiver<bool>,
    permits: &Arc<Semaphore>,
    max: usize,
) {
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    loop {
        let next = tokio::select! {
            next = lines.next_line() => next,
            _ = drain.wait_for(|d| *d) => break,
        };
        let line = match next {
            Ok(Some(line)) => line,
            Ok(None) => break,
            // A line that is not UTF-8: answer a parse error and go on.
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                let _ = peer.cast(PeerMsg::Binary);
                continue;
            }
            Err(_) => break,
        };
        if line.trim().is_empty() {
            continue;
        }
        let msg = if line.len() > max {
            PeerMsg::TooLarge { len: line.len() }
        } else {
            // Never closed: `serve_stdio` owns the semaphore.
            let Ok(permit) = permits.clone().acquire_owned().await else {
                break;
            };
            PeerMsg::Text {
                text: line,
                permit: Some(permit),
            }
        };
        if peer.cast(msg).is_err() {
            break;
        }
    }
}

/// Writes the peer's frames to stdout, one per line, until it closes.
///
/// One `write` per batch: every frame that was ready, one per line,
/// copied into one buffer (tokio's stdout hands each write to a
/// blocking thread, so fewer writes is fewer hops too).
async fn write_lines(mut rx: OutboxReceiver) {
    let mut out = tokio::io::stdout();
    let mut batch = Vec::new();
    let mut buf = Vec::new();
    while rx.recv_batch(&mut batch).await {
        let closing = lines_of(&mut batch, &mut buf);
        if out.write_all(&buf).await.is_err() || out.flush().await.is_err() {
            break;
        }
        buf.clear();
        // One huge frame (a `/big` reply) must not stay resident.
        if buf.capacity() > 1 << 20 {
            buf = Vec::new();
        }
        if closing {
            break;
        }
    }
    let _ = out.flush().await;
    rx.close();
}

/// Appends each frame of the batch to `buf` as a line, up to a close;
/// whether there was one (nothing is written after it).
#[inline]
fn lines_of(batch: &mut Vec<Outbound>, buf: &mut Vec<u8>) -> bool {
    let mut closing = false;
    for item in batch.drain(..) {
        match item {
            Outbound::Frame(bytes) if !closing => {
                buf.extend_from_slice(&bytes);
                buf.push(b'\n');
            }
            _ => closing = true,
        }
    }
    closing
}
