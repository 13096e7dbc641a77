//! `tether serve --stdio`: one peer over stdin/stdout, one JSON-RPC
//! message per line. stdout carries only the protocol; logs go to stderr.

use std::sync::Arc;

use tether_actors::{Identity, Outbound, PeerMsg};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{watch, Semaphore};

/// Why `--stdio` could not serve.
#[derive(Debug, thiserror::Error)]
pub enum StdioError {
    /// The peer actor that speaks for stdin/stdout could not be started.
    #[error(transparent)]
    Peer(#[from] ractor::SpawnErr),
}

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
    };
    let (peer, mut rx) = tether_actors::spawn_peer(ctx, identity).await?;
    // One `write` per batch: every frame that was ready, one per line,
    // copied into one buffer (tokio's stdout hands each write to a
    // blocking thread, so fewer writes is fewer hops too).
    let writer = tokio::spawn(async move {
        let mut out = tokio::io::stdout();
        let mut batch = Vec::new();
        let mut buf = Vec::new();
        'write: while rx.recv_batch(&mut batch).await {
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
            if out.write_all(&buf).await.is_err() || out.flush().await.is_err() {
                break 'write;
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
    });
    let permits = Arc::new(Semaphore::new(32));
    let max = ctx.config.max_frame_bytes;
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
            // Never closed: this function owns the semaphore.
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
    // Let the answers to the last requests go out before stopping.
    let _ = permits.acquire_many(32).await;
    peer.stop(None);
    let _ = tokio::time::timeout(std::time::Duration::from_secs(2), writer).await;
    Ok(())
}
