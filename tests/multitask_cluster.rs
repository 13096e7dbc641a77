//! `prompt.submit`'s `multitask` and `dedupe_key` across cluster nodes,
//! black-box on real `tether serve --cluster` processes (`cluster/mod.rs`):
//! a prompt sent through a follower runs its policy on the owner, a
//! `dedupe_key` seen on one node answers on another, and a node that
//! takes a dead owner's session over still knows the recent keys.
//!
//! Without `TETHER_TEST_POSTGRES` these tests skip with one loud line; with
//! `TETHER_REQUIRE_POSTGRES=1` they fail instead.

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

/// `prompt.submit`, retried while the session is between owners or its
/// owner loads its history (5072, 4009) for up to `bound`.
async fn submit_retrying(c: &mut Client, params: Value, bound: Duration) -> Value {
    let started = Instant::now();
    loop {
        let r = c.call("prompt.submit", params.clone()).await;
        if r.get("result").is_some() {
            return r["result"].clone();
        }
        let code = r["error"]["code"].as_i64().unwrap_or_default();
        assert!(
            [4009, 5072].contains(&code) && started.elapsed() < bound,
            "{r}"
        );
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
