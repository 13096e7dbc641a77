//! `tether bench`: throughput of the gateway core, measured in-process on
//! the real actors, store and WebSocket path.
//!
//! The gateway runs on its own tokio runtime pinned to one CPU and the load
//! generator (the WebSocket clients) on another runtime pinned to the other,
//! so the two do not steal each other's core; SQLite's connection threads
//! inherit the gateway's pinning. Events are injected at the session (the
//! point where a turn's host frames enter), so the measured path is: seq
//! assignment → StoreWriter group commit → ring → one serialization →
//! every peer's outbox → socket.
//!
//! `tether bench load` is the other half: a server in its own process
//! (tether, or a baseline from bench/limit or bench/socketio) under load
//! from this one, for the side-by-side comparisons of bench/compare.sh.
//!
//! It is its own binary, `tether-bench` (`tether bench` runs it): the
//! in-process scenarios reach into the actors through their test hooks,
//! which the `tether` binary does not carry. The scenarios that start
//! gateways or compute hosts as processes run the `tether` binary that
//! [`tether_exe`] finds.
//!
//! Errors are `anyhow`: this crate is the body of one binary, and its
//! errors are only ever printed.

mod cluster;
mod eventlog;
mod fanout;
mod fill;
mod flat;
mod harness;
mod idle;
mod load;
mod store;
mod storm;
mod turns;
mod write_bytes;
mod writer;

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};

/// The variable naming the `tether` binary to benchmark; `tether bench`
/// sets it to itself.
pub const TETHER_BIN_ENV: &str = "TETHER_BIN";

/// The `tether` binary the scenarios start as gateways and compute hosts:
/// [`TETHER_BIN_ENV`] if set, else `tether` beside this executable (cargo
/// builds both into one directory).
pub fn tether_exe() -> anyhow::Result<PathBuf> {
    if let Some(path) = std::env::var_os(TETHER_BIN_ENV).filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(path));
    }
    let me = std::env::current_exe().context("the current executable")?;
    let sibling = me.with_file_name("tether");
    anyhow::ensure!(
        sibling.is_file(),
        "no tether binary beside {} (build it with `cargo build --release -p tether`, \
         or name one with {TETHER_BIN_ENV})",
        me.display()
    );
    Ok(sibling)
}

#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    scenario: Scenario,
}

#[derive(Debug, Subcommand)]
enum Scenario {
    /// Committed events per second through the StoreWriter on its own.
    Writer(writer::WriterBench),
    /// Committed events per second emitted by sessions, no peers.
    Store(store::StoreBench),
    /// Durable events appended and delivered to peers over WebSocket.
    Fanout(fanout::FanoutBench),
    /// Turns end to end through compute-host processes.
    Turns(turns::TurnsBench),
    /// Time from a host's kill -9 to the client's message.complete.
    Crash(turns::CrashBench),
    /// Every client drops at once and resumes from its watermark.
    Storm(storm::StormBench),
    /// Resident memory per idle peer, idle live session and parked session.
    Idle(idle::IdleBench),
    /// A server in its own process (tether or a baseline) under fanout,
    /// storm or idle load, for side-by-side comparisons.
    Load(load::LoadBench),
    /// Two nodes on one PostgreSQL: failover after kill -9, cross-node
    /// delivery latency and its CPU cost.
    Cluster(cluster::ClusterBench),
    /// Bytes written to disk per stored event (WAL and checkpoints),
    /// beside the events' own size.
    WriteBytes(write_bytes::WriteBytesBench),
    /// Fills a store with many sessions and events through the store's
    /// write API, as a gateway would have written them over a long time.
    Fill(fill::FillBench),
    /// Start-up, memory, list, resume, paging and turn figures on an
    /// empty store and on a filled one, side by side.
    Flat(flat::FlatBench),
    /// The event log on its own: bytes written per record and commit
    /// latency (`--mode write`), read p99 big against small (`--mode read`).
    Log(eventlog::LogBench),
}

pub fn run(args: BenchArgs) -> anyhow::Result<()> {
    match args.scenario {
        Scenario::Writer(b) => writer::run(b),
        Scenario::Store(b) => store::run(b),
        Scenario::Fanout(b) => fanout::run(b),
        Scenario::Turns(b) => turns::run_turns(b),
        Scenario::Crash(b) => turns::run_crash(b),
        Scenario::Storm(b) => storm::run(b),
        Scenario::Idle(b) => idle::run(b),
        Scenario::Load(b) => load::run(b),
        Scenario::Cluster(b) => cluster::run(b),
        Scenario::WriteBytes(b) => write_bytes::run(b),
        Scenario::Fill(b) => fill::run(b),
        Scenario::Flat(b) => flat::run(b),
        Scenario::Log(b) => eventlog::run(b),
    }
}
