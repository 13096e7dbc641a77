//! `tether host`: a compute-host worker (PROTOCOL Part 2). The gateway
//! starts it, writes frames to its stdin and reads frames from its stdout,
//! one JSON object per line; logs go to stderr.
//!
//! One loop owns the host's state (running turns, heartbeats, shutdown) and
//! reacts to four things: a line from stdin, a heartbeat tick, a turn or
//! control task ending, stdout closing. Each `turn.start` and each `control`
//! runs as its own task, so turns of different sessions run side by side and
//! a slow compress holds nothing up; all of them write through one stdout
//! writer (see [`io`]).
//!
//! It speaks only the host protocol of `tether-protocol`: nothing of the
//! gateway's actors or store, so an engine can be read (or replaced) on its
//! own.

mod command;
mod echo;
mod engine;
mod error;
mod flood;
mod held;
mod io;
mod openai;

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, ValueEnum};
use futures::FutureExt;
use tether_protocol::{
    parse_host_line, ControlRequest, FromHost, ToHost, TurnEndStatus, TurnId, TurnStart,
    HISTORY_MISMATCH,
};
use tokio::task::JoinSet;
use tokio::time::{Instant, MissedTickBehavior};
use tracing::Instrument;

use command::CommandEngine;
use echo::EchoEngine;
use engine::{Cancel, Engine, TurnOutcome, TurnSink};
use held::HeldHistories;
use io::{Input, Writer};
use openai::{OpenAiArgs, OpenAiEngine};

pub use error::{CompressError, DirectiveError, HostError};

/// The host protocol version announced in `hello`.
const PROTOCOL_VERSION: u32 = 1;
/// Frames waiting for stdout; beyond it, turns wait (backpressure).
const WRITE_QUEUE: usize = 1024;
/// Lines read from stdin and not yet handled.
const READ_QUEUE: usize = 64;
/// How long an interrupted engine may take to stop by itself before the
/// host stops polling it and ends the turn anyway.
const CANCEL_GRACE: Duration = Duration::from_secs(2);
/// How long `shutdown` waits for turns and controls to end before it
/// answers `shutdown.ack` regardless (the gateway allows 10 s in all).
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// How long the host, its stdin closed, still tries to write what it has
/// queued before exiting.
const EOF_FLUSH: Duration = Duration::from_millis(500);

/// Flags of `tether host`.
#[derive(Debug, Clone, Args)]
pub struct HostArgs {
    /// The engine that runs turns.
    #[arg(long, value_enum, default_value = "echo")]
    pub engine: EngineKind,
    /// echo: milliseconds between two deltas.
    #[arg(long, default_value_t = 0)]
    pub delay_ms: u64,
    /// echo: milliseconds before answering a compress.
    #[arg(long, default_value_t = 0)]
    pub compress_delay_ms: u64,
    /// KiB of sessions' histories to keep between turns, so that each
    /// turn is sent only the messages this host has not seen (0: keep
    /// none, be sent every whole history). The held texts may take up to
    /// about twice this much memory (a history grows by doubling).
    #[arg(long, default_value_t = 65536)]
    pub history_cache_kb: u64,
    /// command: the agent program each turn runs, through `sh -c`
    /// (docs/ENGINES.md).
    #[arg(long, required_if_eq("engine", "command"))]
    pub command: Option<String>,
    #[command(flatten)]
    pub openai: OpenAiArgs,
    /// Seconds between heartbeats (the gateway sets TETHER_HEARTBEAT_S).
    #[arg(long, env = "TETHER_HEARTBEAT_S", default_value_t = 5,
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub heartbeat_s: u64,
    /// Log format on stderr.
    #[arg(long, env = "TETHER_LOG_FORMAT", value_enum, default_value = "text")]
    pub log_format: LogFormat,
}

/// `--log-format`, of `tether host` and of `tether serve` alike (the
/// binary's config takes this one; `tether.toml` spells it in lowercase).
/// The binary sets the logger up before [`run`]; the host only carries the
/// choice (the gateway passes its own on).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

/// `--engine`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EngineKind {
    /// Deterministic replies and fault injection (PROTOCOL Part 3).
    Echo,
    /// Runs an agent program per turn (docs/ENGINES.md).
    Command,
    /// Streams each turn from an OpenAI-compatible chat-completions server
    /// (docs/ENGINES.md).
    #[value(name = "openai")]
    OpenAi,
}

/// Runs the host until `shutdown`, the end of stdin, or the loss of stdout.
pub async fn run(args: HostArgs) -> Result<(), HostError> {
    let engine: Arc<dyn Engine> = match args.engine {
        EngineKind::Echo => Arc::new(EchoEngine::new(
            Duration::from_millis(args.delay_ms),
            Duration::from_millis(args.compress_delay_ms),
        )),
        EngineKind::Command => {
            // clap requires --command with --engine command.
            let command = args
                .command
                .clone()
                .ok_or_else(|| HostError::Usage("--engine command needs --command".into()))?;
            Arc::new(CommandEngine::new(command))
        }
        EngineKind::OpenAi => Arc::new(OpenAiEngine::new(&args.openai)?),
    };
    let writer = io::spawn_writer(WRITE_QUEUE).map_err(|source| HostError::Pipe {
        pipe: "stdout writer",
        source,
    })?;
    writer
        .send(&FromHost::Hello {
            protocol: PROTOCOL_VERSION,
            pid: std::process::id(),
            engine: engine.name().into(),
            version: env!("CARGO_PKG_VERSION").into(),
            history_cache_bytes: (args.history_cache_kb > 0)
                .then(|| args.history_cache_kb.saturating_mul(1024)),
        })
        .await?;
    let mut input = io::spawn_reader(READ_QUEUE).map_err(|source| HostError::Pipe {
        pipe: "stdin reader",
        source,
    })?;
    tracing::info!(
        engine = engine.name(),
        pid = std::process::id(),
        "host started"
    );

    let mut host = Host::new(engine, writer.clone());
    let period = Duration::from_secs(args.heartbeat_s);
    let mut heartbeat = tokio::time::interval_at(Instant::now() + period, period);
    heartbeat.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            line = input.recv() => match line {
                Some(Input::Line(line)) => {
                    if host.handle_line(&line).await == Flow::Shutdown {
                        host.shutdown().await;
                        tracing::info!("host shut down");
                        return Ok(());
                    }
                }
                Some(Input::NotUtf8) => host.reject("the line is not UTF-8".into()).await,
                None => {
                    // The gateway is gone (or dropped us): nobody is left to
                    // read what the turns would say. What is already queued
                    // still goes out, briefly (a script piping frames in
                    // gets its answers), then the host exits.
                    tracing::info!("stdin closed; exiting");
                    host.abort();
                    let _ = tokio::time::timeout(EOF_FLUSH, writer.flush()).await;
                    return Ok(());
                }
            },
            _ = heartbeat.tick() => host.heartbeat().await,
            Some(ended) = host.turns.join_next() => host.turn_ended(ended),
            Some(_) = host.controls.join_next() => {}
            () = writer.closed() => {
                tracing::info!("stdout closed; exiting");
                host.abort();
                return Ok(());
            }
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Flow {
    Continue,
    Shutdown,
}

/// The loop's state.
struct Host {
    engine: Arc<dyn Engine>,
    writer: Writer,
    /// One task per running turn; each returns its turn id when done.
    turns: JoinSet<TurnId>,
    /// The interrupt handle of each running turn.
    running: HashMap<TurnId, Cancel>,
    controls: JoinSet<()>,
    /// Fired at shutdown: control tasks answer `control.error` and stop.
    stopping: Cancel,
    held: HeldHistories,
}

impl Host {
    fn new(engine: Arc<dyn Engine>, writer: Writer) -> Self {
        Self {
            engine,
            writer,
            turns: JoinSet::new(),
            running: HashMap::new(),
            controls: JoinSet::new(),
            stopping: Cancel::new(),
            held: HeldHistories::default(),
        }
    }

    /// Handles one line from the gateway. Blank lines are skipped.
    async fn handle_line(&mut self, line: &str) -> Flow {
        if line.trim().is_empty() {
            return Flow::Continue;
        }
        let frame = match parse_host_line::<ToHost>(line) {
            Ok(frame) => frame,
            Err(e) => {
                self.reject(e.to_string()).await;
                return Flow::Continue;
            }
        };
        match frame {
            ToHost::TurnStart(turn) => self.start_turn(turn).await,
            ToHost::Interrupt { turn_id } => self.interrupt(&turn_id),
            ToHost::Control(request) => self.control(request).await,
            ToHost::Ping { nonce } => self.send(&FromHost::Pong { nonce }).await,
            ToHost::HistoryDrop { session_id } => self.held.drop_session(&session_id),
            ToHost::Shutdown => return Flow::Shutdown,
            ToHost::Error { message } => {
                tracing::warn!(message, "the gateway could not understand a line of ours");
            }
        }
        Flow::Continue
    }

    /// Starts a turn in its own task. A second `turn.start` for a turn that
    /// is still running is answered with an `error` frame and ignored (the
    /// running turn goes on).
    async fn start_turn(&mut self, mut turn: TurnStart) {
        // First, even for a turn refused below: the gateway's books count
        // every history it sent as held.
        if let Err(e) = self.held.resolve(&mut turn) {
            tracing::warn!(
                session_id = %turn.session_id,
                turn_id = %turn.turn_id,
                error = %e,
                "sent a history base this host does not hold"
            );
            let frame = FromHost::TurnError {
                turn_id: turn.turn_id,
                reason: HISTORY_MISMATCH.into(),
                message: e.to_string(),
            };
            self.send(&frame).await;
            return;
        }
        if self.running.contains_key(&turn.turn_id) {
            let message = format!("turn {} is already running", turn.turn_id);
            self.reject(message).await;
            return;
        }
        let span = tracing::info_span!(
            "turn",
            turn_id = %turn.turn_id,
            session_id = %turn.session_id,
            trace_id = %turn.trace_id,
        );
        let cancel = Cancel::new();
        self.running.insert(turn.turn_id.clone(), cancel.clone());
        let task = run_turn(self.engine.clone(), turn, self.writer.clone(), cancel);
        self.turns.spawn(task.instrument(span));
    }

    /// Interrupts a running turn; one that is unknown or already ended is
    /// ignored (its end frame is out or about to be).
    fn interrupt(&mut self, turn_id: &TurnId) {
        match self.running.get(turn_id) {
            Some(cancel) => {
                tracing::debug!(turn_id = %turn_id, "interrupt");
                cancel.cancel();
            }
            None => tracing::debug!(turn_id = %turn_id, "interrupt for no running turn"),
        }
    }

    fn turn_ended(&mut self, ended: Result<TurnId, tokio::task::JoinError>) {
        match ended {
            Ok(turn_id) => {
                self.running.remove(&turn_id);
            }
            // `run_turn` catches engine panics, so only an abort gets here
            // (and aborts happen only when the host is exiting).
            Err(e) => tracing::warn!(error = %e, "a turn task failed"),
        }
    }

    /// Runs a control request in its own task; an op other than `compress`
    /// is answered with `control.error` at once.
    async fn control(&mut self, request: ControlRequest) {
        let ControlRequest {
            request_id,
            op,
            session_id,
            history,
            args,
        } = request;
        if op != "compress" {
            let message = format!("unknown control op `{op}`");
            self.send(&FromHost::ControlError {
                request_id,
                message,
            })
            .await;
            return;
        }
        let engine = self.engine.clone();
        let writer = self.writer.clone();
        let stopping = self.stopping.clone();
        let span = tracing::info_span!("control", session_id = %session_id, request_id, op);
        let task = async move {
            let frame = tokio::select! {
                result = engine.compress(&history, &args) => match result {
                    Ok(result) => FromHost::ControlAck {
                        request_id,
                        result: serde_json::to_value(result).unwrap_or_default(),
                    },
                    Err(e) => FromHost::ControlError {
                        request_id,
                        message: e.to_string(),
                    },
                },
                () = stopping.cancelled() => FromHost::ControlError {
                    request_id,
                    message: "the host is shutting down".into(),
                },
            };
            let _ = writer.send(&frame).await;
        };
        self.controls.spawn(task.instrument(span));
    }

    async fn heartbeat(&self) {
        let active_turns = u32::try_from(self.running.len()).unwrap_or(u32::MAX);
        self.send(&FromHost::Hb {
            active_turns,
            rss_kb: rss_kb(),
        })
        .await;
    }

    /// `shutdown`: interrupts every turn, stops every control, waits (a
    /// bounded time) for their last frames, then acknowledges.
    async fn shutdown(mut self) {
        tracing::info!(turns = self.running.len(), "shutdown");
        for cancel in self.running.values() {
            cancel.cancel();
        }
        self.stopping.cancel();
        let drain = async {
            while self.turns.join_next().await.is_some() {}
            while self.controls.join_next().await.is_some() {}
        };
        if tokio::time::timeout(SHUTDOWN_GRACE, drain).await.is_err() {
            tracing::warn!("turns did not end in time; acknowledging the shutdown anyway");
            self.abort();
        }
        self.send(&FromHost::ShutdownAck).await;
        let _ = self.writer.flush().await;
    }

    /// Drops every turn and control without a word (the host is exiting
    /// because the gateway is gone).
    fn abort(&mut self) {
        self.turns.abort_all();
        self.controls.abort_all();
    }

    /// `{"type":"error"}` for a line the host cannot use.
    async fn reject(&self, message: String) {
        tracing::warn!(message, "rejected a line");
        self.send(&FromHost::Error { message }).await;
    }

    /// A frame from the loop itself. If stdout is gone the loop notices
    /// through `Writer::closed` and exits, so the error is dropped here.
    async fn send(&self, frame: &FromHost) {
        let _ = self.writer.send(frame).await;
    }
}

/// One turn, start to last frame. Returns the turn id for the loop's
/// bookkeeping.
async fn run_turn(
    engine: Arc<dyn Engine>,
    turn: TurnStart,
    writer: Writer,
    cancel: Cancel,
) -> TurnId {
    let turn_id = turn.turn_id.clone();
    tracing::debug!("turn started");
    let sink = TurnSink::new(turn_id.clone(), writer.clone());
    let running =
        AssertUnwindSafe(engine.run_turn(turn, sink.clone(), cancel.clone())).catch_unwind();
    tokio::pin!(running);
    let ended = tokio::select! {
        ended = &mut running => ended,
        () = cancel.cancelled() => match tokio::time::timeout(CANCEL_GRACE, &mut running).await {
            Ok(ended) => ended,
            Err(_) => {
                tracing::warn!("the engine ignored an interrupt; dropping it");
                Ok(TurnOutcome::Interrupted)
            }
        },
    };
    let outcome = ended.unwrap_or_else(|_| TurnOutcome::Failed {
        reason: "engine_error".into(),
        message: "the engine panicked".into(),
    });
    let frame = match outcome {
        TurnOutcome::Complete { text } => FromHost::TurnEnd {
            turn_id: turn_id.clone(),
            status: TurnEndStatus::Complete,
            text,
            usage: sink.usage(),
        },
        TurnOutcome::Interrupted => FromHost::TurnEnd {
            turn_id: turn_id.clone(),
            status: TurnEndStatus::Interrupted,
            text: sink.text(),
            usage: sink.usage(),
        },
        TurnOutcome::Failed { reason, message } => FromHost::TurnError {
            turn_id: turn_id.clone(),
            reason,
            message,
        },
        TurnOutcome::Crash { code } => {
            let _ = sink.flush().await;
            tracing::warn!(code, "the engine asked the host to crash");
            std::process::exit(code);
        }
    };
    tracing::debug!("turn ended");
    let _ = writer.send(&frame).await;
    turn_id
}

/// The resident set size in kB, from `/proc/self/status` (0 where there is
/// no procfs).
fn rss_kb() -> u64 {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return 0;
    };
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kb| kb.parse().ok())
        .unwrap_or(0)
}
