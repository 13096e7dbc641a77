//! Several gateways on one PostgreSQL, black-box: real `tether
//! serve --cluster` processes on one real database (`cluster/mod.rs`):
//! failover of a dead node's sessions (`node_lost`), a clean stop's
//! hand-over, followers, fencing of a paused owner, peer counts across
//! nodes, rolling restarts. Requests forwarded through a follower are in
//! `cluster_requests.rs`.
//!
//! Without `TETHER_TEST_POSTGRES` these tests skip with one loud line; with
//! `TETHER_REQUIRE_POSTGRES=1` they fail instead.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;
#[path = "cluster/mod.rs"]
mod harness;

use std::time::Instant;

use common::{all_events, seqs, session, submit, turn_events};
use harness::clients::{
    completes_of_turn, durable_through, fences, owner_and_follower, peer_rows, resume_from,
};
use harness::TestCluster;
use serde_json::{json, Value};

/// A lease short enough for a quick failover, long enough for heartbeats
/// of a node on a loaded 2-core machine to keep within it.
const LEASE_MS: u64 = 1000;

/// kill -9 of the owner mid-turn. Another node owns the
/// session; the running turn ends exactly once with `node_lost`; a client
/// of the dead node reconnects to another node with its watermark and gets
/// exactly what it missed; the next prompt works; seqs are gap-free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_of_the_owner_mid_turn_fails_over_with_node_lost() {
    let Some(mut cluster) = TestCluster::start(3, LEASE_MS) else {
        return;
    };
    let bound = cluster.failover_bound();
    let mut a = cluster.nodes[0].client().await;
    let id = session(&mut a).await;
    let first = submit(&mut a, &id, "before the kill").await;
    let done = turn_events(&mut a, &first).await;
    assert_eq!(common::complete(&done)["status"], "complete");
    // A turn that is still running when its node dies.
    let running = submit(&mut a, &id, "/sleep 60000\nnever").await;
    let mut seen = 0;
    loop {
        let e = a.next_event().await;
        seen = seen.max(e["seq"].as_u64().unwrap_or(0));
        if e["type"] == "message.user" && e["turn_id"] == running {
            break;
        }
    }
    cluster.nodes[0].kill();

    // The dead node's client comes back through another node.
    let mut b = cluster.nodes[1].client().await;
    let resumed = resume_from(&mut b, &id, seen, bound).await;
    let mut missed: Vec<Value> = resumed["events"].as_array().expect("events").clone();
    assert_eq!(resumed["resync"], false, "{resumed}");
    // The ending may be in the replay or come live right after it.
    while completes_of_turn(&missed, &running).is_empty() {
        missed.push(b.next_event().await);
    }
    let ending = completes_of_turn(&missed, &running)[0]["payload"].clone();
    assert_eq!(
        ending,
        json!({"text": "", "status": "error", "failure_reason": "node_lost", "recoverable": true}),
        "{missed:?}"
    );
    let missed_seqs = seqs(&missed);
    let expected: Vec<u64> = (seen + 1..=seen + missed_seqs.len() as u64).collect();
    assert_eq!(missed_seqs, expected, "exactly what it missed, in order");

    // The next prompt works, on the new owner.
    let next = submit(&mut b, &id, "after the kill").await;
    let done = turn_events(&mut b, &next).await;
    assert_eq!(common::complete(&done)["status"], "complete", "{done:?}");
    assert_eq!(common::complete(&done)["text"], "after the kill");

    // One ending per turn, seqs 1..=n without a gap or a repeat.
    let events = all_events(&mut b, &id).await;
    let all = seqs(&events);
    assert_eq!(all, (1..=all.len() as u64).collect::<Vec<_>>(), "{all:?}");
    for turn in [&first, &running, &next] {
        assert_eq!(
            completes_of_turn(&events, turn).len(),
            1,
            "turn {turn}: {events:?}"
        );
    }
}

/// A clean stop (SIGTERM) drains, then releases the node's sessions: the
/// next node takes one over without waiting for a lease and without
/// `node_lost` (the drain already ended its turn, `gateway_shutdown`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_stop_hands_its_sessions_over_without_node_lost() {
    let Some(mut cluster) = TestCluster::start(2, LEASE_MS) else {
        return;
    };
    let bound = cluster.failover_bound();
    let mut a = cluster.nodes[0].client().await;
    let id = session(&mut a).await;
    let running = submit(&mut a, &id, "/sleep 60000\nnever").await;
    assert_eq!(cluster.nodes[0].terminate(), Some(0));

    let mut b = cluster.nodes[1].client().await;
    let resumed = resume_from(&mut b, &id, 0, bound).await;
    let events: Vec<Value> = resumed["events"].as_array().expect("events").clone();
    let endings = completes_of_turn(&events, &running);
    assert_eq!(endings.len(), 1, "{events:?}");
    assert_eq!(endings[0]["payload"]["failure_reason"], "gateway_shutdown");
    let next = submit(&mut b, &id, "on the next node").await;
    let done = turn_events(&mut b, &next).await;
    assert_eq!(common::complete(&done)["text"], "on the next node");
    let all = seqs(&all_events(&mut b, &id).await);
    assert_eq!(all, (1..=all.len() as u64).collect::<Vec<_>>());
}

/// Nodes share the database: each serves the sessions it created, and the
/// epoch, one per database, is the same on every node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_share_one_database_and_one_epoch() {
    let Some(cluster) = TestCluster::start(3, LEASE_MS) else {
        return;
    };
    let mut epochs = Vec::new();
    for node in &cluster.nodes {
        let mut c = node.client().await;
        epochs.push(c.epoch());
        let id = session(&mut c).await;
        let turn = submit(&mut c, &id, "hello").await;
        let done = turn_events(&mut c, &turn).await;
        assert_eq!(common::complete(&done)["text"], "hello");
    }
    assert!(epochs.windows(2).all(|w| w[0] == w[1]), "{epochs:?}");
    let _ = cluster.lease();
}

/// Runs `tether serve ARGS` that is expected to exit at once; (status, stderr).
fn refused(args: &[&str]) -> (Option<i32>, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tether"))
        .arg("serve")
        .args([
            "--listen",
            "127.0.0.1:0",
            "--database-connect-timeout-s",
            "2",
        ])
        .args(args)
        .env("RUST_LOG", "warn")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run tether serve");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// A single gateway and a cluster keep each other out of one database, and
/// `--cluster` on SQLite is a usage error: both exit 64.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_gateway_on_a_cluster_database_and_a_cluster_on_sqlite_exit_64() {
    let Some(cluster) = TestCluster::start(1, LEASE_MS) else {
        return;
    };
    let dir = common::tempdir();
    let dir = dir.path().to_str().expect("utf-8 path");
    let (code, stderr) = refused(&["--data-dir", dir, "--database-url", cluster.database_url()]);
    assert_eq!(code, Some(64), "{stderr}");
    let (code, stderr) = refused(&["--data-dir", dir, "--cluster"]);
    assert_eq!(code, Some(64), "{stderr}");
    assert!(stderr.contains("--cluster needs a postgres://"), "{stderr}");
    // The node is unharmed.
    let mut c = cluster.nodes[0].client().await;
    let id = session(&mut c).await;
    assert!(!id.is_empty());
    let _ = cluster.data_dir(0);
}

/// A session parked on a live node is released with its park: another
/// node brings it back without waiting for that node to die.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_session_is_released_for_any_node() {
    let Some(cluster) = TestCluster::start_with(2, LEASE_MS, &["--orphan-grace-s", "0"]) else {
        return;
    };
    let mut a = cluster.nodes[0].client().await;
    let id = session(&mut a).await;
    let turn = submit(&mut a, &id, "parked soon").await;
    let done = turn_events(&mut a, &turn).await;
    assert_eq!(common::complete(&done)["text"], "parked soon");
    a.close().await;

    // Through node 1 as soon as it is asked: as a follower while node 0
    // still owns it (its park's patch may be committed already, its release
    // not yet: idle all the same, since a client is attached now), then as
    // its owner once node 0 released it.
    let bound = std::time::Duration::from_secs(10);
    let mut b = cluster.nodes[1].client().await;
    let resumed = resume_from(&mut b, &id, 0, bound).await;
    assert_eq!(resumed["session"]["status"], "idle", "{resumed}");
    let next = submit(&mut b, &id, "on node 1").await;
    let done = turn_events(&mut b, &next).await;
    assert_eq!(common::complete(&done)["text"], "on node 1");
    let all = seqs(&all_events(&mut b, &id).await);
    assert_eq!(all, (1..=all.len() as u64).collect::<Vec<_>>());
}

/// One session through three nodes, and an owner's kill -9 for clients that stay attached: clients
/// attached to one session through all three nodes see identical durable
/// frames in identical order; prompts submitted through any node run once,
/// on the owner. When the owner is killed mid-turn, a follower takes the
/// session over in place: its clients and the other follower's stay
/// attached, the turn ends exactly once with `node_lost`, the next prompt
/// works through any node, and seqs stay gap-free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn followers_relay_the_owners_events_and_take_over_in_place() {
    let Some(mut cluster) = TestCluster::start(3, LEASE_MS) else {
        return;
    };
    let mut a = cluster.nodes[0].client().await;
    let id = session(&mut a).await;
    let mut b = cluster.nodes[1].client().await;
    let mut c = cluster.nodes[2].client().await;
    for f in [&mut b, &mut c] {
        let r = f
            .ok(
                "session.resume",
                json!({"session_id": id, "last_seen": 0, "omit_messages": true}),
            )
            .await;
        assert_eq!(seqs(r["events"].as_array().expect("events")), vec![1]);
    }
    let turn = submit(&mut a, &id, "seen everywhere").await;
    let on_a = durable_through(&mut a, &turn).await;
    assert_eq!(common::complete(&on_a)["text"], "seen everywhere");
    for f in [&mut b, &mut c] {
        assert_eq!(durable_through(f, &turn).await, on_a, "identical frames");
    }
    // Prompts through the followers run once, on the owner: every client
    // sees each turn's events, identical and in the same order.
    for via in [1, 2] {
        let text = format!("through node {via}");
        let turn = match via {
            1 => submit(&mut b, &id, &text).await,
            _ => submit(&mut c, &id, &text).await,
        };
        let on_a = durable_through(&mut a, &turn).await;
        assert_eq!(common::complete(&on_a)["text"], text.as_str());
        let users = on_a
            .iter()
            .filter(|e| e["type"] == "message.user" && e["turn_id"] == turn.as_str())
            .count();
        assert_eq!(users, 1, "run once: {on_a:?}");
        for f in [&mut b, &mut c] {
            assert_eq!(durable_through(f, &turn).await, on_a, "identical frames");
        }
    }

    let running = submit(&mut a, &id, "/sleep 60000\nnever").await;
    let mut user_seen = Vec::new();
    for f in [&mut b, &mut c] {
        loop {
            let e = f.next_event().await;
            if e["type"] == "message.user" && e["turn_id"] == running {
                user_seen.push(e);
                break;
            }
        }
    }
    cluster.nodes[0].kill();
    let on_b = durable_through(&mut b, &running).await;
    let on_c = durable_through(&mut c, &running).await;
    assert_eq!(on_b, on_c, "both followers saw the same ending");
    // After the prompt: maybe the turn's `message.start` (written once the
    // host had it), then its one ending, with no gap.
    assert_eq!(
        completes_of_turn(&on_b, &running).len(),
        1,
        "one ending: {on_b:?}"
    );
    assert_eq!(
        common::complete(&on_b),
        &json!({"text": "", "status": "error", "failure_reason": "node_lost", "recoverable": true})
    );
    let after_user = user_seen[0]["seq"].as_u64().expect("seq");
    let got = seqs(&on_b);
    let want: Vec<u64> = (after_user + 1..=after_user + got.len() as u64).collect();
    assert_eq!(got, want, "{on_b:?}");

    // The next prompt, through the node that did not take over (forwarded
    // if it is a follower of the new owner).
    let next = submit(&mut c, &id, "after the kill").await;
    let on_b = durable_through(&mut b, &next).await;
    let on_c = durable_through(&mut c, &next).await;
    assert_eq!(on_b, on_c);
    assert_eq!(common::complete(&on_b)["text"], "after the kill");
    let all = seqs(&all_events(&mut b, &id).await);
    assert_eq!(all, (1..=all.len() as u64).collect::<Vec<_>>(), "{all:?}");
}

/// Without load: the owner is paused (SIGSTOP) past its
/// lease mid-turn while prompts keep arriving on another node, which takes
/// the session over; resumed (SIGCONT), the old owner writes nothing (the
/// fence never decreases along seq, its turn's reply is never stored),
/// stops its turn and goes on as a follower: its client stays connected and
/// receives exactly what it had not seen, each event once, in order, and
/// its next prompt runs on the new owner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_owner_is_fenced_out_and_follows_the_new_owner() {
    let Some(cluster) = TestCluster::start(2, LEASE_MS) else {
        return;
    };
    let (mut a, mut b, id) = owner_and_follower(&cluster).await;
    // The host (not paused) finishes it while its gateway is stopped.
    let running = submit(&mut a, &id, "/sleep 500\nfrom the paused node").await;
    let mut seen = 0;
    loop {
        let e = a.next_event().await;
        seen = seen.max(e["seq"].as_u64().unwrap_or(0));
        if e["type"] == "message.start" && e["turn_id"] == running {
            break;
        }
    }
    cluster.nodes[0].signal("STOP");
    let ended = durable_through(&mut b, &running).await;
    assert_eq!(common::complete(&ended)["failure_reason"], "node_lost");
    let next = submit(&mut b, &id, "while it sleeps").await;
    assert_eq!(
        common::complete(&durable_through(&mut b, &next).await)["text"],
        "while it sleeps"
    );
    cluster.nodes[0].signal("CONT");

    // The old owner's client, still attached, gets what it missed, from
    // the new owner's events, as a follower's client.
    let missed = durable_through(&mut a, &next).await;
    let missed: Vec<Value> = missed
        .into_iter()
        .filter(|e| e["seq"].as_u64().unwrap_or(0) > seen)
        .collect();
    let on_b_since: Vec<Value> = all_events(&mut b, &id)
        .await
        .into_iter()
        .filter(|e| e["seq"].as_u64().unwrap_or(0) > seen)
        .collect();
    assert_eq!(
        missed, on_b_since,
        "exactly what it missed, once each, in order"
    );
    // Through the node that lost it, a prompt runs on the new owner.
    let after = submit(&mut a, &id, "through the old owner").await;
    assert_eq!(
        common::complete(&durable_through(&mut a, &after).await)["text"],
        "through the old owner"
    );
    let events = all_events(&mut b, &id).await;
    assert_eq!(completes_of_turn(&events, &running).len(), 1, "{events:?}");
    assert!(
        !events
            .iter()
            .any(|e| e["payload"]["text"] == "from the paused node"),
        "the paused owner wrote after losing the session: {events:?}"
    );
    let all = seqs(&events);
    assert_eq!(all, (1..=all.len() as u64).collect::<Vec<_>>());
    let stored = fences(cluster.database_url(), &id).await;
    assert_eq!(stored.len(), all.len());
    assert!(
        stored.windows(2).all(|w| w[0].1 <= w[1].1),
        "fence decreased along seq: {stored:?}"
    );
    assert!(
        stored.last().is_some_and(|l| l.1 > stored[0].1),
        "{stored:?}"
    );
}

/// Peer counts cross nodes: an owner with no peers of its own does not park
/// a session whose client is attached through another node (the store
/// refuses the park, `InUse`), so ownership never moves and the client's
/// prompts keep running there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_does_not_park_a_session_with_peers_on_another_node() {
    let Some(cluster) = TestCluster::start_with(2, LEASE_MS, &["--orphan-grace-s", "0"]) else {
        return;
    };
    let (a, mut b, id) = owner_and_follower(&cluster).await;
    // The count is written just after the attach (not under the ownership
    // row's lock yet, docs/ARCHITECTURE.md): wait until it is there.
    let started = Instant::now();
    while peer_rows(cluster.database_url(), &id).await < 1 {
        assert!(
            started.elapsed() < cluster.failover_bound(),
            "no peer count"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    a.close().await;
    // Long enough for node 0's reaper to try (it parks an idle orphan at
    // once) and for node 1's poll to see a release, had there been one.
    tokio::time::sleep(cluster.failover_bound()).await;
    let turn = submit(&mut b, &id, "still here").await;
    let done = durable_through(&mut b, &turn).await;
    assert_eq!(common::complete(&done)["text"], "still here");
    let stored = fences(cluster.database_url(), &id).await;
    assert!(
        stored.iter().all(|(_, fence)| *fence == stored[0].1),
        "ownership moved: {stored:?}"
    );
    let r = b
        .ok(
            "session.resume",
            json!({"session_id": id, "attach": false, "omit_messages": true}),
        )
        .await;
    assert_ne!(r["session"]["status"], "parked", "{r}");
}

/// One case: a prompt forwarded while its owner cannot
/// take it (paused, then killed) runs once, on the node that takes the
/// session over (the forwarder's own), and the client's answer is that
/// turn's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forward_pending_when_the_owner_dies_runs_once_on_the_new_owner() {
    let Some(mut cluster) = TestCluster::start(2, LEASE_MS) else {
        return;
    };
    let (_a, mut b, id) = owner_and_follower(&cluster).await;
    cluster.nodes[0].signal("STOP");
    let frame = json!({"jsonrpc": "2.0", "id": "fwd", "method": "prompt.submit",
        "params": {"session_id": id, "text": "forwarded once"}});
    b.send_text(&frame.to_string()).await;
    // Killed while paused (before or after its lease ran out, whichever
    // comes first): it never saw the forward.
    tokio::time::sleep(cluster.lease() / 2).await;
    cluster.nodes[0].kill();
    let asked = b.reply_to(json!("fwd")).await;
    let turn = asked["result"]["turn_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{asked}"))
        .to_string();
    let done = durable_through(&mut b, &turn).await;
    assert_eq!(common::complete(&done)["text"], "forwarded once");
    let events = all_events(&mut b, &id).await;
    let users: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "message.user")
        .collect();
    assert_eq!(users.len(), 1, "{events:?}");
    assert_eq!(users[0]["turn_id"], turn.as_str());
    let all = seqs(&events);
    assert_eq!(all, (1..=all.len() as u64).collect::<Vec<_>>());
}

/// `SessionInfo.peers` counts every node's peers, on the owner and on a
/// follower (within a poll, a second).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_info_counts_the_peers_of_every_node() {
    let Some(cluster) = TestCluster::start(2, LEASE_MS) else {
        return;
    };
    let (mut a, mut b, id) = owner_and_follower(&cluster).await;
    for c in [&mut a, &mut b] {
        let started = Instant::now();
        loop {
            let r = c
                .ok(
                    "session.resume",
                    json!({"session_id": id, "attach": false, "omit_messages": true}),
                )
                .await;
            if r["session"]["peers"] == 2 {
                break;
            }
            assert!(
                started.elapsed() < cluster.failover_bound(),
                "peers never counted both nodes: {r}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }
}

/// Light: each of three nodes is stopped (SIGTERM) and
/// started again in turn, each time just after a prompt went in. Every
/// turn ends exactly once, nothing is lost or duplicated, and the client of
/// each restarted node resumes through it with exactly what it missed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_loses_and_duplicates_nothing() {
    let Some(mut cluster) = TestCluster::start(3, LEASE_MS) else {
        return;
    };
    let mut clients = Vec::new();
    let id = {
        let mut a = cluster.nodes[0].client().await;
        let id = session(&mut a).await;
        clients.push(a);
        id
    };
    for i in 1..3 {
        let mut c = cluster.nodes[i].client().await;
        c.ok(
            "session.resume",
            json!({"session_id": id, "last_seen": 1, "omit_messages": true}),
        )
        .await;
        clients.push(c);
    }
    let mut seen = [1u64; 3];
    let mut turns = Vec::new();
    for k in 0..3 {
        let via = (k + 1) % 3;
        // A node that is draining refuses new turns; a retry lands on the
        // owner of the moment.
        let text = format!("round {k}");
        let started = Instant::now();
        let turn = loop {
            let r = clients[via]
                .call(
                    "prompt.submit",
                    json!({"session_id": id, "text": format!("/sleep 200\n{text}")}),
                )
                .await;
            if let Some(t) = r["result"]["turn_id"].as_str() {
                break t.to_string();
            }
            assert!(started.elapsed() < cluster.failover_bound() * 3, "{r}");
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        };
        assert_eq!(cluster.nodes[k].terminate(), Some(0));
        let through = durable_through(&mut clients[via], &turn).await;
        for e in &through {
            seen[via] = seen[via].max(e["seq"].as_u64().unwrap_or(0));
        }
        turns.push(turn);
        cluster.nodes[k].restart();
        let mut c = cluster.nodes[k].client().await;
        let resumed = resume_from(&mut c, &id, seen[k], cluster.failover_bound() * 3).await;
        let got = seqs(resumed["events"].as_array().expect("events"));
        let want: Vec<u64> = (seen[k] + 1..=seen[k] + got.len() as u64).collect();
        assert_eq!(got, want, "exactly what it missed");
        seen[k] += got.len() as u64;
        clients[k] = c;
    }
    let events = all_events(&mut clients[0], &id).await;
    let all = seqs(&events);
    assert_eq!(all, (1..=all.len() as u64).collect::<Vec<_>>(), "{all:?}");
    for turn in &turns {
        assert_eq!(
            completes_of_turn(&events, turn).len(),
            1,
            "{turn}: {events:?}"
        );
        let users = events
            .iter()
            .filter(|e| e["type"] == "message.user" && e["turn_id"] == turn.as_str())
            .count();
        assert_eq!(users, 1, "{turn}: {events:?}");
    }
}
