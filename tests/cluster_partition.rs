//! A node cut off from PostgreSQL while it stays alive and keeps its
//! clients (docs/CLUSTER.md "A node cut off from PostgreSQL"): node 0
//! reaches the database through a proxy (`common/proxy.rs`) that the test
//! makes silent (connections held, nothing forwarded) or resets (every
//! connection reset, new ones too).
//!
//! The cut-off owner stands down before its lease can run out: its client
//! is closed (1012) before the other node's takeover, so no delta of the
//! taken-over turn and nothing of the prompt the store dropped reaches it;
//! its host stops the turn; `/readyz` answers 503. A client that saw more
//! through the other node is never told by the cut-off node that history is
//! lost. Once the link is back, node 0 serves the session again from the
//! store.
//!
//! Without `TETHER_TEST_POSTGRES` these tests skip with one loud line; with
//! `TETHER_REQUIRE_POSTGRES=1` they fail instead.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;
#[path = "cluster/mod.rs"]
mod harness;

use std::time::{Duration, Instant};

use common::http::http;
use common::proxy::Link;
use common::{all_events, seqs, submit, Client};
use harness::clients::{completes_of_turn, durable_through, fences, owner_and_follower};
use harness::TestCluster;
use serde_json::{json, Value};

/// Long enough that a loaded 2-core machine keeps every healthy node's
/// heartbeats within it; the cut-off node stands down at half of it.
const LEASE_MS: u64 = 2000;
/// The close code of a node that stood down (RFC 6455 "service restart").
const CLOSE_CUT_OFF: u16 = 1012;

/// Echo hosts that stream a long reply slowly: the turn still runs when
/// the link is cut, and for far longer than the test waits.
fn slow_host() -> String {
    format!(
        "{} host --engine echo --delay-ms 40",
        env!("CARGO_BIN_EXE_tether")
    )
}

/// `GET /readyz` of the node at `addr`: its status.
async fn readyz(addr: &str) -> u16 {
    http(addr, "GET", "/readyz", &[], b"").await.status
}

/// The turns node `c`'s node says its hosts are running.
async fn host_turns(c: &mut Client) -> u64 {
    let stats = c.ok("session.events.stats", json!({})).await;
    stats["hosts"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|h| h["active_turns"].as_u64().unwrap_or(0))
        .sum()
}

/// What the cut-off node's client received after the cut, and when its
/// connection was closed (with which code).
struct Told {
    frames: Vec<Value>,
    closed: Option<(u16, Instant)>,
}

async fn until_closed(mut a: Client, bound: Duration) -> Told {
    let started = Instant::now();
    let mut frames = Vec::new();
    while started.elapsed() < bound {
        match a.next_or_close().await {
            Ok(frame) => frames.push(frame),
            Err(code) => {
                return Told {
                    frames,
                    closed: Some((code, Instant::now())),
                }
            }
        }
    }
    Told {
        frames,
        closed: None,
    }
}

async fn the_cut_off_owner_stands_down(link: Link) {
    let host = slow_host();
    let Some(cluster) =
        TestCluster::start_behind_proxy(2, LEASE_MS, &["--host-command", host.as_str()])
    else {
        return;
    };
    let bound = cluster.failover_bound();
    // Node 0 owns the session; node 1 follows it for its client `b`.
    let (mut a, mut b, id) = owner_and_follower(&cluster).await;
    let words: String = (0..1000).map(|i| format!("w{i} ")).collect();
    let running = submit(&mut a, &id, &words).await;
    let queued = submit(&mut a, &id, "queued behind it").await;
    let mut seen = 0;
    let mut deltas = 0;
    while deltas < 3 {
        let e = a.next_event().await;
        seen = seen.max(e["seq"].as_u64().unwrap_or(0));
        if e["type"] == "message.delta" && e["turn_id"] == running {
            deltas += 1;
        }
    }
    let mut watcher = cluster.nodes[0].client().await;
    assert_eq!(host_turns(&mut watcher).await, 1, "the turn runs on node 0");
    assert_eq!(readyz(&cluster.nodes[0].addr).await, 200);

    cluster.link(link);
    let told = tokio::spawn(until_closed(a, bound));
    let node0 = cluster.nodes[0].addr.clone();
    let unready = tokio::spawn(async move {
        let started = Instant::now();
        while started.elapsed() < bound {
            if readyz(&node0).await == 503 {
                return Some(Instant::now());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        None
    });

    // Node 1 takes the session over: the running turn ends node_lost, the
    // queued one dequeued, and a new turn runs there.
    let ended = durable_through(&mut b, &queued).await;
    let took_over = Instant::now();
    assert_eq!(
        completes_of_turn(&ended, &running)[0]["payload"]["failure_reason"],
        "node_lost",
        "{ended:?}"
    );
    assert_eq!(
        completes_of_turn(&ended, &queued)[0]["payload"]["failure_reason"],
        "dequeued",
        "{ended:?}"
    );
    let after = submit(&mut b, &id, "after the takeover").await;
    let done = durable_through(&mut b, &after).await;
    let latest = seqs(&done).last().copied().expect("a seq");

    // The cut-off node's client was told before the takeover, by a close
    // that sends it to another node; nothing of the dropped prompt reached it.
    let told = told.await.expect("the client task");
    let (code, closed_at) = told.closed.unwrap_or_else(|| {
        panic!(
            "the cut-off node never closed its client ({} frames since the cut)",
            told.frames.len()
        )
    });
    assert_eq!(code, CLOSE_CUT_OFF);
    assert!(
        closed_at < took_over,
        "the cut-off node's client was closed only after the takeover"
    );
    assert!(
        !told.frames.iter().any(|f| {
            let e = &f["params"];
            e["turn_id"] == queued && e["type"] != "message.user"
        }),
        "the prompt the store dropped ran on the cut-off node: {:?}",
        told.frames
    );
    // Readiness followed the lease, before anyone could take over.
    let unready = unready.await.expect("the readyz task");
    assert!(
        unready.is_some_and(|at| at < took_over),
        "/readyz of the cut-off node stayed 200 until the takeover"
    );
    // Its host stopped the turn; it runs nothing of the session.
    assert_eq!(
        host_turns(&mut watcher).await,
        0,
        "node 0's host still runs"
    );

    // A client that saw `latest` through node 1 resumes through the cut-off
    // node: refused (retry), never told that what it saw is lost.
    let mut c = cluster.nodes[0].client().await;
    let r = c
        .call(
            "session.resume",
            json!({"session_id": id, "last_seen": latest, "omit_messages": true}),
        )
        .await;
    if let Some(result) = r.get("result") {
        assert_eq!(result["resync"], false, "{r}");
        assert_eq!(result["truncated"], false, "{r}");
    } else {
        assert_eq!(r["error"]["code"], 5072, "{r}");
    }

    // The link comes back: node 0 is ready again and serves the session
    // from the store, with exactly what its old client missed.
    cluster.link(Link::Normal);
    let started = Instant::now();
    while readyz(&cluster.nodes[0].addr).await != 200 {
        assert!(started.elapsed() < bound, "node 0 never ready again");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut back = cluster.nodes[0].client().await;
    let resumed = harness::clients::resume_from(&mut back, &id, seen, bound).await;
    assert_eq!(resumed["resync"], false, "{resumed}");
    assert_eq!(resumed["truncated"], false, "{resumed}");

    // One ending per turn, seqs 1..=n, the fence never decreasing.
    let events = all_events(&mut b, &id).await;
    for turn in [&running, &queued, &after] {
        assert_eq!(completes_of_turn(&events, turn).len(), 1, "{events:?}");
    }
    assert!(
        !events
            .iter()
            .any(|e| e["type"] == "message.start" && e["turn_id"] == queued),
        "{events:?}"
    );
    let all = seqs(&events);
    assert_eq!(all, (1..=all.len() as u64).collect::<Vec<_>>());
    let stored = fences(cluster.database_url(), &id).await;
    assert!(stored.windows(2).all(|w| w[0].1 <= w[1].1), "{stored:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_link_makes_the_owner_stand_down_before_the_takeover() {
    the_cut_off_owner_stands_down(Link::Silent).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_link_makes_the_owner_stand_down_before_the_takeover() {
    the_cut_off_owner_stands_down(Link::Reset).await;
}

/// One `prompt.submit` sent through the cut-off node, and its answer.
struct Sent {
    key: String,
    answer: Value,
}

/// `message.user`s of `events` with dedupe key `key`.
fn runs_of(events: &[Value], key: &str) -> usize {
    events
        .iter()
        .filter(|e| e["type"] == "message.user" && e["payload"]["dedupe_key"] == key)
        .count()
}

/// Prompts forwarded through a node whose link to the database is cut, in
/// a loop of cuts and heals: each is answered within the forward timeout;
/// every error that says it did not run (5072) did not run, none is 5072 or
/// -32603 when it may have run; an "outcome unknown" (5073) names its
/// forward and is resolved by reading the session, and a retry with the
/// same `dedupe_key` runs the prompt once across nodes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompts_forwarded_through_a_cut_link_say_what_happened() {
    let Some(cluster) = TestCluster::start_behind_proxy(2, LEASE_MS, &["--forward-timeout-s", "1"])
    else {
        return;
    };
    let bound = cluster.failover_bound();
    // Node 1 owns the session; node 0 forwards to it.
    let mut b = cluster.nodes[1].client().await;
    let id = common::session(&mut b).await;
    let mut a = cluster.nodes[0].client().await;
    a.ok(
        "session.resume",
        json!({"session_id": id, "last_seen": 1, "omit_messages": true}),
    )
    .await;
    let mut sent = Vec::new();
    // Silent, reset, silent, reset: a silent link holds every statement,
    // a reset one fails them, one may fail a forward's commit.
    for (round, link) in [Link::Silent, Link::Reset, Link::Silent, Link::Reset]
        .into_iter()
        .enumerate()
    {
        for (i, cut) in [false, true, true, true].into_iter().enumerate() {
            if cut {
                cluster.link(link);
            }
            let key = format!("r{round}p{i}");
            let answer = a
                .call(
                    "prompt.submit",
                    json!({"session_id": id, "text": key, "dedupe_key": key}),
                )
                .await;
            sent.push(Sent { key, answer });
        }
        cluster.link(Link::Normal);
        let started = Instant::now();
        while readyz(&cluster.nodes[0].addr).await != 200 {
            assert!(started.elapsed() < bound, "node 0 never ready again");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    let mut unknown = 0;
    for s in &sent {
        let code = s.answer["error"]["code"].as_i64();
        assert!(
            code != Some(-32603),
            "{}: an internal error for a forward: {}",
            s.key,
            s.answer
        );
        let events = all_events(&mut b, &id).await;
        let runs = runs_of(&events, &s.key);
        match code {
            None => assert_eq!(runs, 1, "{}: accepted: {}", s.key, s.answer),
            Some(5072) => assert_eq!(runs, 0, "{}: said not run: {}", s.key, s.answer),
            Some(5073) => {
                unknown += 1;
                assert!(
                    s.answer["error"]["data"]["forward_id"].is_string(),
                    "{}",
                    s.answer
                );
                assert!(runs <= 1, "{}: ran {runs} times", s.key);
                // Resolved: sent again with its key, it runs once at most.
                let again = b
                    .call(
                        "prompt.submit",
                        json!({"session_id": id, "text": s.key, "dedupe_key": s.key}),
                    )
                    .await;
                assert!(again.get("result").is_some(), "{again}");
                let events = all_events(&mut b, &id).await;
                assert_eq!(runs_of(&events, &s.key), 1, "{}: {}", s.key, s.answer);
            }
            Some(other) => panic!("{}: answered {other}: {}", s.key, s.answer),
        }
    }
    println!("{} prompts, {unknown} outcome unknown", sent.len());
}
