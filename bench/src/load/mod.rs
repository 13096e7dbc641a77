//! `tether bench load`: one load generator for tether and two baselines,
//! so that their figures can be set side by side (bench/compare.sh,
//! docs/BENCHMARKS.md).
//!
//! Unlike the in-process scenarios next to it, the server here is a
//! separate process (given by `--url`/`--server-pid`, or started by the
//! generator pinned to `--server-cpu`), and every target is driven the same
//! way over loopback WebSockets: N clients spread over S rooms (tether
//! sessions), events published on a fixed schedule that never waits on
//! delivery (each stamped with the time it was meant to leave, so slow
//! delivery cannot hide as a lower rate), and each client checking its
//! room's events by number for gaps and duplicates (and, on tether, the
//! durable `seq`). Server CPU and peak RSS come from `/proc` of the server
//! and, separately, of its children (tether's compute hosts).
//!
//! The targets: `tether` (events published by compute hosts through
//! echo's `/flood`, the real path, every event durable in SQLite),
//! `limit` (bench/limit: a bare tokio-tungstenite room broadcaster, no
//! persistence) and `socketio` (bench/socketio: Socket.IO 4.8 with
//! connection state recovery, rooms as sessions, nothing persisted).

pub(crate) mod conn;
mod fanout;
mod idle;
mod limit;
pub(crate) mod proc;
pub(crate) mod publish;
pub(crate) mod server;
mod socketio;
mod storm;
pub(crate) mod tally;
mod target;
pub(crate) mod tether;
pub(crate) mod turns;

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use serde_json::{json, Value};

use super::harness::on_pinned_thread;
use super::store::cpu_label;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TargetKind {
    /// tether serve, events from compute hosts (echo `/flood`).
    Tether,
    /// bench/limit's `tether-limit`, a bare broadcaster.
    Limit,
    /// bench/socketio's server.js (Socket.IO 4.8, state recovery on).
    Socketio,
}

impl TargetKind {
    fn name(self) -> &'static str {
        match self {
            TargetKind::Tether => "tether",
            TargetKind::Limit => "limit",
            TargetKind::Socketio => "socketio",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ScenarioKind {
    /// Delivery rate stepped up until saturation.
    Fanout,
    /// Every client drops at once mid-stream and comes back.
    Storm,
    /// Server memory per idle subscribed connection.
    Idle,
    /// Agent turns on a schedule (5 durable events and 10 deltas each),
    /// stepped up in durable deliveries/s.
    Turns,
}

#[derive(Debug, Args, Clone)]
pub struct LoadBench {
    #[arg(long, value_enum)]
    pub target: TargetKind,
    #[arg(long, value_enum)]
    pub scenario: ScenarioKind,
    /// WebSocket URL of a running server (tether: ws://ADDR/ws; Socket.IO:
    /// ws://ADDR/socket.io/?EIO=4&transport=websocket). Without it the
    /// generator starts the server itself.
    #[arg(long)]
    pub url: Option<String>,
    /// Pid of the server given by --url, for its CPU and memory.
    #[arg(long)]
    pub server_pid: Option<u32>,
    /// Rooms (tether sessions).
    #[arg(long, default_value_t = 250)]
    pub sessions: usize,
    /// Clients per room (fanout, storm).
    #[arg(long, default_value_t = 4)]
    pub peers: usize,
    /// Size of each event's payload JSON, about.
    #[arg(long, default_value_t = 100)]
    pub payload_bytes: usize,
    /// fanout: the deliveries/s aimed at, step by step (deliveries = events
    /// × clients of their room); turns: the durable deliveries/s (5 per
    /// turn per client).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "5000,10000,20000,50000,100000,200000"
    )]
    pub steps: Vec<u64>,
    /// fanout: seconds of publishing per step.
    #[arg(long, default_value_t = 5.0)]
    pub step_secs: f64,
    /// fanout: seconds of publishing at the first step's rate before the
    /// ramp, not counted (0: none).
    #[arg(long, default_value_t = 2.0)]
    pub ramp_warmup_secs: f64,
    /// fanout: a step whose p99 latency is above this fails (the ramp
    /// stops after two failed attempts).
    #[arg(long, default_value_t = 1000.0)]
    pub max_p99_ms: f64,
    /// fanout, storm: how long after the last event was due the generator
    /// still waits for deliveries, in seconds.
    #[arg(long, default_value_t = 5.0)]
    pub drain_secs: f64,
    /// storm: events per second over all rooms.
    #[arg(long, default_value_t = 2000.0)]
    pub rate: f64,
    /// storm: streaming before the drop, ms.
    #[arg(long, default_value_t = 2000)]
    pub warmup_ms: u64,
    /// storm: time between the drop and the reconnects, ms.
    #[arg(long, default_value_t = 200)]
    pub down_ms: u64,
    /// storm: publishing that goes on after the reconnects, ms.
    #[arg(long, default_value_t = 4000)]
    pub after_ms: u64,
    /// idle: connections to open.
    #[arg(long, default_value_t = 10_000)]
    pub connections: usize,
    /// idle: wait before memory is read, ms.
    #[arg(long, default_value_t = 1000)]
    pub settle_ms: u64,
    /// tether: compute-host processes.
    #[arg(long, default_value_t = 2)]
    pub hosts: usize,
    /// CPU the started server is pinned to (taskset).
    #[arg(long, default_value_t = 0)]
    pub server_cpu: usize,
    /// CPU the generator runs on.
    #[arg(long, default_value_t = 1)]
    pub client_cpu: usize,
    /// limit: the `tether-limit` binary (default: next to this one).
    #[arg(long)]
    pub limit_bin: Option<PathBuf>,
    /// socketio: the directory of server.js and its node_modules.
    #[arg(long)]
    pub socketio_dir: Option<PathBuf>,
    /// socketio: the node executable.
    #[arg(long, default_value = "node")]
    pub node: String,
}

pub fn run(b: LoadBench) -> anyhow::Result<()> {
    let server = server::Server::start(&b)?;
    let cpu = b.client_cpu;
    let url = server.url.clone();
    let pid = server.pid;
    let args = b.clone();
    // One thread for the whole generator: its CPU is one core, reported.
    let report = on_pinned_thread(cpu, move || -> anyhow::Result<Value> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        rt.block_on(async move {
            match args.scenario {
                ScenarioKind::Fanout => fanout::run(&args, &url, pid).await,
                ScenarioKind::Storm => storm::run(&args, &url, pid).await,
                ScenarioKind::Idle => idle::run(&args, &url, pid).await,
                ScenarioKind::Turns => turns::run(&args, &url, pid).await,
            }
        })
    })?;
    drop(server);
    let mut out = json!({
        "scenario": match b.scenario {
            ScenarioKind::Fanout => "fanout",
            ScenarioKind::Storm => "storm",
            ScenarioKind::Idle => "idle",
            ScenarioKind::Turns => "turns",
        },
        "target": b.target.name(),
        "server_cpu": cpu_label(b.server_cpu),
        "client_cpu": cpu_label(b.client_cpu),
    });
    if let (Some(o), Value::Object(r)) = (out.as_object_mut(), report) {
        o.extend(r);
    }
    println!("{out}");
    Ok(())
}

/// CPU use between two samples, in percent of one core.
fn cpu_pct(cpu_s: f64, wall_s: f64) -> f64 {
    if wall_s <= 0.0 {
        return 0.0;
    }
    (cpu_s / wall_s * 1000.0).round() / 10.0
}
