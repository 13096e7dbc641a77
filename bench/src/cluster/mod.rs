//! `tether bench cluster`: several gateways on one PostgreSQL
//! (docs/ARCHITECTURE.md, "Cluster"; docs/benchmarks/2026-12.md,
//! "Several gateways").
//!
//! Two `tether serve --cluster` processes (nodes) on a fresh database of
//! the run's own, each pinned to its CPU with its compute hosts, and this
//! process as the clients. Two phases, in order:
//!
//! 1. delivery (`delivery.rs`): real turns on node 0, clients on both
//!    nodes; the follower's added latency per event, and the CPU time per
//!    1,000 durable deliveries of each node and of PostgreSQL;
//! 2. failover (`failover.rs`): `--kills` rounds of kill -9 of a session's
//!    owner mid-turn, timed at a client of the other node.
//!
//! `--secs 0` skips the first, `--kills 0` the second.

mod delivery;
mod failover;
mod node;
mod postgres;
mod report;
mod stats;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::bail;
use clap::Args;
use serde_json::{json, Value};

use node::{affinity, Node, NodeSpec};
use postgres::RunDatabase;

#[derive(Debug, Args, Clone)]
pub struct ClusterBench {
    /// A PostgreSQL server URL whose user may create databases (e.g.
    /// postgres://tether:tether@127.0.0.1:5432/postgres): each run creates
    /// a database of its own there and drops it after.
    #[arg(long)]
    database_url: String,
    /// The tether binary the nodes run (default: this one).
    #[arg(long)]
    tether: Option<PathBuf>,
    /// Failover rounds (kill -9 of an owner); 0 skips the phase.
    #[arg(long, default_value_t = 20)]
    kills: usize,
    /// Durable deliveries a second aimed at in the delivery phase, over
    /// every client of both nodes (5 durable events per turn per client).
    #[arg(long, default_value_t = 10_000.0)]
    rate: f64,
    /// Seconds of turns in the delivery phase; 0 skips the phase.
    #[arg(long, default_value_t = 10.0)]
    secs: f64,
    /// Sessions of the delivery phase, all owned by node 0.
    #[arg(long, default_value_t = 50)]
    sessions: usize,
    /// Clients per session attached through the owner (node 0).
    #[arg(long, default_value_t = 2)]
    owner_peers: usize,
    /// Clients per session attached through the follower (node 1).
    #[arg(long, default_value_t = 2)]
    follower_peers: usize,
    /// How long after the last turn was due the clients may still wait for
    /// deliveries, seconds.
    #[arg(long, default_value_t = 10.0)]
    drain_secs: f64,
    /// Every node's --node-lease-s.
    #[arg(long, default_value_t = 3.0)]
    lease_s: f64,
    /// Compute hosts per node.
    #[arg(long, default_value_t = 2)]
    hosts: usize,
    /// The CPU of each node (node 0 = the delivery phase's owner), pinned
    /// with taskset with its hosts; a node past the end of the list runs
    /// unpinned (`--node-cpus 0`: node 1 free on every core).
    #[arg(long, value_delimiter = ',', default_value = "0,1")]
    node_cpus: Vec<usize>,
    /// The CPU of this process (the clients); default: unpinned.
    #[arg(long)]
    generator_cpu: Option<usize>,
    /// Write every follower client's read of the delivery phase to this
    /// file, one line each: `session seq owner_us follower_us`.
    #[arg(long)]
    samples: Option<PathBuf>,
    /// Print the report as one JSON line instead of a table.
    #[arg(long)]
    json: bool,
}

pub fn run(b: ClusterBench) -> anyhow::Result<()> {
    if b.lease_s < 0.2 {
        bail!("--lease-s must be at least 0.2 (tether serve's floor)");
    }
    if b.node_cpus.len() > 2 {
        bail!("--node-cpus: two nodes, so at most two CPUs");
    }
    let body = {
        let b = b.clone();
        move || -> anyhow::Result<Value> {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?
                .block_on(measure(&b))
        }
    };
    // One thread for every client: the generator's CPU is one core's worth.
    let report = match b.generator_cpu {
        Some(cpu) => crate::harness::on_pinned_thread(cpu, body)?,
        None => std::thread::spawn(body)
            .join()
            .map_err(|_| anyhow::anyhow!("the generator thread panicked"))??,
    };
    if b.json {
        println!("{report}");
    } else {
        print!("{}", report::table(&report));
    }
    Ok(())
}

async fn measure(b: &ClusterBench) -> anyhow::Result<Value> {
    let db = RunDatabase::create(&b.database_url).await?;
    let tether = match &b.tether {
        Some(p) => p.clone(),
        None => crate::tether_exe()?,
    };
    let spec = NodeSpec {
        tether,
        database_url: db.url().to_owned(),
        lease_s: b.lease_s,
        hosts: b.hosts,
    };
    let lease = Duration::from_secs_f64(b.lease_s);
    let mut nodes = Vec::with_capacity(2);
    for i in 0..2 {
        nodes.push(Node::start(&spec, b.node_cpus.get(i).copied())?);
    }
    let pinning = json!({
        "node0": affinity(nodes[0].pid),
        "node1": affinity(nodes[1].pid),
        "postgres": db.postmaster.map(affinity),
        "generator": affinity(std::process::id()),
    });
    let delivery = if b.secs > 0.0 {
        let shape = delivery::Shape {
            sessions: b.sessions.max(1),
            owner_peers: b.owner_peers.max(1),
            follower_peers: b.follower_peers.max(1),
            rate: b.rate,
            secs: b.secs,
            drain: Duration::from_secs_f64(b.drain_secs),
        };
        delivery::run(&nodes, &db, shape, b.samples.as_deref()).await?
    } else {
        Value::Null
    };
    let failover = if b.kills > 0 {
        let rounds = failover::run(&mut nodes, &spec, b.kills, lease).await?;
        json!({
            "kills": rounds.len(),
            "node_lost_s": stats::durations_s(rounds.iter().map(|r| r.node_lost).collect()),
            "first_event_s": stats::durations_s(rounds.iter().map(|r| r.first_event).collect()),
            "rounds_s": rounds.iter().map(|r| json!([r.killed, stats::round3(r.node_lost.as_secs_f64())])).collect::<Vec<_>>(),
        })
    } else {
        Value::Null
    };
    // The nodes go before their database.
    drop(nodes);
    drop(db);
    Ok(json!({
        "scenario": "cluster",
        "nodes": 2,
        "lease_s": b.lease_s,
        "hosts_per_node": b.hosts,
        "pinning": pinning,
        "delivery": delivery,
        "failover": failover,
    }))
}
