//! `tether attach SESSION`: a terminal face of a session.
//!
//! It prints the transcript, then everything that happens live, and turns
//! each line of stdin into a prompt, so it works both as an interactive chat
//! and through a pipe (`printf 'a\nb\n' | tether attach ID` runs both turns
//! and exits once they are done).
//!
//! A dropped connection is not the end: attach reconnects by itself with
//! its watermark (`session.resume` `last_seen`), backing off from 100 ms to
//! 5 s, and [`View`] keeps the screen free of duplicates. Lines typed while
//! disconnected are sent after the reconnect. One thing cannot be known: a
//! prompt whose answer was lost with the connection may or may not have
//! been accepted, so attach says so instead of guessing (resending could run
//! it twice).

use std::collections::{HashMap, VecDeque};
use std::io::{BufRead, IsTerminal};
use std::time::Duration;

use clap::Args;
use serde_json::json;
use tether_protocol::{codes, ResumeResult, SubmitResult};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::conn::{ClientError, Conn, Event, Incoming, Reply};
use super::presence::Me;
use super::view::{bracket, clip, styled, View};
use super::{exit, Target, EXIT_HELP};

const BACKOFF_FIRST: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// A second Ctrl-C within this window quits.
const QUIT_WINDOW: Duration = Duration::from_secs(2);
/// How long one reconnect attempt (connect + resume) may take.
const ATTEMPT_WAIT: Duration = Duration::from_secs(10);

#[derive(Debug, Args)]
#[command(after_help = EXIT_HELP)]
pub struct AttachArgs {
    #[command(flatten)]
    pub target: Target,
    /// The session to follow.
    pub session: String,
}

/// What an outstanding request of ours was.
enum Pending {
    Submit,
    Interrupt,
}

struct Attach {
    target: Target,
    session: String,
    view: View,
    /// `None` while disconnected.
    conn: Option<Conn>,
    /// The store's epoch our watermark belongs to.
    epoch: String,
    pending: HashMap<u64, Pending>,
    /// Lines read while disconnected, sent after the reconnect.
    unsent: VecDeque<String>,
    stdin_open: bool,
    last_sigint: Option<Instant>,
    backoff: Duration,
    retry_at: Instant,
    /// Who we say we are on every connection (`presence.rs`).
    me: Me,
}

pub async fn run(args: AttachArgs) -> Result<u8, ClientError> {
    let mut lines = stdin_lines();
    let mut conn = Conn::open(&args.target).await?;
    let mut me = Me::new();
    me.hello(&mut conn).await?;
    let first: ResumeResult = conn
        .call("session.resume", json!({"session_id": args.session}))
        .await?;
    // From here on Ctrl-C is ours (interrupt, then quit); before, its
    // default quits a connect that hangs.
    let mut sigint = signal(SignalKind::interrupt()).map_err(ClientError::io("signal"))?;
    let mut a = Attach {
        view: View::new(&args.session),
        epoch: conn.epoch.clone(),
        conn: Some(conn),
        target: args.target,
        session: args.session,
        pending: HashMap::new(),
        unsent: VecDeque::new(),
        stdin_open: true,
        last_sigint: None,
        backoff: BACKOFF_FIRST,
        retry_at: Instant::now(),
        me,
    };
    a.view.history(&first).map_err(ClientError::io("stdout"))?;
    // After the history, so that it is the line just above the prompt; on
    // stderr, so that `attach ID > log` keeps a clean transcript.
    eprintln!(
        "{}",
        banner(&first, styled(std::io::stderr().is_terminal()))
    );
    a.view.running(&first).map_err(ClientError::io("stdout"))?;
    loop {
        if a.view.closed {
            return Ok(exit::OK);
        }
        if a.done() {
            a.view.finish().map_err(ClientError::io("stdout"))?;
            return Ok(exit::OK);
        }
        tokio::select! {
            frame = next_frame(&mut a.conn) => match frame {
                Ok(Incoming::Event(e)) => match a.me.lines(&e, styled(std::io::stderr().is_terminal())) {
                    // On stderr, like every line that is not the transcript.
                    Some(lines) => lines.iter().for_each(|l| eprintln!("{l}")),
                    None => a.view.event(&e).map_err(ClientError::io("stdout"))?,
                },
                Ok(Incoming::Reply(r)) => a.reply(r),
                Err(ClientError::Lost(why)) => a.lost(&why),
                Err(e) => return Err(e),
            },
            line = lines.recv(), if a.stdin_open => match line {
                Some(line) => a.submit(line).await,
                None => a.stdin_open = false,
            },
            _ = sigint.recv() => {
                if a.sigint().await {
                    a.view.finish().map_err(ClientError::io("stdout"))?;
                    return Ok(exit::SIGINT);
                }
            }
            _ = tokio::time::sleep_until(a.retry_at), if a.conn.is_none() => a.reconnect().await?,
        }
    }
}

/// The line `attach` starts with: what it is attached to, and how to use
/// it (a first-time user has nothing else to go by).
fn banner(r: &ResumeResult, styled: bool) -> String {
    let s = &r.session;
    let title = if s.title.is_empty() {
        "(untitled)".to_string()
    } else {
        format!("{:?}", clip(&s.title, 60))
    };
    let text = format!(
        "attached to {} {title} ({}, seq {}): type a prompt and press Enter to send it; \
         Ctrl-C interrupts the running turn, or quits when none runs",
        s.session_id,
        s.status.as_str(),
        r.latest_seq
    );
    bracket(&text, styled)
}

/// "1 missed event", "3 missed events".
fn missed_events(n: usize) -> String {
    if n == 1 {
        "1 missed event".to_string()
    } else {
        format!("{n} missed events")
    }
}

/// The next frame of the connection, or never while there is none.
async fn next_frame(conn: &mut Option<Conn>) -> Result<Incoming, ClientError> {
    match conn {
        Some(c) => c.next().await,
        None => std::future::pending().await,
    }
}

impl Attach {
    /// Stdin has ended and nothing of ours is still in flight or running.
    fn done(&self) -> bool {
        !self.stdin_open
            && self.unsent.is_empty()
            && !self.pending.values().any(|p| matches!(p, Pending::Submit))
            && self.view.idle()
    }

    async fn submit(&mut self, line: String) {
        if line.trim().is_empty() {
            return;
        }
        let Some(conn) = &mut self.conn else {
            self.unsent.push_back(line);
            return;
        };
        let params = json!({"session_id": self.session, "text": line});
        match conn.request("prompt.submit", params).await {
            Ok(id) => {
                self.pending.insert(id, Pending::Submit);
            }
            Err(ClientError::Lost(why)) => {
                // Not sent: it goes out after the reconnect.
                self.unsent.push_back(line);
                self.lost(&why);
            }
            Err(e) => eprintln!("[prompt not sent: {e}]"),
        }
    }

    fn reply(&mut self, r: Reply) {
        match (self.pending.remove(&r.id), r.outcome) {
            (Some(Pending::Submit), Ok(v)) => match serde_json::from_value::<SubmitResult>(v) {
                Ok(accepted) => self.view.accepted(accepted.turn_id.as_str()),
                Err(e) => eprintln!("[unexpected prompt.submit answer: {e}]"),
            },
            (Some(Pending::Submit), Err(e)) => eprintln!("[prompt refused: {e}]"),
            (Some(Pending::Interrupt), Err(e)) => eprintln!("[interrupt refused: {e}]"),
            _ => {}
        }
    }

    /// Whether to quit: a Ctrl-C with no turn running (or while
    /// disconnected) quits, one during a turn interrupts it, and a second
    /// one within [`QUIT_WINDOW`] quits.
    async fn sigint(&mut self) -> bool {
        let now = Instant::now();
        let again = self
            .last_sigint
            .is_some_and(|t| now.duration_since(t) < QUIT_WINDOW);
        let Some(conn) = &mut self.conn else {
            return true;
        };
        if self.view.idle() || again {
            return true;
        }
        self.last_sigint = Some(now);
        match conn
            .request("session.interrupt", json!({"session_id": self.session}))
            .await
        {
            Ok(id) => {
                self.pending.insert(id, Pending::Interrupt);
                eprintln!("[interrupting; Ctrl-C again within 2 s quits]");
                false
            }
            Err(_) => true,
        }
    }

    fn lost(&mut self, why: &str) {
        self.conn = None;
        if self
            .pending
            .drain()
            .any(|(_, p)| matches!(p, Pending::Submit))
        {
            eprintln!(
                "[a prompt was being submitted when the connection dropped; \
                 it may or may not have reached the session]"
            );
        }
        eprintln!("[connection lost{why}; reconnecting…]");
        self.backoff = BACKOFF_FIRST;
        self.retry_at = Instant::now() + self.backoff;
    }

    /// One reconnect attempt; on failure the next is scheduled, doubling the
    /// wait. Fails only when retrying cannot help (session gone, token
    /// refused).
    async fn reconnect(&mut self) -> Result<(), ClientError> {
        let attempt = tokio::time::timeout(ATTEMPT_WAIT, self.resume()).await;
        let (conn, events, r) = match attempt {
            Ok(Ok(resumed)) => resumed,
            Ok(Err(e)) if fatal(&e) => return Err(e),
            Ok(Err(_)) | Err(_) => {
                self.backoff = (self.backoff * 2).min(BACKOFF_MAX);
                self.retry_at = Instant::now() + self.backoff;
                return Ok(());
            }
        };
        self.conn = Some(conn);
        self.backoff = BACKOFF_FIRST;
        let missed = self
            .view
            .replay(&events, &r)
            .map_err(ClientError::io("stdout"))?;
        eprintln!("[reconnected, {}]", missed_events(missed));
        while let Some(line) = self.unsent.pop_front() {
            self.submit(line).await;
            if self.conn.is_none() {
                break;
            }
        }
        Ok(())
    }

    /// Connects and resumes from the watermark. When the gateway's store
    /// changed (a new epoch) the watermark means nothing there, and when
    /// more was missed than a resume replays (`resync`), the events are not
    /// sent: in both cases the transcript since the watermark is shown
    /// instead.
    async fn resume(&mut self) -> Result<(Conn, Vec<Event>, ResumeResult), ClientError> {
        let mut conn = Conn::open(&self.target).await?;
        self.me.hello(&mut conn).await?;
        if conn.epoch != self.epoch {
            eprintln!("[the gateway's store changed; showing the session afresh]");
            self.epoch = conn.epoch.clone();
            self.view.watermark = 0;
            return self.full_resume(conn).await;
        }
        let r: ResumeResult = conn
            .call(
                "session.resume",
                json!({"session_id": self.session, "last_seen": self.view.watermark,
                       "omit_messages": true}),
            )
            .await?;
        if r.resync == Some(true) {
            eprintln!("[too many events missed to replay; showing the transcript since]");
            return self.full_resume(conn).await;
        }
        let mut events = Vec::new();
        for raw in r.events.iter().flatten() {
            let e = serde_json::from_str(raw.get())
                .map_err(|e| ClientError::Protocol(format!("a replayed event: {e}")))?;
            events.push(e);
        }
        Ok((conn, events, r))
    }

    /// A resume with the transcript, shown from the watermark on.
    async fn full_resume(
        &mut self,
        mut conn: Conn,
    ) -> Result<(Conn, Vec<Event>, ResumeResult), ClientError> {
        let r: ResumeResult = conn
            .call("session.resume", json!({"session_id": self.session}))
            .await?;
        self.view
            .transcript(&r)
            .map_err(ClientError::io("stdout"))?;
        Ok((conn, Vec::new(), r))
    }
}

/// Failures a reconnect cannot fix by trying again.
fn fatal(e: &ClientError) -> bool {
    matches!(
        e,
        ClientError::NoToken | ClientError::BadToken | ClientError::BadUrl { .. }
    ) || matches!(
        e.rpc_code(),
        Some(codes::SESSION_NOT_FOUND | codes::SESSION_CLOSED)
    )
}

/// Stdin's lines, read on a thread of their own: a blocking read cannot be
/// cancelled, and a runtime waiting for one at exit would hang.
fn stdin_lines() -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel(64);
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin().lock();
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match stdin.read_until(b'\n', &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    let line = String::from_utf8_lossy(&buf);
                    let line = line.trim_end_matches('\n').trim_end_matches('\r');
                    if tx.blocking_send(line.to_string()).is_err() {
                        break;
                    }
                }
            }
        }
    });
    rx
}
