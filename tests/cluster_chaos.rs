//! Process chaos across a cluster, in the style of
//! `tests/chaos_process.rs`. Three nodes on one PostgreSQL under the steady
//! load of `cluster/load.rs` (a client per session on every node, prompts
//! through every node) while the test `kill -9`s, at random, a whole node
//! (started again on its data dir a moment later, under a new node id) or
//! one compute host of a node, or cuts node 0 off from PostgreSQL (it
//! reaches the database through a proxy, `common/proxy.rs`, made silent or
//! resetting for up to two leases: the node stays alive with its clients
//! and stands down, docs/CLUSTER.md). Then `cluster/check.rs`'s invariants: per
//! session seqs gap-free and never given twice, every accepted turn one
//! `message.complete`, every event a client saw stored identically, the
//! fence never decreasing along seq; a new turn works through every node;
//! no host outlives its node.
//!
//! `TETHER_CHAOS_SEED` (printed) replays a schedule; the run lasts
//! `TETHER_CHAOS_SECS` (default 20), or `TETHER_CHAOS_ROUNDS` faults when
//! that is set. The long run is recorded in docs/RELIABILITY.md.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod chaos;
#[path = "cluster/check.rs"]
mod check;
mod common;
#[path = "cluster/mod.rs"]
mod harness;
#[path = "cluster/load.rs"]
mod load;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use chaos::ws::Ws;
use chaos::Rng;
use common::proxy::Link;
use harness::TestCluster;
use serde_json::{json, Value};

const LEASE_MS: u64 = 1000;
const NODES: usize = 3;
const SESSIONS: usize = 4;

/// When the monkey stops: after so many faults, or at a time.
enum Until {
    Rounds(u64),
    Time(tokio::time::Instant),
}

fn until() -> Until {
    match std::env::var("TETHER_CHAOS_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
    {
        Some(rounds) => Until::Rounds(rounds),
        None => Until::Time(tokio::time::Instant::now() + chaos::duration(20)),
    }
}

/// The host pids node `url` reports (none if it cannot answer now).
async fn host_pids(url: &str) -> Vec<u32> {
    let Some(mut ws) = Ws::connect(url).await else {
        return Vec::new();
    };
    let Ok(stats) = ws.call("session.events.stats", json!({})).await else {
        return Vec::new();
    };
    stats["hosts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|h: &Value| h["pid"].as_u64().map(|p| p as u32))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_of_nodes_and_hosts_loses_nothing() {
    let host = load::host_command();
    let Some(mut cluster) = TestCluster::start_behind_proxy(
        NODES,
        LEASE_MS,
        &["--host-command", &host, "--host-restarts", "1000"],
    ) else {
        return;
    };
    let bound = cluster.failover_bound();
    let seed = chaos::seed();
    println!("cluster chaos seed {seed}");
    let mut rng = Rng::new(seed);
    let urls = load::urls(&cluster.nodes);
    let ids = load::sessions(&urls, SESSIONS).await;
    let load = load::Load::start(&urls, &ids, &mut rng);
    let shared = load.shared.clone();

    let stop = until();
    let mut kills: BTreeMap<&str, u32> = BTreeMap::new();
    let mut pids_seen = BTreeSet::new();
    let mut rounds = 0u64;
    loop {
        match stop {
            Until::Rounds(n) if rounds >= n => break,
            Until::Time(t) if tokio::time::Instant::now() >= t => break,
            _ => {}
        }
        rounds += 1;
        tokio::time::sleep(Duration::from_millis(500 + rng.below(1000))).await;
        let victim = rng.below(NODES as u64) as usize;
        let pids = host_pids(&cluster.nodes[victim].url()).await;
        pids_seen.extend(pids.iter().copied());
        let fault = rng.below(6);
        if victim == 0 && fault >= 4 {
            // A partition: node 0 stays up with its clients, its link to
            // the database silent or resetting; it stands down within half
            // a lease, another node takes its sessions after the lease.
            let (link, name) = if rng.below(2) == 0 {
                (Link::Silent, "silent link")
            } else {
                (Link::Reset, "reset link")
            };
            cluster.link(link);
            tokio::time::sleep(Duration::from_millis(rng.below(2 * LEASE_MS))).await;
            cluster.link(Link::Normal);
            *kills.entry(name).or_default() += 1;
        } else if fault < 2 {
            // The whole node: its sessions move after the lease; it comes
            // back (a new node id) after up to two leases.
            cluster.nodes[victim].kill();
            tokio::time::sleep(Duration::from_millis(rng.below(2 * LEASE_MS))).await;
            cluster.nodes[victim].restart();
            urls.lock().expect("urls")[victim] = cluster.nodes[victim].url();
            *kills.entry("node").or_default() += 1;
        } else if let Some(pid) = pids.get(rng.below(pids.len() as u64 + 1) as usize) {
            let _ = std::process::Command::new("kill")
                .args(["-9", &pid.to_string()])
                .status();
            *kills.entry("host").or_default() += 1;
        }
    }
    // Clients wait for their last turn; one that never ends fails here.
    let seen = load.finish(bound * 20, seed, &cluster.nodes[0].url()).await;

    for node in &cluster.nodes {
        pids_seen.extend(host_pids(&node.url()).await);
    }
    check::a_turn_through_each(&cluster, &ids, "the chaos", seed).await;
    let (problems, tally) = check::check_sessions(&cluster, &ids, &shared, &seen).await;
    println!(
        "cluster chaos seed {seed}: {rounds} rounds, kills {kills:?}; {}",
        check::summary(&shared, &tally)
    );
    assert!(problems.is_empty(), "seed {seed}: {problems:#?}");

    // No compute host outlives its node (a killed node's hosts exit on
    // their stdin's end, or are killed by its successor).
    for node in &mut cluster.nodes {
        assert_eq!(
            node.terminate(),
            Some(0),
            "seed {seed}: a node's clean stop"
        );
    }
    let pids: Vec<u32> = pids_seen.into_iter().collect();
    chaos::wait_gone(&pids, &format!("seed {seed}: hosts left running")).await;
}
