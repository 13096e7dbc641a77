//! The two tasks that own a host process's pipes, so the actor never waits
//! on them: one drains a bounded queue of lines into its stdin, the other
//! reads its stdout at the host edge (no line over the cap held whole, none
//! nested too deep parsed) and hands frames to the supervisor in batches.

use std::time::Duration;

use ractor::ActorRef;
use tether_protocol::{
    parse_host_line, peek_frame, FromHost, HostFrameError, ToHost, TurnId, HISTORY_MISMATCH,
};
use tokio::io::{AsyncWriteExt, BufReader, BufWriter};
use tokio::process::{ChildStdin, ChildStdout};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::{debug, warn};

use super::line::{read_line_bounded, Line};
use super::{masked::masked, HostMsg, Incoming, Refusal};
use crate::host_supervisor::HostSupervisorMsg;
use crate::sparse_log::SparseLog;

/// Writes queued lines to the host's stdin; flushes whenever the queue is
/// momentarily empty, so a burst costs one write.
pub(super) async fn write_lines(
    stdin: ChildStdin,
    mut rx: mpsc::Receiver<String>,
    slot: u32,
    pid: u32,
) {
    let mut out = BufWriter::new(stdin);
    while let Some(first) = rx.recv().await {
        let mut next = Some(first);
        while let Some(line) = next {
            if let Err(e) = out.write_all(line.as_bytes()).await {
                debug!(host_id = slot, pid, error = %e, "cannot write to the host's stdin");
                return;
            }
            next = rx.try_recv().ok();
        }
        if let Err(e) = out.flush().await {
            debug!(host_id = slot, pid, error = %e, "cannot write to the host's stdin");
            return;
        }
    }
}

/// What the stdout reader needs.
pub(super) struct Reader {
    pub(super) slot: u32,
    pub(super) incarnation: u64,
    pub(super) pid: u32,
    pub(super) supervisor: ActorRef<HostSupervisorMsg>,
    pub(super) host: ActorRef<HostMsg>,
    pub(super) stdin: mpsc::Sender<String>,
    pub(super) hello_timeout: Duration,
    /// No line at all for this long (three heartbeats) is death.
    pub(super) silence_limit: Duration,
    /// The host line cap.
    pub(super) max_line: usize,
    /// Bad lines so far, to keep a babbling host from flooding the log.
    pub(super) bad_lines: SparseLog,
}

pub(super) async fn read_frames(stdout: ChildStdout, r: Reader) {
    let why = read_until_dead(stdout, &r).await;
    let _ = r.host.cast(HostMsg::ReaderDone(why));
}

/// Most frames handed to the supervisor in one message.
const MAX_BATCH: usize = 256;

/// Reads and forwards frames until the host is dead; returns why it is.
///
/// Frames go to the supervisor in batches: all the complete lines one read
/// of the pipe brought, in one message, so a busy host costs an actor
/// message per read rather than per line. A batch is sent before the reader
/// waits for more input, so no frame is ever held back waiting.
async fn read_until_dead(stdout: ChildStdout, r: &Reader) -> String {
    let mut input = BufReader::with_capacity(64 * 1024, stdout);
    let mut buf = Vec::new();
    let mut batch = Vec::new();
    let hello_deadline = Instant::now() + r.hello_timeout;
    let mut said_hello = false;
    loop {
        let line_buffered = input.buffer().contains(&b'\n');
        if !batch.is_empty()
            && (!line_buffered || batch.len() >= MAX_BATCH)
            && !r.forward(&mut batch)
        {
            return "the host supervisor stopped".into();
        }
        let deadline = if said_hello {
            Instant::now() + r.silence_limit
        } else {
            hello_deadline
        };
        let read = read_line_bounded(&mut input, &mut buf, r.max_line);
        let line = match tokio::time::timeout_at(deadline, read).await {
            Err(_) if said_hello => {
                return format!(
                    "no frame for {} s (three missed heartbeats)",
                    r.silence_limit.as_secs()
                )
            }
            Err(_) => {
                return format!("no hello within {} ms", r.hello_timeout.as_millis());
            }
            Ok(Err(e)) => return format!("cannot read its stdout: {e}"),
            Ok(Ok(line)) => line,
        };
        let text = match line {
            Line::Eof => return "its stdout closed".into(),
            Line::TooLong { bytes } => {
                let why = Refusal::TooLong {
                    bytes,
                    cap: r.max_line,
                };
                if let Some(refused) = r.refuse_line(&buf, why) {
                    batch.push(refused);
                }
                continue;
            }
            Line::Full => match std::str::from_utf8(&buf) {
                Ok(text) => text,
                Err(_) => {
                    r.reject("the line is not UTF-8".into());
                    continue;
                }
            },
        };
        if text.trim().is_empty() {
            continue;
        }
        let frame = match parse_host_line::<FromHost>(text) {
            Ok(frame) => masked(frame),
            Err(HostFrameError::TooDeep(limit)) => {
                if let Some(refused) = r.refuse_line(text.as_bytes(), Refusal::TooDeep { limit }) {
                    batch.push(refused);
                }
                continue;
            }
            Err(e) => {
                r.reject(e.to_string());
                continue;
            }
        };
        match &frame {
            FromHost::Hello {
                history_cache_bytes,
                ..
            } if !said_hello => {
                said_hello = true;
                let bytes = history_cache_bytes.unwrap_or(0);
                if r.host.cast(HostMsg::KeepsHistories(bytes)).is_err() {
                    return "the host actor stopped".into();
                }
            }
            FromHost::TurnError { reason, .. } if reason == HISTORY_MISMATCH => {
                // The turn's error reaches the supervisor before the news
                // that the host is being replaced, so the turn ends with
                // it rather than as a crash.
                batch.push(Incoming::Frame(frame));
                if !r.forward(&mut batch) {
                    return "the host supervisor stopped".into();
                }
                let _ = r.host.cast(HostMsg::HistoryLost);
                continue;
            }
            _ => {}
        }
        batch.push(Incoming::Frame(frame));
    }
}

impl Reader {
    /// Hands `batch` to the supervisor; false when it is gone.
    fn forward(&self, batch: &mut Vec<Incoming>) -> bool {
        self.supervisor
            .cast(HostSupervisorMsg::Frames {
                slot: self.slot,
                incarnation: self.incarnation,
                pid: self.pid,
                frames: std::mem::take(batch),
            })
            .is_ok()
    }

    /// Answers a line that is not a frame with an `error` frame (PROTOCOL
    /// Part 2) and otherwise ignores it.
    fn reject(&self, message: String) {
        // Every one is answered; few are logged (see `SparseLog`).
        if let Some(n) = self.bad_lines.hit() {
            warn!(host_id = self.slot, pid = self.pid, bad_lines = n, error = %message, "bad line from host");
        }
        let _ = self.stdin.try_send(ToHost::Error { message }.to_line());
    }

    /// A line refused whole (`why`), of which `prefix` was kept (all of
    /// it, for a line under the cap): answered like any bad line, and
    /// reported to the supervisor when its first bytes tell which turn or
    /// control request it belonged to.
    fn refuse_line(&self, prefix: &[u8], why: Refusal) -> Option<Incoming> {
        let peek = peek_frame(prefix);
        let message = why.answer();
        if let Some(n) = self.bad_lines.hit() {
            warn!(
                host_id = self.slot,
                pid = self.pid,
                bad_lines = n,
                error = %message,
                turn_id = peek.turn_id.as_deref(),
                request_id = peek.request_id.as_deref(),
                kind = peek.kind.as_deref(),
                "host line refused"
            );
        }
        let _ = self.stdin.try_send(ToHost::Error { message }.to_line());
        if peek.turn_id.is_none() && peek.request_id.is_none() {
            return None;
        }
        Some(Incoming::Refused {
            turn_id: peek.turn_id.map(TurnId::from),
            request_id: peek.request_id,
            why,
        })
    }
}
