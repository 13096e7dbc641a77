//! `Host`: one actor per compute-host worker process (PROTOCOL Part 2).
//!
//! The actor owns the process and its two pipes. A writer task drains a
//! bounded queue of lines into the host's stdin; a reader task reads its
//! stdout line by line and forwards each frame straight to the
//! `HostSupervisor`, which owns all routing. The actor itself keeps the
//! books of what the host holds of sessions' histories (`held.rs`) and
//! decides when the host is dead; it then kills the process group and
//! stops, and the supervisor sees that stop as a supervision event and does
//! the rest (fail the turns, restart the slot).
//!
//! A host is dead when its process exits, its stdout ends, it has not said
//! `hello` within `hello_timeout`, it has written no line at all for three
//! heartbeats, or it stops reading its stdin. Frames go from the reader to
//! the supervisor directly, not through this actor: the supervisor's mailbox
//! then holds them in the order the host wrote them, ahead of the news of
//! the host's death (see `HostSupervisor::handle_supervisor_evt`).
//!
//! This is the host edge: no line longer than the host line cap
//! (`--max-host-line-bytes`) is ever held whole or passed on, and no line
//! nested deeper than a client frame may be (64 levels) is parsed or passed
//! on. The first bytes of such a line say which turn or control request it
//! belonged to (see [`tether_protocol::peek_frame`]); the supervisor then
//! ends that turn (or fails that request) with an error, since the frame it
//! waits for was refused. The messages of a host's errors are shown to
//! clients and in logs: URLs in them lose their credentials here
//! ([`tether_protocol::mask_urls`]).

mod held;
mod line;
mod masked;
mod pipes;
mod refusal;

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tether_protocol::{mask_urls, FromHost, ToHost, TurnId};
use tokio::process::Command;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

use crate::config::HostConfig;
use crate::host_registry::kill_group;
use crate::host_supervisor::HostSupervisorMsg;
use crate::sparse_log::SparseLog;
use held::HeldHistories;
use pipes::{read_frames, write_lines, Reader};
pub use refusal::Refusal;

/// Lines waiting for the host's stdin. A host that leaves this many unread
/// is wedged: it is declared dead rather than buffered for.
const STDIN_QUEUE: usize = 1024;
/// After the process exits, how long its stdout may stay open (held by a
/// child of the host) before the host is declared dead anyway. Until then
/// the reader delivers what the host wrote before it exited.
const EXIT_GRACE: Duration = Duration::from_millis(500);
/// How long `post_stop` waits for a killed process to be reaped.
const REAP_WAIT: Duration = Duration::from_secs(2);

pub enum HostMsg {
    /// Write a frame to the host's stdin.
    Send(ToHost),
    /// Internal: the host's first `hello` offered to keep histories of at
    /// most this many bytes (0: none). The reader sends it before it
    /// forwards the `hello`, so it is here before any turn is routed to
    /// the host.
    KeepsHistories(u64),
    /// Internal: the host said it did not hold a history it was told it
    /// held (`turn.error` with reason `history_mismatch`).
    HistoryLost,
    /// Internal: the stdout reader stopped (end of stdout, a read error, no
    /// `hello` in time, missed heartbeats); the reason.
    ReaderDone(String),
    /// Internal: the process exited; how.
    Exited(String),
    /// Internal: the process exited a while ago and stdout is still open.
    ExitGraceOver,
}

/// What the stdout reader hands the supervisor, in the order the host
/// wrote it.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    /// A decoded frame.
    Frame(FromHost),
    /// A line refused at the edge (see [`Refusal`]) that named a turn or a
    /// control request in its first bytes. The line itself was dropped
    /// (and the host answered with an `error` frame).
    Refused {
        turn_id: Option<TurnId>,
        request_id: Option<String>,
        why: Refusal,
    },
}

pub struct HostArgs {
    /// The slot this process serves (`host_id`).
    pub slot: u32,
    /// Which start of the slot this is; tags every frame forwarded, so the
    /// supervisor can tell a replacement's frames from its predecessor's.
    pub incarnation: u64,
    pub config: Arc<HostConfig>,
    pub supervisor: ActorRef<HostSupervisorMsg>,
}

pub struct HostState {
    slot: u32,
    pid: u32,
    stdin: mpsc::Sender<String>,
    reader: JoinHandle<()>,
    writer: JoinHandle<()>,
    /// Waits for the process to exit (and reaps it); owns the `Child`.
    waiter: Option<JoinHandle<()>>,
    /// How the process exited, once it did.
    exited: Option<String>,
    reader_done: bool,
    /// Set once the process group was killed and the tasks stopped.
    cleaned: bool,
    /// What the host holds of sessions' histories.
    held: HeldHistories,
}

pub struct Host;

impl Actor for Host {
    type Msg = HostMsg;
    type State = HostState;
    type Arguments = HostArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: HostArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let HostArgs {
            slot,
            incarnation,
            config,
            supervisor,
        } = args;
        let Some((program, rest)) = config.command.split_first() else {
            return Err("the host command is empty".into());
        };
        let heartbeat_s = heartbeat_secs(config.heartbeat);
        let mut child = Command::new(program)
            .args(rest)
            .env("TETHER_HEARTBEAT_S", heartbeat_s.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            // Its own group: killing the group also kills whatever the
            // host started, and a Ctrl-C at the gateway's terminal does not
            // reach the hosts before the gateway could tell them to stop.
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| {
                let program = mask_urls(program);
                format!("cannot start the host command `{program}`: {e}")
            })?;
        let pid = child.id().ok_or("the host process exited at once")?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            kill_group(pid);
            return Err("the host's pipes are missing".into());
        };

        let (tx, rx) = mpsc::channel(STDIN_QUEUE);
        let writer = tokio::spawn(write_lines(stdin, rx, slot, pid));
        let reader = tokio::spawn(read_frames(
            stdout,
            Reader {
                slot,
                incarnation,
                pid,
                supervisor,
                host: myself.clone(),
                stdin: tx.clone(),
                hello_timeout: config.hello_timeout,
                silence_limit: Duration::from_secs(heartbeat_s.saturating_mul(3)),
                max_line: config.max_line_bytes,
                bad_lines: SparseLog::default(),
            },
        ));
        let me = myself.clone();
        let waiter = tokio::spawn(async move {
            let how = match child.wait().await {
                Ok(status) => match status.code() {
                    Some(code) => format!("exited with status {code}"),
                    None => format!("exited: {status}"),
                },
                Err(e) => format!("cannot wait for the process: {e}"),
            };
            let _ = me.cast(HostMsg::Exited(how));
        });
        info!(host_id = slot, pid, incarnation, "host process started");
        Ok(HostState {
            slot,
            pid,
            stdin: tx,
            reader,
            writer,
            waiter: Some(waiter),
            exited: None,
            reader_done: false,
            cleaned: false,
            held: HeldHistories::default(),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // Never `Err` here: ractor skips `post_stop` for a failed actor, and
        // `post_stop` is where the process is killed and reaped.
        match msg {
            HostMsg::Send(frame) => state.send(&myself, frame),
            HostMsg::KeepsHistories(bytes) => {
                debug!(
                    host_id = state.slot,
                    pid = state.pid,
                    bytes,
                    "host keeps histories"
                );
                state.held.set_budget(bytes);
            }
            // Only a host that keeps histories can have lost one; from any
            // other, the reason is just a turn's failure.
            HostMsg::HistoryLost if !state.held.keeps() => {}
            HostMsg::HistoryLost => {
                // The books and the host disagree, and nothing on the
                // wire can tell which histories are wrong: a new process
                // starts both from nothing (its running turns end as a
                // crash would end them).
                warn!(
                    host_id = state.slot,
                    pid = state.pid,
                    "host lost a history it held"
                );
                myself.stop(Some(
                    "the host lost a history it held (history_mismatch)".into(),
                ));
            }
            HostMsg::ReaderDone(reason) => {
                state.reader_done = true;
                let why = state.exited.clone().unwrap_or(reason);
                myself.stop(Some(why));
            }
            HostMsg::Exited(how) => {
                debug!(host_id = state.slot, pid = state.pid, how = %how, "host process exited");
                if state.reader_done {
                    myself.stop(Some(how));
                } else {
                    state.exited = Some(how);
                    myself.send_after(EXIT_GRACE, || HostMsg::ExitGraceOver);
                }
            }
            HostMsg::ExitGraceOver => {
                let how = state.exited.clone().unwrap_or_else(|| "exited".into());
                myself.stop(Some(format!("{how} (its stdout stayed open)")));
            }
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        state.kill();
        // Reap the process, so that it is really gone (not a zombie) by the
        // time the supervisor hears of the stop.
        if let Some(waiter) = state.waiter.take() {
            if tokio::time::timeout(REAP_WAIT, waiter).await.is_err() {
                warn!(
                    host_id = state.slot,
                    pid = state.pid,
                    "host process was not reaped in time"
                );
            }
        }
        Ok(())
    }
}

impl HostState {
    fn send(&mut self, myself: &ActorRef<HostMsg>, frame: ToHost) {
        let lines = match &frame {
            ToHost::TurnStart(turn) => self.held.lines(turn),
            other => vec![other.to_line()],
        };
        for line in lines {
            match self.stdin.try_send(line) {
                Ok(()) => {}
                Err(mpsc::error::TrySendError::Full(_)) => {
                    myself.stop(Some(format!(
                        "the host left {STDIN_QUEUE} frames unread on its stdin"
                    )));
                    return;
                }
                Err(mpsc::error::TrySendError::Closed(_)) => {
                    myself.stop(Some("cannot write to the host's stdin".into()));
                    return;
                }
            }
        }
    }

    /// Kills the process group and stops the pipe tasks (idempotent).
    fn kill(&mut self) {
        if self.cleaned {
            return;
        }
        self.cleaned = true;
        kill_group(self.pid);
        self.reader.abort();
        // Dropping the writer closes the host's stdin: a host that somehow
        // survived the kill (another group) exits on that.
        self.writer.abort();
    }
}

impl Drop for HostState {
    /// A Host actor that was killed (not stopped) never runs `post_stop`; no
    /// process may outlive it all the same.
    fn drop(&mut self) {
        self.kill();
        if let Some(waiter) = self.waiter.take() {
            // Drops the `Child`: kill_on_drop, and tokio reaps it.
            waiter.abort();
        }
    }
}

/// The heartbeat interval told to hosts, in whole seconds (at least 1).
fn heartbeat_secs(heartbeat: Duration) -> u64 {
    let secs = heartbeat.as_secs() + u64::from(heartbeat.subsec_nanos() > 0);
    secs.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heartbeat_rounds_up_to_whole_seconds() {
        assert_eq!(heartbeat_secs(Duration::from_secs(5)), 5);
        assert_eq!(heartbeat_secs(Duration::from_millis(1500)), 2);
        assert_eq!(heartbeat_secs(Duration::from_millis(100)), 1);
        assert_eq!(heartbeat_secs(Duration::ZERO), 1);
    }
}
