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

use crate::common::proxy::{Link, Proxy};
use crate::common::{tempdir, Backend, Gateway};

/// Held by a running cluster: one cluster at a time in this test binary.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Nodes on one database. Dropping it kills the nodes, then drops the
/// database.
pub struct TestCluster {
    /// Field order is drop order: the nodes go before their database.
    pub nodes: Vec<Gateway>,
    /// Node 0's link to the database, when it goes through a proxy.
    proxy: Option<Proxy>,
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
        TestCluster::start_nodes(server, n, lease_ms, extra, false)
    }

    /// As [`TestCluster::start_with`], node 0 reaching the database through
    /// a proxy that [`TestCluster::link`] switches (a partition: that node
    /// stays alive and keeps its clients).
    pub fn start_behind_proxy(n: usize, lease_ms: u64, extra: &[&str]) -> Option<TestCluster> {
        let Some(Backend::Postgres(server)) = Backend::postgres() else {
            return None;
        };
        Some(TestCluster::start_nodes(&server, n, lease_ms, extra, true))
    }

    /// Switches node 0's link to the database (a cluster started with
    /// [`TestCluster::start_behind_proxy`]).
    pub fn link(&self, link: Link) {
        self.proxy
            .as_ref()
            .expect("a cluster started behind a proxy")
            .set(link);
    }

    fn start_nodes(
        server: &str,
        n: usize,
        lease_ms: u64,
        extra: &[&str],
        proxied: bool,
    ) -> TestCluster {
        // A test that failed while holding it leaves the lock poisoned; the
        // next cluster is as good.
        let turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let db = TestDatabase::create_blocking(server);
        let (proxy, proxied_url) = if proxied {
            let (proxy, url) = Proxy::in_front_of(&db.url);
            (Some(proxy), Some(url))
        } else {
            (None, None)
        };
        let mut cluster = TestCluster {
            nodes: Vec::with_capacity(n),
            proxy,
            dirs: Vec::with_capacity(n),
            db,
            lease: Duration::from_millis(lease_ms),
            _turn: turn,
        };
        for i in 0..n {
            let url = match (&proxied_url, i) {
                (Some(url), 0) => url.clone(),
                _ => cluster.db.url.clone(),
            };
            let args = cluster.node_args(&url);
            let args: Vec<&str> = args
                .iter()
                .map(String::as_str)
                .chain(extra.iter().copied())
                .collect();
            let dir = tempdir();
            let node = Gateway::start(dir.path(), &args);
            cluster.dirs.push(dir);
            cluster.nodes.push(node);
        }
        cluster
    }

    /// The flags every node of this cluster runs with.
    fn node_args(&self, url: &str) -> Vec<String> {
        [
            "--cluster",
            "--database-url",
            url,
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
