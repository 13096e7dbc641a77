//! Retention on a cluster, black-box: two `tether serve --cluster` nodes on
//! one PostgreSQL, each with the same short retention periods and a sweep
//! every fifth of a second.
//!
//! - The sweep runs on one node at a time, under the retention lease (an
//!   advisory lock in the database): while something else holds it, both
//!   nodes try, say in their logs that they left the sweep to another node,
//!   and nothing is erased, closed or trimmed; once it is free, the nodes'
//!   logged lease periods ("retention lease taken" … "released", JSON logs)
//!   never overlap.
//! - Its effects are the same through both nodes: a closed session erased
//!   (4001 through each), a parked one closed (`session.closed` the last
//!   event through each), a session's old events trimmed (the same
//!   `truncated` answer and the same transcript through each, including
//!   the node that only follows it for a peer attached there).
//!
//! Without `TETHER_TEST_POSTGRES` the test skips with one loud line; with
//! `TETHER_REQUIRE_POSTGRES=1` it fails instead.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{session_with, submit, tempdir, turn_events, Backend, Client};
use serde_json::{json, Value};
use sqlx::Connection;
use tether_store::testing::TestDatabase;

/// The retention lease's advisory lock key (`tether` in ASCII, then 2),
/// documented in docs/CLUSTER.md for operators who look at `pg_locks`.
const LEASE_KEY: i64 = 0x7465_7468_6572_0002;
/// How long the test waits for a sweep to have done something.
const SWEEP_WAIT: Duration = Duration::from_secs(20);

/// A node whose JSON logs go to a file, killed when dropped.
struct Node {
    child: Child,
    addr: String,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Node {
    fn start(url: &str, config: &Path) -> Node {
        let dir = tempdir();
        let log = dir.path().join("stderr.log");
        let stderr = std::fs::File::create(&log).expect("log file");
        let mut child = Command::new(env!("CARGO_BIN_EXE_tether"))
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir.path())
            .args(["--cluster", "--database-url", url, "--node-lease-s", "2"])
            .args(["--hosts", "1", "--orphan-grace-s", "0"])
            .arg("--config")
            .arg(config)
            .args(["--retain-closed-s", "1", "--retain-parked-s", "1"])
            .args(["--retain-max-events", "2", "--retention-interval-s", "0.2"])
            .args(["--log-format", "json"])
            .env("RUST_LOG", "warn,tether_actors::retention=debug")
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("start tether");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("read start-up line");
        let addr = line
            .trim()
            .strip_prefix("tether listening on http://")
            .unwrap_or_else(|| panic!("unexpected start-up line {line:?}"))
            .to_string();
        Node {
            child,
            addr,
            log,
            _dir: dir,
        }
    }

    async fn client(&self) -> Client {
        Client::connect(&format!("ws://{}/ws", self.addr)).await
    }

    /// The retention module's log lines so far: `(timestamp, message)`.
    fn retention_log(&self) -> Vec<(Stamp, String)> {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        text.lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["target"] == "tether_actors::retention")
            .map(|v| {
                (
                    Stamp::parse(v["timestamp"].as_str().expect("timestamp")),
                    v["message"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect()
    }

    /// How many lines of the retention log say `message`.
    fn said(&self, message: &str) -> usize {
        self.retention_log()
            .iter()
            .filter(|(_, m)| m == message)
            .count()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A log line's RFC 3339 UTC timestamp, comparable: `(date, nanoseconds
/// of the day)`. Both nodes run on this machine, so on one clock.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Stamp(String, u64);

impl Stamp {
    fn parse(s: &str) -> Stamp {
        let (date, time) = s.split_once('T').expect("a date and a time");
        let time = time.trim_end_matches('Z');
        let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
        let mut parts = hms.split(':').map(|p| p.parse::<u64>().expect("a number"));
        let (h, m, sec) = (
            parts.next().expect("hours"),
            parts.next().expect("minutes"),
            parts.next().expect("seconds"),
        );
        let nanos: u64 = format!("{frac:0<9}")[..9].parse().expect("a fraction");
        Stamp(
            date.to_string(),
            ((h * 60 + m) * 60 + sec) * 1_000_000_000 + nanos,
        )
    }
}

/// The periods during which `node` held the retention lease, by its log.
fn lease_periods(node: &Node) -> Vec<(Stamp, Stamp)> {
    let mut periods = Vec::new();
    let mut taken = None;
    for (at, message) in node.retention_log() {
        match message.as_str() {
            "retention lease taken" => {
                assert!(taken.is_none(), "taken twice without a release");
                taken = Some(at);
            }
            "retention lease released" => {
                let from = taken.take().expect("released without being taken");
                periods.push((from, at));
            }
            _ => {}
        }
    }
    periods
}

/// The session's status as a listing through `c` tells it, or 4001 if it
/// is not listed.
async fn status(c: &mut Client, id: &str, profile: &str) -> Value {
    let listed = c
        .ok(
            "session.list",
            json!({"profile": profile, "include_closed": true, "limit": 500}),
        )
        .await;
    listed["sessions"]
        .as_array()
        .expect("sessions")
        .iter()
        .find(|s| s["session_id"] == id)
        .map_or(json!(4001), |s| s["status"].clone())
}

/// Evaluates `probe` (an `Option`) every 100 ms until it is `Some`, or
/// fails after SWEEP_WAIT saying `what`.
macro_rules! eventually {
    ($what:expr, $probe:expr) => {{
        let started = Instant::now();
        loop {
            if let Some(t) = $probe {
                break t;
            }
            assert!(started.elapsed() < SWEEP_WAIT, "never happened: {}", $what);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }};
}

/// `session.events.since` from 0 through `c`.
async fn since_zero(c: &mut Client, id: &str) -> Value {
    c.ok(
        "session.events.since",
        json!({"session_id": id, "last_seen": 0}),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_node_sweeps_at_a_time_and_both_see_its_effects() {
    let Some(Backend::Postgres(server)) = Backend::postgres() else {
        return;
    };
    let db = TestDatabase::create_blocking(&server);
    // The lease is held elsewhere first (here, standing in for a node
    // that sweeps): neither node may sweep until it is given back.
    let mut holder = sqlx::PgConnection::connect(&db.url).await.expect("connect");
    let held: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
        .bind(LEASE_KEY)
        .fetch_one(&mut holder)
        .await
        .expect("take the lease");
    assert!(held);
    // Where an operator sees it (docs/CLUSTER.md).
    let shown: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM pg_locks WHERE locktype = 'advisory' \
         AND classid = 1952805992 AND objid = 1701969922 AND pid = pg_backend_pid()",
    )
    .fetch_one(&mut holder)
    .await
    .expect("read pg_locks");
    assert_eq!(shown, 1);

    let dir = tempdir();
    let config = dir.path().join("tether.toml");
    // Profile `keep` keeps closed sessions an hour: its parked session,
    // once closed by the sweep, stays to be looked at.
    std::fs::write(&config, "[profiles.keep.retention]\nclosed_s = 3600\n").expect("config");
    let nodes = [Node::start(&db.url, &config), Node::start(&db.url, &config)];
    let mut a = nodes[0].client().await;
    let mut b = nodes[1].client().await;

    // A closed session, to be erased.
    let closed = session_with(&mut a, json!({"title": "closed"})).await;
    let t = submit(&mut a, &closed, "soon gone").await;
    turn_events(&mut a, &t).await;
    a.ok("session.close", json!({"session_id": closed})).await;
    // A parked session of `keep`, to be closed.
    let parked = session_with(&mut b, json!({"title": "parked", "profile": "keep"})).await;
    b.ok(
        "session.detach",
        json!({"session_id": parked, "profile": "keep"}),
    )
    .await;
    // A session owned by node 0 with a peer on node 1, whose events
    // before its compaction are to be trimmed.
    let mut a = nodes[0].client().await;
    let long = session_with(&mut a, json!({"title": "long"})).await;
    for i in 0..3 {
        let t = submit(&mut a, &long, &format!("before {i}")).await;
        turn_events(&mut a, &t).await;
    }
    let r = a.ok("session.compress", json!({"session_id": long})).await;
    assert_eq!(r["status"], "compressed", "{r}");
    let t = submit(&mut a, &long, "after").await;
    turn_events(&mut a, &t).await;
    let mut follower = nodes[1].client().await;
    follower
        .ok(
            "session.resume",
            json!({"session_id": long, "last_seen": 0, "omit_messages": true}),
        )
        .await;
    let before = a
        .ok(
            "session.resume",
            json!({"session_id": long, "attach": false}),
        )
        .await;

    // Parked, and then every rule's period over: each node tries a sweep
    // (twice, so at least once with every rule due) and leaves it.
    eventually!(
        "the session parks",
        (status(&mut b, &parked, "keep").await == "parked").then_some(())
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let skips: Vec<usize> = nodes
        .iter()
        .map(|n| n.said("retention sweep left to another node"))
        .collect();
    eventually!(
        "both nodes leave two more sweeps to the holder",
        nodes
            .iter()
            .zip(&skips)
            .all(|(n, s)| n.said("retention sweep left to another node") >= s + 2)
            .then_some(())
    );
    for node in &nodes {
        assert_eq!(node.said("retention lease taken"), 0, "{:?}", node.log);
        let mut c = node.client().await;
        assert_eq!(status(&mut c, &closed, "default").await, "closed");
        assert_eq!(status(&mut c, &parked, "keep").await, "parked");
        let since = since_zero(&mut c, &long).await;
        assert_ne!(since["truncated"], true, "{since}");
    }

    // Given back: the nodes sweep, one at a time.
    let _: bool = sqlx::query_scalar("SELECT pg_advisory_unlock($1)")
        .bind(LEASE_KEY)
        .fetch_one(&mut holder)
        .await
        .expect("give the lease back");
    for (i, node) in nodes.iter().enumerate() {
        let mut c = node.client().await;
        eventually!(
            format!("node {i}: the closed session is erased"),
            (status(&mut c, &closed, "default").await == 4001).then_some(())
        );
        let e = c.err("session.resume", json!({"session_id": closed})).await;
        assert_eq!(e["code"], 4001, "{e}");
        eventually!(
            format!("node {i}: the parked session is closed"),
            (status(&mut c, &parked, "keep").await == "closed").then_some(())
        );
        let events = c
            .ok(
                "session.events.since",
                json!({"session_id": parked, "profile": "keep", "last_seen": 0}),
            )
            .await;
        let last = events["events"]
            .as_array()
            .and_then(|e| e.last())
            .cloned()
            .unwrap_or_default();
        assert_eq!(last["type"], "session.closed", "node {i}: {events}");
    }

    // The trim, the same through the owner and the follower.
    let mut answers = Vec::new();
    for (i, node) in nodes.iter().enumerate() {
        let mut c = node.client().await;
        let since = eventually!(format!("node {i}: the trim"), {
            let since = since_zero(&mut c, &long).await;
            (since["truncated"] == true).then_some(since)
        });
        let events = since["events"].as_array().expect("events");
        assert_eq!(events[0]["type"], "session.compacted", "node {i}: {since}");
        let after = c
            .ok(
                "session.resume",
                json!({"session_id": long, "attach": false, "last_seen": 0}),
            )
            .await;
        assert_eq!(after["truncated"], true, "node {i}: {after}");
        assert_eq!(after["messages"], before["messages"], "node {i}");
        answers.push(since);
    }
    assert_eq!(answers[0], answers[1], "both nodes answer the same");

    // One at a time: each node sweeps in its turn (the lease is free
    // between sweeps), and no two nodes' lease periods overlap.
    eventually!(
        "both nodes have swept",
        nodes
            .iter()
            .all(|n| n.said("retention lease released") > 0)
            .then_some(())
    );
    let periods: Vec<Vec<(Stamp, Stamp)>> = nodes.iter().map(lease_periods).collect();
    for p in &periods[0] {
        for q in &periods[1] {
            assert!(
                p.1 < q.0 || q.1 < p.0,
                "lease periods overlap: node 0 {p:?}, node 1 {q:?}"
            );
        }
    }
    drop(holder);
}
