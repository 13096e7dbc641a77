//! One run of the `command` engine's agent program: `sh -c CMD` in a
//! process group of its own, its stdin fed with one JSON document, its
//! stdout read line by line, the tail of its stderr kept for the error
//! message.
//!
//! The process group is what makes an interrupt (or a dropped turn) take
//! down the whole agent: `sh`, the interpreter it starts, and whatever those
//! spawn. The group is killed when the [`Agent`] is dropped, on every path,
//! so nothing a turn started outlives it.

use std::io;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStderr, ChildStdout, Command};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// How much of stderr a failure message carries.
const STDERR_TAIL: usize = 2048;
/// The longest stdout line handled as one line; a longer one is passed on
/// in pieces (as text), so an agent cannot grow the host without bound.
const MAX_LINE: usize = 1024 * 1024;
/// After SIGTERM, how long the group has to exit before SIGKILL.
const TERM_GRACE: Duration = Duration::from_secs(2);
/// After the agent exits, how long its stdout may stay open (held by
/// something it left running) before the run is over anyway.
const EXIT_DRAIN: Duration = Duration::from_secs(2);
/// After the agent exits, how long its stderr may take to close.
const STDERR_DRAIN: Duration = Duration::from_secs(1);

/// A piece of the agent's stdout.
#[derive(Debug)]
pub struct Line {
    /// The text, with its `\n` when it had one; bytes that are not UTF-8
    /// are replaced.
    pub text: String,
    /// A complete line (not a piece of an over-long one), so it may be an
    /// event.
    pub whole: bool,
}

/// What [`Agent::step`] found.
#[derive(Debug)]
pub enum Step {
    Line(Line),
    /// The agent exited and its stdout is done.
    Exited(ExitStatus),
}

/// A running agent.
pub struct Agent {
    child: Child,
    /// The process group id (the child's pid, as it leads its own group).
    pgid: Option<u32>,
    stdout: Lines,
    exit: Option<ExitStatus>,
    /// Set once the agent has exited: when to stop waiting for stdout.
    drain_until: Option<Instant>,
    stderr: Arc<Mutex<Vec<u8>>>,
    stderr_task: JoinHandle<()>,
    stdin_task: JoinHandle<()>,
}

impl Agent {
    /// Starts `sh -c command` with `envs`, and writes `input` to its stdin
    /// (then closes it).
    pub fn spawn(command: &str, envs: &[(&str, String)], input: Vec<u8>) -> io::Result<Agent> {
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(command)
            // Ids from the host's own environment would be wrong here;
            // a run gets the ones that apply to it from `envs`.
            .env_remove("TETHER_SESSION_ID")
            .env_remove("TETHER_TURN_ID")
            .env_remove("TETHER_TRACE_ID")
            .envs(envs.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own group, so one signal reaches everything it starts and
            // a Ctrl-C meant for the host's terminal does not.
            .process_group(0)
            .kill_on_drop(true);
        let mut child = cmd.spawn()?;
        let missing = || io::Error::other("a pipe of the agent is missing");
        let stdin = child.stdin.take().ok_or_else(missing)?;
        let stdout = child.stdout.take().ok_or_else(missing)?;
        let stderr_pipe = child.stderr.take().ok_or_else(missing)?;
        let pgid = child.id();
        // Written from a task: an agent that prints before it reads would
        // otherwise deadlock with a host that writes before it reads.
        let stdin_task = tokio::spawn(async move {
            let mut stdin = stdin;
            if let Err(e) = stdin.write_all(&input).await {
                // The agent is free not to read its input.
                tracing::debug!(error = %e, "the agent did not take its input");
            }
        });
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let stderr_task = tokio::spawn(keep_tail(stderr_pipe, stderr.clone()));
        Ok(Agent {
            child,
            pgid,
            stdout: Lines::new(stdout),
            exit: None,
            drain_until: None,
            stderr,
            stderr_task,
            stdin_task,
        })
    }

    /// The next piece of stdout, or the end of the run. Cancel safe: a
    /// call dropped half way loses nothing.
    pub async fn step(&mut self) -> io::Result<Step> {
        loop {
            if self.stdout.done {
                let status = match self.exit {
                    Some(status) => status,
                    None => self.child.wait().await?,
                };
                self.exit = Some(status);
                return Ok(Step::Exited(status));
            }
            let drain_until = self.drain_until;
            tokio::select! {
                status = self.child.wait(), if self.exit.is_none() => {
                    self.exit = Some(status?);
                    self.drain_until = Some(Instant::now() + EXIT_DRAIN);
                }
                () = sleep_until(drain_until), if drain_until.is_some() => {
                    tracing::warn!("the agent exited but its stdout stayed open; ending the run");
                    self.stdout.done = true;
                }
                line = self.stdout.next() => {
                    if let Some(line) = line? {
                        return Ok(Step::Line(line));
                    }
                }
            }
        }
    }

    /// Interrupts the agent: SIGTERM to its group, SIGKILL if it is still
    /// there after [`TERM_GRACE`]. Returns once the agent has exited.
    pub async fn stop(&mut self) {
        if self.exit.is_some() {
            return;
        }
        self.signal(Signal::SIGTERM);
        match tokio::time::timeout(TERM_GRACE, self.child.wait()).await {
            Ok(status) => self.exit = status.ok(),
            Err(_) => {
                tracing::debug!("the agent ignored SIGTERM; killing it");
                self.signal(Signal::SIGKILL);
                self.exit = self.child.wait().await.ok();
            }
        }
    }

    /// The last [`STDERR_TAIL`] bytes of stderr, starting on a character
    /// boundary and trimmed. Waits a little for stderr to close, so what
    /// the agent wrote just before exiting is in it.
    pub async fn stderr_tail(&mut self) -> String {
        let _ = tokio::time::timeout(STDERR_DRAIN, &mut self.stderr_task).await;
        let tail = self.stderr.lock().unwrap_or_else(PoisonError::into_inner);
        // Skip UTF-8 continuation bytes: the cut may have split a character.
        let start = tail
            .iter()
            .position(|b| b & 0xC0 != 0x80)
            .unwrap_or(tail.len());
        String::from_utf8_lossy(&tail[start..]).trim().to_owned()
    }

    /// Sends `signal` (SIGTERM, SIGKILL) to the agent's process group.
    fn signal(&self, signal: Signal) {
        if let Some(pgid) = self.pgid {
            kill_group(pgid, signal);
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.stdin_task.abort();
        self.stderr_task.abort();
        // Whatever the run left behind in its group goes with it, also when
        // the host drops a turn that ignored its interrupt. The leader may
        // already be reaped: its group id cannot go to another group while
        // a member lives, an empty group just answers ESRCH, and the pid
        // being recycled as a group leader in between is far-fetched.
        self.signal(Signal::SIGKILL);
    }
}

/// `killpg(PGID, SIGNAL)`: one system call that does not block, so it
/// may run on the runtime's threads (running the `kill` program meant
/// waiting for a process from async code).
fn kill_group(pgid: u32, signal: Signal) {
    // 0 would be the host's own group and 1 init: never an agent's.
    let Some(raw) = i32::try_from(pgid).ok().filter(|&p| p > 1) else {
        return;
    };
    match killpg(Pid::from_raw(raw), signal) {
        // An empty group: everything in it has exited already.
        Ok(()) | Err(Errno::ESRCH) => {}
        Err(e) => tracing::warn!(error = %e, pgid, ?signal, "cannot signal the agent's group"),
    }
}

/// Sleeps until `at`, or forever without one (a disabled select branch
/// still builds its future).
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Keeps the last [`STDERR_TAIL`] bytes of `pipe` in `tail`.
async fn keep_tail(mut pipe: ChildStderr, tail: Arc<Mutex<Vec<u8>>>) {
    let mut chunk = [0u8; 4096];
    loop {
        match pipe.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                let mut tail = tail.lock().unwrap_or_else(PoisonError::into_inner);
                tail.extend_from_slice(&chunk[..n]);
                let excess = tail.len().saturating_sub(STDERR_TAIL);
                tail.drain(..excess);
            }
        }
    }
}

/// stdout, split into [`Line`]s.
struct Lines {
    reader: BufReader<ChildStdout>,
    /// The line read so far; kept across calls so a cancelled read loses
    /// nothing.
    buf: Vec<u8>,
    /// The previous piece was part of an over-long line without its end.
    continuing: bool,
    /// stdout is at its end (or no longer read).
    done: bool,
}

impl Lines {
    fn new(stdout: ChildStdout) -> Self {
        Self {
            reader: BufReader::new(stdout),
            buf: Vec::new(),
            continuing: false,
            done: false,
        }
    }

    /// The next line or piece; `None` at the end of stdout.
    async fn next(&mut self) -> io::Result<Option<Line>> {
        if self.done {
            return Ok(None);
        }
        let room = MAX_LINE.saturating_sub(self.buf.len()) as u64;
        let n = if room == 0 {
            0
        } else {
            (&mut self.reader)
                .take(room)
                .read_until(b'\n', &mut self.buf)
                .await?
        };
        let eof = n == 0 && room > 0;
        if eof {
            self.done = true;
            if self.buf.is_empty() {
                return Ok(None);
            }
        }
        let ended = eof || self.buf.last() == Some(&b'\n');
        let whole = ended && !self.continuing;
        self.continuing = !ended;
        let mut bytes = std::mem::take(&mut self.buf);
        if !ended {
            // A piece of a long line: a character cut in two waits for the
            // next piece instead of turning into replacement characters.
            if let Err(e) = std::str::from_utf8(&bytes) {
                if e.error_len().is_none() {
                    self.buf = bytes.split_off(e.valid_up_to());
                }
            }
        }
        let text = match String::from_utf8(bytes) {
            Ok(text) => text,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        };
        Ok(Some(Line { text, whole }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `command` to its end: its stdout pieces and exit status.
    async fn run(agent: &mut Agent) -> (Vec<Line>, ExitStatus) {
        let mut lines = Vec::new();
        loop {
            match agent.step().await.unwrap() {
                Step::Line(line) => lines.push(line),
                Step::Exited(status) => return (lines, status),
            }
        }
    }

    #[tokio::test]
    async fn an_over_long_line_comes_in_pieces_cut_between_characters() {
        let command = "python3 -c \"print('é' * 700000); print('{}')\"";
        let mut agent = Agent::spawn(command, &[], Vec::new()).unwrap();
        let (lines, status) = run(&mut agent).await;
        assert!(status.success());
        let text: String = lines.iter().map(|l| l.text.as_str()).collect();
        assert_eq!(text, format!("{}\n{{}}\n", "é".repeat(700_000)));
        assert!(!text.contains('\u{FFFD}'));
        assert!(lines.iter().all(|l| l.text.len() <= MAX_LINE));
        let (last, long) = lines.split_last().unwrap();
        assert!(long.len() > 1 && long.iter().all(|l| !l.whole));
        assert!(last.whole);
    }

    #[tokio::test]
    async fn the_stderr_tail_is_the_last_2_kib_from_a_character_boundary() {
        let command = "python3 -c \"import sys; sys.stderr.write('é' * 3000 + 'x')\"";
        let mut agent = Agent::spawn(command, &[], Vec::new()).unwrap();
        let (lines, status) = run(&mut agent).await;
        assert!(lines.is_empty() && status.success());
        let tail = agent.stderr_tail().await;
        // 2048 bytes back from the end is the middle of an `é`.
        assert_eq!(tail, format!("{}x", "é".repeat(STDERR_TAIL / 2 - 1)));
    }

    #[tokio::test]
    async fn input_goes_to_stdin_and_ids_to_the_environment() {
        let envs = [("TETHER_TURN_ID", "t_1".to_owned())];
        let command = "cat; echo \" $TETHER_TURN_ID\"";
        let mut agent = Agent::spawn(command, &envs, b"in".to_vec()).unwrap();
        let (lines, _) = run(&mut agent).await;
        assert_eq!(lines[0].text, "in t_1\n");
    }
}
