//! The PostgreSQL server restarted under load, with
//! three nodes on it. A PostgreSQL outage is not a node death (docs/ARCHITECTURE.md
//! "Nodes and leases"): once the server is back every
//! node reconnects by itself and keeps its sessions, no turn ends
//! `node_lost`, nothing acknowledged is lost, and a submit refused during
//! the outage was refused with a retryable error and left nothing behind.
//!
//! The server is one of the test's own (`PgServer`), so it can be stopped:
//! once for a little less than the lease, once for longer than it (every
//! node's heartbeat is then older than the lease when the server returns,
//! and none may take another's sessions for that).
//!
//! Without PostgreSQL's binaries this skips with one loud line; with
//! `TETHER_REQUIRE_POSTGRES=1` it fails instead.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod chaos;
#[path = "cluster/check.rs"]
mod check;
mod common;
#[path = "cluster/mod.rs"]
mod harness;
#[path = "cluster/load.rs"]
mod load;

use harness::TestCluster;
use tether_store::testing::PgServer;

/// Longer than `tests/cluster.rs`'s: no node may look dead to another while
/// the server is up, on a loaded 2-core machine.
const LEASE_MS: u64 = 1500;
const SESSIONS: usize = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarting_postgres_under_load_loses_nothing_and_kills_no_node() {
    let Some(pg) = PgServer::start() else {
        return;
    };
    let host = load::host_command();
    let cluster = TestCluster::start_on(&pg.url(), 3, LEASE_MS, &["--host-command", &host]);
    let lease = cluster.lease();
    let bound = cluster.failover_bound();
    let seed = chaos::seed();
    let mut rng = chaos::Rng::new(seed);
    let urls = load::urls(&cluster.nodes);
    let ids = load::sessions(&urls, SESSIONS).await;
    let load = load::Load::start(&urls, &ids, &mut rng);
    let shared = load.shared.clone();
    load::progress_from(&shared, 0, 10, bound, "before any outage").await;

    // A little less than the lease, then longer than it.
    for down in [lease * 7 / 10, lease * 5 / 2] {
        let before = shared.accepted.lock().expect("accepted").len();
        pg.stop();
        tokio::time::sleep(down).await;
        pg.start_again();
        println!("PostgreSQL was down for {down:?}");
        let what = format!("after an outage of {down:?}");
        load::progress_from(&shared, before, 10, bound * 3, &what).await;
        // Steady load for a couple of leases before the next fault.
        tokio::time::sleep(lease * 2).await;
    }
    let seen = load.finish(bound * 10, seed, &cluster.nodes[0].url()).await;

    // Every node serves a new turn (through a follower it is forwarded).
    check::a_turn_through_each(&cluster, &ids, "the outages", seed).await;
    let (mut problems, tally) = check::check_sessions(&cluster, &ids, &shared, &seen).await;
    // No node died: no turn may end as if one had.
    if let Some(n) = tally.endings.get("node_lost") {
        problems.push(format!("{n} turns ended node_lost, but no node died"));
    }
    // Refused during the outage: clear and retryable (PROTOCOL.md 1.6):
    // 5072, or 5073 for a forward whose outcome the outage hid (read first).
    for r in shared.refused.lock().expect("refused").iter() {
        if r.code != 5072 && r.code != 5073 {
            problems.push(format!(
                "a submit through node {} was refused with {} ({}), not 5072 or 5073",
                r.node, r.code, r.message
            ));
        }
    }
    println!("seed {seed}: {}", check::summary(&shared, &tally));
    assert!(problems.is_empty(), "seed {seed}: {problems:#?}");
}
