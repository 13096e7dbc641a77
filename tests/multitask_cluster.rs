//! `prompt.submit`'s `multitask` and `dedupe_key` across cluster nodes,
//! black-box on real `tether serve --cluster` processes (`cluster/mod.rs`):
//! a prompt sent through a follower runs its policy on the owner, a
//! `dedupe_key` seen on one node answers on another, a node that takes a
//! dead owner's session over still knows the recent keys, and a prompt
//! that must wait for the owner's history (`replaces`, a `dedupe_key`)
//! waits for it there when forwarded, as a local one does.
//!
//! Without `TETHER_TEST_POSTGRES` these tests skip with one loud line; with
//! `TETHER_REQUIRE_POSTGRES=1` they fail instead.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;
#[path = "cluster/mod.rs"]
mod harness;

use std::time::{Duration, Instant};

use common::{all_events, Client};
use harness::clients::{completes_of_turn, owner_and_follower, resume_from};
use harness::TestCluster;
use serde_json::{json, Value};

/// A lease short enough for a quick failover, long enough for heartbeats
/// of a node on a loaded 2-core machine to keep within it.
const LEASE_MS: u64 = 1000;

/// `prompt.submit`, retried while the session is between owners (5072)
/// for up to `bound`. (A prompt that waits for the owner's history waits
/// there: it is never 4009 for that.)
async fn submit_retrying(c: &mut Client, params: Value, bound: Duration) -> Value {
    let started = Instant::now();
    loop {
        let r = c.call("prompt.submit", params.clone()).await;
        if r.get("result").is_some() {
            return r["result"].clone();
        }
        let code = r["error"]["code"].as_i64().unwrap_or_default();
        assert!(code == 5072 && started.elapsed() < bound, "{r}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits for the `message.complete` of `turn` on `c`.
async fn ending(c: &mut Client, turn: &str) -> Value {
    loop {
        let e = c.next_event().await;
        if e["type"] == "message.complete" && e["turn_id"] == turn {
            return e["payload"].clone();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dedupe_key_and_a_rollback_hold_across_nodes_and_a_takeover() {
    let Some(mut cluster) = TestCluster::start(2, LEASE_MS) else {
        return;
    };
    let bound = cluster.failover_bound();
    let (mut a, mut b, id) = owner_and_follower(&cluster).await;
    let keyed = |text: &str| json!({"session_id": id, "text": text, "dedupe_key": "once"});

    // A prompt through the owner, its retry through the follower.
    let first = a.ok("prompt.submit", keyed("kept")).await;
    let turn = first["turn_id"].as_str().expect("turn_id").to_string();
    let again = submit_retrying(&mut b, keyed("kept"), bound).await;
    assert_eq!(again["turn_id"], turn.as_str(), "{again}");
    assert_eq!(again["duplicate"], true);
    assert_eq!(ending(&mut a, &turn).await["text"], "kept");

    // A rollback sent through the follower stops the owner's turn.
    let long = a
        .ok(
            "prompt.submit",
            json!({"session_id": id, "text": "/sleep 600000\nnever"}),
        )
        .await;
    let long = long["turn_id"].as_str().expect("turn_id").to_string();
    loop {
        let e = b.next_event().await;
        if e["type"] == "message.start" && e["turn_id"] == long {
            break;
        }
    }
    let r = submit_retrying(
        &mut b,
        json!({"session_id": id, "text": "/history", "multitask": "rollback"}),
        bound,
    )
    .await;
    let rolled = r["turn_id"].as_str().expect("turn_id").to_string();
    let reply = ending(&mut b, &rolled).await;
    let history: Vec<(String, String)> =
        serde_json::from_str(reply["text"].as_str().expect("text")).expect("a history");
    let pair = |r: &str, t: &str| (r.to_string(), t.to_string());
    assert_eq!(history, [pair("user", "kept"), pair("assistant", "kept")]);

    // The owner dies; the node that takes the session over still knows
    // the key (from the stored prompt) and starts nothing new.
    let seen = all_events(&mut b, &id).await.len() as u64;
    cluster.nodes[0].kill();
    resume_from(&mut b, &id, seen, bound).await;
    let retry = submit_retrying(&mut b, keyed("kept"), bound).await;
    assert_eq!(retry["turn_id"], turn.as_str(), "{retry}");
    assert_eq!(retry["duplicate"], true);

    let events = all_events(&mut b, &id).await;
    let users: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "message.user")
        .collect();
    assert_eq!(users.len(), 3, "{events:?}");
    for user in users {
        let turn = user["turn_id"].as_str().expect("turn_id");
        assert_eq!(completes_of_turn(&events, turn).len(), 1, "{events:?}");
    }
    let stopped = completes_of_turn(&events, &long)[0]["payload"].clone();
    assert_eq!(stopped["failure_reason"], "superseded", "{stopped}");
}

/// The session's status as a listing through `c` tells it (a listing
/// brings nothing live).
async fn listed_status(c: &mut Client, id: &str) -> Value {
    let listed = c
        .ok(
            "session.list",
            json!({"include_closed": true, "limit": 500}),
        )
        .await;
    listed["sessions"]
        .as_array()
        .expect("sessions")
        .iter()
        .find(|s| s["session_id"] == id)
        .map_or(Value::Null, |s| s["status"].clone())
}

/// A session with one finished turn (returned), parked, then brought back
/// live on node 0 by a resume that does not read its history, and
/// followed from node 1: its owner holds it without its history in
/// memory. The clients on node 0 and node 1, attached.
async fn owned_without_history(cluster: &TestCluster) -> (Client, Client, String, String) {
    let mut first = cluster.nodes[0].client().await;
    let id = common::session(&mut first).await;
    let turn = common::submit(&mut first, &id, "first").await;
    common::turn_events(&mut first, &turn).await;
    first.ok("session.detach", json!({"session_id": id})).await;
    let started = Instant::now();
    while listed_status(&mut first, &id).await != "parked" {
        assert!(started.elapsed() < cluster.failover_bound(), "never parked");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut a = cluster.nodes[0].client().await;
    a.ok(
        "session.resume",
        json!({"session_id": id, "last_seen": 0, "omit_messages": true}),
    )
    .await;
    let mut b = cluster.nodes[1].client().await;
    b.ok(
        "session.resume",
        json!({"session_id": id, "last_seen": 0, "omit_messages": true}),
    )
    .await;
    (a, b, id, turn)
}

/// A prompt that must wait for the session's history (one with a
/// `dedupe_key`, one that `replaces` a turn), sent through a follower
/// while the owner has not loaded that history, waits for it there as a
/// local one does, and is answered as on the owner: at once, not 4009.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forwarded_prompt_waits_for_the_owners_history() {
    let Some(cluster) = TestCluster::start_with(2, LEASE_MS, &["--orphan-grace-s", "0"]) else {
        return;
    };
    // A replacing prompt: the new turn's history leaves the replaced
    // turn out, as on the owner.
    let (_a, mut b, id, replaced) = owned_without_history(&cluster).await;
    let r = b
        .ok(
            "prompt.submit",
            json!({"session_id": id, "text": "/history", "replaces": replaced}),
        )
        .await;
    let turn = r["turn_id"].as_str().expect("turn_id").to_string();
    let reply = ending(&mut b, &turn).await;
    let history: Vec<(String, String)> =
        serde_json::from_str(reply["text"].as_str().expect("text")).expect("a history");
    assert!(
        history.is_empty(),
        "the replaced turn is left out: {history:?}"
    );
    let events = all_events(&mut b, &id).await;
    let user = events
        .iter()
        .find(|e| e["type"] == "message.user" && e["turn_id"] == turn.as_str())
        .expect("the new message.user");
    assert_eq!(user["payload"]["replaces"], replaced.as_str(), "{user}");

    // A dedupe_key: accepted, and known from then on, on either node.
    let (mut a, mut b, id, _) = owned_without_history(&cluster).await;
    let keyed = json!({"session_id": id, "text": "keyed", "dedupe_key": "k1"});
    let r = b.ok("prompt.submit", keyed.clone()).await;
    let turn = r["turn_id"].as_str().expect("turn_id").to_string();
    assert_ne!(r["duplicate"], true, "{r}");
    assert_eq!(ending(&mut b, &turn).await["text"], "keyed");
    let again = a.ok("prompt.submit", keyed).await;
    assert_eq!(again["turn_id"], turn.as_str(), "{again}");
    assert_eq!(again["duplicate"], true, "{again}");
    let events = all_events(&mut a, &id).await;
    assert_eq!(completes_of_turn(&events, &turn).len(), 1, "{events:?}");
}
