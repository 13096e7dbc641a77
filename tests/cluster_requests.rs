//! Requests that change a session, sent through a node that only follows
//! it (they run on the owner; the follower forwards them through
//! PostgreSQL and relays the answer), black-box on real nodes
//! (`cluster/mod.rs`). And what a follower's peers count for on the owner:
//! `close_on_disconnect` closes a session only when the last peer of every
//! node has left.
//!
//! Without `TETHER_TEST_POSTGRES` these tests skip with one loud line; with
//! `TETHER_REQUIRE_POSTGRES=1` they fail instead.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;
#[path = "cluster/mod.rs"]
mod harness;

use common::{all_events, seqs, submit};
use harness::clients::{
    completes_of_turn, durable_through, durable_until, fences, owner_and_follower,
};
use harness::TestCluster;
use serde_json::{json, Value};

/// A lease short enough for a quick failover, long enough for heartbeats
/// of a node on a loaded 2-core machine to keep within it.
const LEASE_MS: u64 = 1000;

/// `session.interrupt` and `session.close` through a follower run on the
/// owner: the running turn ends `interrupted` once, the session closes, and
/// every node's clients see the same frames.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interrupt_and_close_through_a_follower_run_on_the_owner() {
    let Some(cluster) = TestCluster::start(2, LEASE_MS) else {
        return;
    };
    let (mut a, mut b, id) = owner_and_follower(&cluster).await;
    let running = submit(&mut b, &id, "/sleep 60000\nnever").await;
    // Interrupt once the turn runs on the owner's host.
    let mut on_b = Vec::new();
    loop {
        let e = b.next_event().await;
        let started = e["type"] == "message.start" && e["turn_id"] == running;
        if e.get("seq").is_some() {
            on_b.push(e);
        }
        if started {
            break;
        }
    }
    let r = b.ok("session.interrupt", json!({"session_id": id})).await;
    assert_eq!(r["status"], "interrupted", "{r}");
    let on_a = durable_through(&mut a, &running).await;
    on_b.extend(durable_through(&mut b, &running).await);
    assert_eq!(on_a, on_b);
    assert_eq!(common::complete(&on_a)["status"], "interrupted");
    assert_eq!(completes_of_turn(&on_a, &running).len(), 1);

    b.ok("session.close", json!({"session_id": id})).await;
    for c in [&mut a, &mut b] {
        loop {
            let e = c.next_event().await;
            if e["type"] == "session.closed" {
                break;
            }
        }
    }
    let all = all_events(&mut a, &id).await;
    let closed = all.iter().filter(|e| e["type"] == "session.closed").count();
    assert_eq!(closed, 1, "{all:?}");
    let all = seqs(&all);
    assert_eq!(all, (1..=all.len() as u64).collect::<Vec<_>>());
}

/// `session.compress`, a handoff's transitions and `session.branch`
/// through a follower: the compression and the handoff's announcements are
/// written once, by the owner (one fence along the whole session), and
/// every node's clients see the same frames; the branch is a new session
/// the follower's node creates from what is committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compress_handoff_and_branch_through_a_follower() {
    let Some(cluster) = TestCluster::start(2, LEASE_MS) else {
        return;
    };
    let (mut a, mut b, id) = owner_and_follower(&cluster).await;
    let turn = submit(&mut b, &id, "one two three").await;
    let mut on_a = durable_through(&mut a, &turn).await;
    let mut on_b = durable_through(&mut b, &turn).await;

    let r = b.ok("session.compress", json!({"session_id": id})).await;
    assert_eq!(r["status"], "compressed", "{r}");
    on_a.extend(durable_until(&mut a, |e| e["type"] == "session.compacted").await);
    on_b.extend(durable_until(&mut b, |e| e["type"] == "session.compacted").await);

    let r = b
        .ok(
            "handoff.request",
            json!({"session_id": id, "target": "phone"}),
        )
        .await;
    assert_eq!(r["state"], "pending", "{r}");
    for (c, seen) in [(&mut a, &mut on_a), (&mut b, &mut on_b)] {
        let got = durable_until(c, |e| e["type"] == "status.update").await;
        let last = got.last().expect("an announcement").clone();
        assert_eq!(
            last["payload"],
            json!({"kind": "handoff", "text": "pending"})
        );
        seen.extend(got);
    }
    assert_eq!(on_a, on_b, "every node's clients see the same frames");

    let stored = all_events(&mut a, &id).await;
    let all = seqs(&stored);
    assert_eq!(all, (1..=all.len() as u64).collect::<Vec<_>>(), "{all:?}");
    let compactions = stored
        .iter()
        .filter(|e| e["type"] == "session.compacted")
        .count();
    assert_eq!(compactions, 1, "{stored:?}");
    let announced = stored
        .iter()
        .filter(|e| e["type"] == "status.update" && e["payload"]["kind"] == "handoff")
        .count();
    assert_eq!(announced, 1, "{stored:?}");
    let f = fences(cluster.database_url(), &id).await;
    assert!(
        f.windows(2).all(|w| w[0].1 == w[1].1),
        "only the owner writes the session: {f:?}"
    );

    let branched = b.ok("session.branch", json!({"session_id": id})).await;
    assert_eq!(
        branched["upto_seq"].as_u64(),
        all.last().copied(),
        "{branched}"
    );
    let child = branched["session"]["session_id"]
        .as_str()
        .expect("the branch's id")
        .to_string();
    let resumed = a
        .ok(
            "session.resume",
            json!({"session_id": child, "last_seen": 0}),
        )
        .await;
    let messages = resumed["messages"].as_array().expect("messages");
    assert!(
        messages
            .first()
            .and_then(|m| m["text"].as_str())
            .is_some_and(|t| t.starts_with("Summary of")),
        "the branch starts from the owner's compaction: {resumed}"
    );
}

/// `close_on_disconnect` counts the peers of every node: the owner's last
/// client leaving does not close a session that has a client through
/// another node (whose prompts still run), and that client leaving too
/// closes it, once, on the owner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_on_disconnect_waits_for_the_last_peer_of_every_node() {
    let Some(cluster) = TestCluster::start(2, LEASE_MS) else {
        return;
    };
    let mut a = cluster.nodes[0].client().await;
    let id = common::session_with(&mut a, json!({"close_on_disconnect": true})).await;
    let mut b = cluster.nodes[1].client().await;
    b.ok(
        "session.resume",
        json!({"session_id": id, "last_seen": 1, "omit_messages": true}),
    )
    .await;
    // The owner has heard of b's peer once a count is stored and polled;
    // well past that, a leaves.
    tokio::time::sleep(cluster.lease() * 2).await;
    a.close().await;
    tokio::time::sleep(cluster.lease() * 2).await;
    let turn = submit(&mut b, &id, "still open").await;
    let done = durable_through(&mut b, &turn).await;
    assert_eq!(common::complete(&done)["text"], "still open", "{done:?}");

    b.close().await;
    let mut c = cluster.nodes[0].client().await;
    let started = std::time::Instant::now();
    loop {
        let r = c
            .call("session.resume", json!({"session_id": id, "attach": false}))
            .await;
        if r["error"]["code"] == 4002 {
            break;
        }
        assert!(
            started.elapsed() < cluster.failover_bound() * 3,
            "not closed after the last peer of every node left: {r}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let started = std::time::Instant::now();
    let events = loop {
        let events = all_events(&mut c, &id).await;
        if events.iter().any(|e| e["type"] == "session.closed") {
            break events;
        }
        assert!(started.elapsed() < cluster.failover_bound(), "{events:?}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    let closed: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "session.closed")
        .collect();
    assert_eq!(closed.len(), 1, "{events:?}");
    assert_eq!(closed[0]["payload"]["reason"], "disconnect");
}

/// Which node owns a session is visible everywhere: `session.list` and
/// `tether sessions` through any node, a follower's `session.resume`, and
/// `session.events.stats` of the owner (whose running turns they are).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_owner_node_is_named_in_listings_resume_and_stats() {
    let Some(cluster) = TestCluster::start(2, LEASE_MS) else {
        return;
    };
    let (mut a, mut b, id) = owner_and_follower(&cluster).await;
    let turn = submit(&mut a, &id, "/sleep 3000\nslow").await;
    let stats = a.ok("session.events.stats", json!({})).await;
    let owner = stats["node_id"]
        .as_str()
        .expect("a node's stats name it")
        .to_string();
    assert!(
        stats["active_turns"]
            .as_array()
            .is_some_and(|t| t.iter().any(|t| t["turn_id"] == turn.as_str())),
        "{stats}"
    );
    let other = b.ok("session.events.stats", json!({})).await;
    assert_ne!(other["node_id"].as_str(), Some(owner.as_str()), "{other}");
    assert_eq!(other["active_turns"], json!([]), "{other}");

    for c in [&mut a, &mut b] {
        let list = c.ok("session.list", json!({})).await;
        assert_eq!(list["sessions"][0]["session_id"], id.as_str(), "{list}");
        assert_eq!(list["sessions"][0]["owner_node"], owner.as_str(), "{list}");
    }
    let resumed = b
        .ok(
            "session.resume",
            json!({"session_id": id, "last_seen": 0, "attach": false, "omit_messages": true}),
        )
        .await;
    assert_eq!(
        resumed["session"]["owner_node"],
        owner.as_str(),
        "{resumed}"
    );

    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tether"))
        .args(["sessions", "--url", &cluster.nodes[1].url()])
        .output()
        .expect("run tether sessions");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        text.lines()
            .any(|l| l.starts_with(id.as_str()) && l.contains(owner.as_str())),
        "{text}"
    );
    durable_through(&mut a, &turn).await;
}

/// Deltas cross nodes: a client attached through a follower receives the
/// owner's streaming text (after the stored events it followed), and a
/// resume through the follower mid-turn reports the running turn with its
/// text so far.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_streams_the_owners_deltas_and_knows_the_running_turn() {
    let Some(cluster) = TestCluster::start(2, LEASE_MS) else {
        return;
    };
    let (mut a, mut b, id) = owner_and_follower(&cluster).await;
    // The owner sends deltas across once it has counted b's peer (the
    // registry's poll, every second).
    tokio::time::sleep(cluster.lease() * 2).await;
    let turn = submit(&mut a, &id, "/hang").await;
    let mut seen_user = false;
    let delta = loop {
        let e = b.next_event().await;
        if e["type"] == "message.user" && e["turn_id"] == turn.as_str() {
            seen_user = true;
        }
        if e["type"] == "message.delta" && e["turn_id"] == turn.as_str() {
            break e;
        }
    };
    assert!(
        seen_user,
        "the delta came before the stored events it follows"
    );
    assert_eq!(
        delta["payload"],
        json!({"text": "…", "offset": 0}),
        "{delta}"
    );
    assert!(delta.get("seq").is_none(), "{delta}");

    let mut c = cluster.nodes[1].client().await;
    let resumed = c
        .ok(
            "session.resume",
            json!({"session_id": id, "last_seen": 0, "omit_messages": true}),
        )
        .await;
    assert_eq!(
        resumed["active_turn"]["turn_id"],
        turn.as_str(),
        "{resumed}"
    );
    assert_eq!(resumed["active_turn"]["text"], "…", "{resumed}");

    b.ok("session.interrupt", json!({"session_id": id})).await;
    let done = durable_through(&mut b, &turn).await;
    assert_eq!(common::complete(&done)["status"], "interrupted", "{done:?}");
    let resumed = c
        .ok(
            "session.resume",
            json!({"session_id": id, "last_seen": 0, "omit_messages": true}),
        )
        .await;
    assert!(resumed["active_turn"].is_null(), "{resumed}");
}

/// SSE through a node that does not own the session: the stream carries
/// the owner's durable events by seq (and its deltas), and a stream opened
/// again on a third node with `Last-Event-ID` gets exactly what followed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_through_followers_streams_and_resumes_by_last_event_id() {
    let Some(cluster) = TestCluster::start(3, LEASE_MS) else {
        return;
    };
    let mut a = cluster.nodes[0].client().await;
    let id = common::session(&mut a).await;
    let path = format!("/v1/sessions/{id}/events?last_seen=0");
    let mut first = common::http::sse(&cluster.nodes[1].addr, &path, &[]).await;
    let turn = submit(&mut a, &id, "over sse").await;
    let on_a = durable_through(&mut a, &turn).await;
    let mut ids = Vec::new();
    loop {
        let e = first.event().await;
        let Some(seq) = e.id.as_deref() else {
            continue;
        };
        ids.push(seq.parse::<u64>().expect("a seq"));
        if e.event.as_deref() == Some("message.complete") {
            assert_eq!(e.params()["payload"]["text"], "over sse", "{e:?}");
            break;
        }
    }
    assert_eq!(ids, (1..=ids.len() as u64).collect::<Vec<_>>(), "{ids:?}");
    assert_eq!(
        ids.last().copied(),
        on_a.last().and_then(|e| e["seq"].as_u64())
    );

    // The stream drops; events come meanwhile; it resumes on node 2.
    drop(first);
    let seen = *ids.last().expect("events");
    let next = submit(&mut a, &id, "while away").await;
    let missed = durable_through(&mut a, &next).await;
    let mut again = common::http::sse(
        &cluster.nodes[2].addr,
        &format!("/v1/sessions/{id}/events"),
        &[("Last-Event-ID", &seen.to_string())],
    )
    .await;
    let want: Vec<u64> = missed
        .iter()
        .filter_map(|e| e["seq"].as_u64())
        .filter(|s| *s > seen)
        .collect();
    let mut got = Vec::new();
    while got.len() < want.len() {
        let e = again.event().await;
        if let Some(seq) = e.id.as_deref() {
            got.push(seq.parse::<u64>().expect("a seq"));
        }
    }
    assert_eq!(got, want, "exactly what followed {seen}");
}
