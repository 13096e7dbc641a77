//! The cluster harness: one PostgreSQL database and several `tether serve
//! --cluster` nodes on it, each with its own `--data-dir`, listen port and
//! compute hosts (docs/ARCHITECTURE.md "Cluster").
//!
//! Cluster tests run one at a time (a process-wide lock: node leases are
//! short, and two clusters competing for the 2 cores would make a healthy
//! node look dead), each with an explicit `--node-lease-s`. Waits for
//! anything a lease governs are bounded at 3× the lease; nothing asserts on
//! timing.

// Each cluster test binary uses part of the harness.
#![allow(dead_code)]

pub mod clients;

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tether_store::testing::TestDatabase;

use crate::common::{tempdir, Backend, Gateway};

/// Held by a running cluster: one cluster at a time in this test binary.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Nodes on one database. Dropping it kills the nodes, then drops the
/// database.
pub struct TestCluster {
    /// Field order is drop order: the nodes go before their database.
    pub nodes: Vec<Gateway>,
    dirs: Vec<tempfile::TempDir>,
    db: TestDatabase,
    lease: Duration,
    _turn: MutexGuard<'static, ()>,
}

impl TestCluster {
    /// `n` nodes with a lease of `lease_ms` and one host each, or `None`
    /// (after one loud line, or a failure under `TETHER_REQUIRE_POSTGRES=1`)
    /// without a PostgreSQL server.
    pub fn start(n: usize, lease_ms: u64) -> Option<TestCluster> {
        TestCluster::start_with(n, lease_ms, &[])
    }

    /// As [`TestCluster::start`], every node with `extra` flags too.
    pub fn start_with(n: usize, lease_ms: u64, extra: &[&str]) -> Option<TestCluster> {
        let Some(Backend::Postgres(server)) = Backend::postgres() else {
            return None;
        };
        Some(TestCluster::start_on(&server, n, lease_ms, extra))
    }

    /// As [`TestCluster::start_with`], on a fresh database of the server at
    /// `server` (a test's own `PgServer`, which it may stop and restart;
    /// it must outlive the cluster).
    pub fn start_on(server: &str, n: usize, lease_ms: u64, extra: &[&str]) -> TestCluster {
        // A test that failed while holding it leaves the lock poisoned; the
        // next cluster is as good.
        let turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let db = TestDatabase::create_blocking(server);
        let mut cluster = TestCluster {
            nodes: Vec::with_capacity(n),
            dirs: Vec::with_capacity(n),
            db,
            lease: Duration::from_millis(lease_ms),
            _turn: turn,
        };
        let args = cluster.node_args();
        let args: Vec<&str> = args
            .iter()
            .map(String::as_str)
            .chain(extra.iter().copied())
            .collect();
        for _ in 0..n {
            let dir = tempdir();
            let node = Gateway::start(dir.path(), &args);
            cluster.dirs.push(dir);
            cluster.nodes.push(node);
        }
        cluster
    }

    /// The flags every node of this cluster runs with.
    fn node_args(&self) -> Vec<String> {
        [
            "--cluster",
            "--database-url",
            &self.db.url,
            "--node-lease-s",
            &self.lease.as_secs_f64().to_string(),
            "--hosts",
            "1",
        ]
        .map(String::from)
        .to_vec()
    }

    /// The lease the nodes run with.
    pub fn lease(&self) -> Duration {
        self.lease
    }

    /// What a test waits at most for anything a lease governs (a failover).
    pub fn failover_bound(&self) -> Duration {
        self.lease * 3
    }

    /// The database's URL (to run a single gateway on it, or to look).
    pub fn database_url(&self) -> &str {
        &self.db.url
    }

    /// The data directory of node `i`.
    pub fn data_dir(&self, i: usize) -> &std::path::Path {
        self.dirs[i].path()
    }
}
