//! The host's two pipes: stdin carries gateway frames in, stdout carries host
//! frames out, one JSON object per line.
//!
//! Each pipe gets a dedicated OS thread doing blocking I/O rather than
//! `tokio::io::{stdin, stdout}`: tokio runs those reads and writes on its
//! blocking pool, and a runtime that shuts down waits for a read that is
//! blocked on a still-open stdin. A host told to `shutdown` must exit even
//! though the gateway keeps its stdin open, and a process exits without
//! joining plain threads.
//!
//! stdout has exactly one owner, the writer thread, fed by a bounded queue of
//! whole lines: frames of concurrent turns can never interleave mid-line, and
//! a gateway that stops reading slows the turns down instead of growing the
//! host's memory.

use std::io::{BufRead, BufWriter, Write};

use tether_protocol::{encode_host_line, FromHost};
use tokio::sync::{mpsc, oneshot};

/// A line read from stdin. The end of stdin is the channel closing.
#[derive(Debug)]
pub enum Input {
    /// One line, without its `\n`.
    Line(String),
    /// A line that is not UTF-8 (answered with an `error` frame).
    NotUtf8,
}

/// Starts the stdin reader thread. At most `capacity` lines wait unread, so
/// a host busy elsewhere pushes back on the gateway rather than buffering.
pub fn spawn_reader(capacity: usize) -> std::io::Result<mpsc::Receiver<Input>> {
    let (tx, rx) = mpsc::channel(capacity);
    std::thread::Builder::new()
        .name("host-stdin".into())
        .spawn(move || read_stdin(&tx))?;
    Ok(rx)
}

fn read_stdin(tx: &mpsc::Sender<Input>) {
    let stdin = std::io::stdin();
    let mut stdin = stdin.lock();
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match stdin.read_until(b'\n', &mut buf) {
            Ok(0) => break,
            Ok(_) => {
                if buf.last() == Some(&b'\n') {
                    buf.pop();
                }
                let input = match String::from_utf8(std::mem::take(&mut buf)) {
                    Ok(line) => Input::Line(line),
                    Err(_) => Input::NotUtf8,
                };
                if tx.blocking_send(input).is_err() {
                    break;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                tracing::warn!(error = %e, "cannot read stdin; treating it as closed");
                break;
            }
        }
    }
    tracing::debug!("stdin closed");
}

/// What the writer thread is asked to do.
enum Out {
    Line(String),
    /// Flush stdout, then answer.
    Flush(oneshot::Sender<()>),
}

/// stdout is gone (the writer thread stopped on a write error).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Closed;

impl std::fmt::Display for Closed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("stdout is closed")
    }
}

impl std::error::Error for Closed {}

/// A handle on the stdout writer; cheap to clone, one per task that writes.
#[derive(Clone)]
pub struct Writer {
    tx: mpsc::Sender<Out>,
}

impl Writer {
    /// Queues one frame (waits while the queue is full).
    pub async fn send(&self, frame: &FromHost) -> Result<(), Closed> {
        self.tx
            .send(Out::Line(encode_host_line(frame)))
            .await
            .map_err(|_| Closed)
    }

    /// Waits until everything queued before this call is written and
    /// flushed to stdout.
    pub async fn flush(&self) -> Result<(), Closed> {
        let (done, flushed) = oneshot::channel();
        self.tx.send(Out::Flush(done)).await.map_err(|_| Closed)?;
        flushed.await.map_err(|_| Closed)
    }

    /// Resolves when stdout is gone.
    pub async fn closed(&self) {
        self.tx.closed().await;
    }
}

/// Starts the stdout writer thread with a queue of `capacity` frames.
pub fn spawn_writer(capacity: usize) -> std::io::Result<Writer> {
    let (tx, rx) = mpsc::channel(capacity);
    std::thread::Builder::new()
        .name("host-stdout".into())
        .spawn(move || {
            if let Err(e) = write_stdout(rx) {
                tracing::warn!(error = %e, "cannot write stdout");
            }
        })?;
    Ok(Writer { tx })
}

/// Writes lines as they come; flushes once the queue is momentarily empty,
/// so a burst of deltas costs one write, and a single frame goes out at once.
fn write_stdout(mut rx: mpsc::Receiver<Out>) -> std::io::Result<()> {
    let stdout = std::io::stdout();
    let mut out = BufWriter::with_capacity(64 * 1024, stdout.lock());
    while let Some(first) = rx.blocking_recv() {
        let mut next = Some(first);
        while let Some(item) = next {
            match item {
                Out::Line(line) => out.write_all(line.as_bytes())?,
                Out::Flush(done) => {
                    out.flush()?;
                    let _ = done.send(());
                }
            }
            next = rx.try_recv().ok();
        }
        out.flush()?;
    }
    out.flush()
}
