//! A paused owner and rolling restarts under steady load (`tests/cluster.rs` has them
//! without): the load of `cluster/load.rs` (a client per session on every
//! node, prompts through every node) while
//!
//! - the owner is paused (SIGSTOP) for longer than the lease, twice: once
//!   at a random moment, once caught inside one of its writer's
//!   transactions (the test pauses and resumes it within milliseconds until
//!   PostgreSQL shows that connection inside a transaction, then keeps it
//!   paused). The fence stored with each event never decreases along seq,
//!   and nothing is written under the paused node's fence after the new
//!   owner's first write;
//! - the three nodes are stopped (SIGTERM) and started again one by one:
//!   nothing lost, nothing run twice, every turn one terminal event, and no
//!   `node_lost` (a clean stop hands its sessions over).
//!
//! Both end with `cluster/check.rs`'s invariants and a turn through every
//! node.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod chaos;
#[path = "cluster/check.rs"]
mod check;
mod common;
#[path = "cluster/mod.rs"]
mod harness;
#[path = "cluster/load.rs"]
mod load;

use std::time::Duration;

use harness::TestCluster;

const LEASE_MS: u64 = 1000;
const SESSIONS: usize = 3;

fn start() -> Option<TestCluster> {
    let server = tether_store::testing::postgres_server()?;
    let host = load::host_command();
    Some(TestCluster::start_on(
        &server,
        3,
        LEASE_MS,
        &["--host-command", &host],
    ))
}

/// The end of a run: a turn through every node, then the invariants; the
/// problems (with `extra` ones) fail the test.
async fn finish(
    cluster: &TestCluster,
    ids: &[String],
    load: load::Load,
    seed: u64,
) -> check::Tally {
    let bound = cluster.failover_bound();
    let shared = load.shared.clone();
    let seen = load.finish(bound * 10, seed, &cluster.nodes[0].url()).await;
    check::a_turn_through_each(cluster, ids, "the faults", seed).await;
    let (problems, tally) = check::check_sessions(cluster, ids, &shared, &seen).await;
    println!("seed {seed}: {}", check::summary(&shared, &tally));
    assert!(problems.is_empty(), "seed {seed}: {problems:#?}");
    tally
}

/// One query on the cluster's database.
async fn db(url: &str) -> sqlx::PgConnection {
    use sqlx::Connection;
    sqlx::PgConnection::connect(url)
        .await
        .expect("connect to the cluster's database")
}

/// The index of the node that owns `session` now, and its fence. Nodes'
/// rows are ordered by start, as the harness started them (this test
/// restarts none).
async fn owner(url: &str, session: &str) -> (usize, i64) {
    let mut c = db(url).await;
    let ids: Vec<(String,)> = sqlx::query_as("SELECT id FROM nodes ORDER BY started_at")
        .fetch_all(&mut c)
        .await
        .expect("nodes");
    let (node, fence): (Option<String>, i64) =
        sqlx::query_as("SELECT node_id, fence FROM session_owners WHERE session_id = $1")
            .bind(session)
            .fetch_one(&mut c)
            .await
            .expect("the session's owner");
    let node = node.expect("an owner");
    let i = ids
        .iter()
        .position(|(id,)| *id == node)
        .expect("the owner is one of the nodes");
    (i, fence)
}

/// Whether the writer of the process `pid` is inside a transaction now.
async fn writer_in_transaction(url: &str, pid: u32) -> bool {
    let mut c = db(url).await;
    let (n,): (i64,) = sqlx::query_as(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'tether-node-writer %' \
         AND application_name LIKE '% pid ' || $1 || ' on %' AND xact_start IS NOT NULL",
    )
    .bind(pid.to_string())
    .fetch_one(&mut c)
    .await
    .expect("pg_stat_activity");
    n > 0
}

/// Pauses node `i`: at once, or (`in_transaction`) at a moment its writer
/// is inside a transaction, found by pausing and resuming it within
/// milliseconds until PostgreSQL shows one (harmless: far below the lease).
async fn pause(cluster: &TestCluster, i: usize, in_transaction: bool) {
    let node = &cluster.nodes[i];
    let pid = node.pid().expect("a running node");
    node.signal("STOP");
    if !in_transaction {
        return;
    }
    for _ in 0..500 {
        if writer_in_transaction(cluster.database_url(), pid).await {
            println!("node {i} paused inside a writer's transaction");
            return;
        }
        node.signal("CONT");
        tokio::time::sleep(Duration::from_millis(3)).await;
        node.signal("STOP");
    }
    panic!("node {i}'s writer was never seen inside a transaction in 500 tries under load");
}

/// The owner paused (SIGSTOP) past its lease, under load.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_owner_under_load_writes_nothing_after_the_takeover() {
    let Some(cluster) = start() else {
        return;
    };
    let lease = cluster.lease();
    let bound = cluster.failover_bound();
    let (seed, _, ids, load) = load::start_on(&cluster, SESSIONS).await;
    let shared = load.shared.clone();
    load::progress(&shared, 10, bound, "before the pauses").await;

    // (paused node, the fence it held for ids[0])
    let mut paused = Vec::new();
    for in_transaction in [false, true] {
        let (i, fence) = owner(cluster.database_url(), &ids[0]).await;
        pause(&cluster, i, in_transaction).await;
        // Prompts keep arriving through the other nodes; one of them takes
        // the session over once the lease has run out.
        tokio::time::sleep(lease * 5 / 2).await;
        load::progress(&shared, 5, bound * 3, "while the owner is paused").await;
        cluster.nodes[i].signal("CONT");
        paused.push((i, fence));
        load::progress(&shared, 10, bound * 3, "after the owner came back").await;
        tokio::time::sleep(lease * 2).await;
    }
    finish(&cluster, &ids, load, seed).await;

    // Explicitly what a decreasing fence would also show: nothing under a
    // paused owner's fence after the first event of a later one.
    let rows = check::fences(cluster.database_url(), &ids[0]).await;
    for (i, fence) in paused {
        let takeover = rows.iter().find(|(_, f)| *f > fence).map(|(seq, _)| *seq);
        let takeover =
            takeover.unwrap_or_else(|| panic!("node {i}'s fence {fence} was never replaced"));
        let late: Vec<i64> = rows
            .iter()
            .filter(|(seq, f)| *f == fence && *seq > takeover)
            .map(|(seq, _)| *seq)
            .collect();
        assert!(
            late.is_empty(),
            "node {i} wrote seqs {late:?} under fence {fence} after the takeover at seq {takeover}"
        );
    }
}

/// Every node stopped (SIGTERM) and started again in turn, under load.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_under_load_loses_and_duplicates_nothing() {
    let Some(mut cluster) = start() else {
        return;
    };
    let lease = cluster.lease();
    let bound = cluster.failover_bound();
    let (seed, urls, ids, load) = load::start_on(&cluster, SESSIONS).await;
    let shared = load.shared.clone();
    load::progress(&shared, 10, bound, "before the restarts").await;

    for i in 0..cluster.nodes.len() {
        assert_eq!(
            cluster.nodes[i].terminate(),
            Some(0),
            "node {i}'s clean stop"
        );
        load::progress(&shared, 5, bound * 3, &format!("while node {i} is down")).await;
        cluster.nodes[i].restart();
        urls.lock().expect("urls")[i] = cluster.nodes[i].url();
        load::progress(&shared, 10, bound * 3, &format!("after node {i} is back")).await;
        tokio::time::sleep(lease).await;
    }
    let tally = finish(&cluster, &ids, load, seed).await;
    assert!(
        !tally.endings.contains_key("node_lost"),
        "seed {seed}: a clean stop is not a node's death: {:?}",
        tally.endings
    );
}
