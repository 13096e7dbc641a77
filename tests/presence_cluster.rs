//! Presence across two cluster nodes on one PostgreSQL, black-box: three
//! described peers on two nodes see each other's joins and leaves, and
//! `session.presence` on either node lists all of them with the node each
//! is connected to (docs/PROTOCOL.md, "Presence"; docs/ARCHITECTURE.md,
//! "Cluster").
//!
//! Without `TETHER_TEST_POSTGRES` these tests skip with one loud line; with
//! `TETHER_REQUIRE_POSTGRES=1` they fail instead.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;
#[path = "cluster/mod.rs"]
mod harness;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use common::{session, Client, Gateway};
use harness::TestCluster;
use serde_json::{json, Value};

const LEASE_MS: u64 = 1000;
/// The reconnect grace (`actors/src/session/presence.rs`).
const GRACE: Duration = Duration::from_secs(5);

async fn described(gw: &Gateway, name: &str) -> Client {
    let mut c = gw.client().await;
    c.ok(
        "gateway.hello",
        json!({"name": name, "app": "tests", "instance": format!("i-{name}")}),
    )
    .await;
    c
}

fn peer_id(c: &Client) -> String {
    c.ready["peer_id"].as_str().expect("peer_id").to_owned()
}

async fn node_of(c: &mut Client) -> String {
    let stats = c.ok("session.events.stats", json!({})).await;
    stats["node_id"].as_str().expect("node_id").to_owned()
}

async fn next_presence(c: &mut Client, wait: Duration) -> Option<Value> {
    let until = Instant::now() + wait;
    loop {
        let left = until.checked_duration_since(Instant::now())?;
        // In pieces shorter than the harness's own wait for a frame.
        let Ok(e) = tokio::time::timeout(left.min(Duration::from_secs(5)), c.next_event()).await
        else {
            continue;
        };
        if e["type"]
            .as_str()
            .unwrap_or_default()
            .starts_with("presence.")
        {
            return Some(e);
        }
    }
}

/// Applies presence events until `seen` is `want`.
async fn until_present(c: &mut Client, seen: &mut BTreeSet<String>, want: &BTreeSet<String>) {
    while seen != want {
        let e = next_presence(c, GRACE * 3)
            .await
            .unwrap_or_else(|| panic!("presence never became {want:?}: {seen:?}"));
        for p in e["payload"]["peers"].as_array().expect("peers") {
            let id = p["peer_id"].as_str().expect("peer_id").to_owned();
            if e["type"] == "presence.joined" {
                seen.insert(id);
            } else {
                seen.remove(&id);
            }
        }
    }
}

fn ids(result: &Value) -> BTreeSet<String> {
    result["peers"]
        .as_array()
        .expect("peers")
        .iter()
        .map(|p| p["peer_id"].as_str().expect("peer_id").to_owned())
        .collect()
}

/// `session.presence` as peer id → node, polled until it lists `want`
/// (another node's peers are in its row a write after they attach).
async fn presence_until(
    c: &mut Client,
    id: &str,
    want: &BTreeSet<String>,
) -> BTreeMap<String, Value> {
    let until = Instant::now() + GRACE * 2;
    loop {
        let r = c.ok("session.presence", json!({"session_id": id})).await;
        let got: BTreeMap<String, Value> = r["peers"]
            .as_array()
            .expect("peers")
            .iter()
            .map(|p| {
                (
                    p["peer_id"].as_str().expect("peer_id").to_owned(),
                    p.clone(),
                )
            })
            .collect();
        if got.keys().cloned().collect::<BTreeSet<_>>() == *want {
            return got;
        }
        assert!(Instant::now() < until, "presence {got:?}, want {want:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_peers_on_two_nodes_see_each_other() {
    let Some(cluster) = TestCluster::start(2, LEASE_MS) else {
        return;
    };
    let mut a = described(&cluster.nodes[0], "ann").await;
    let mut b = described(&cluster.nodes[1], "bob").await;
    let mut c = described(&cluster.nodes[0], "cy").await;
    let node0 = node_of(&mut a).await;
    let node1 = node_of(&mut b).await;
    assert_ne!(node0, node1);

    let id = session(&mut a).await;
    let all: BTreeSet<String> = [&a, &b, &c].into_iter().map(peer_id).collect();
    // Each hears the joins after its own attach (its own included); who was
    // there before, its snapshot says (a join on another node may still be
    // on its way to the snapshot: the events bring it then).
    let mut seen = Vec::new();
    for peer in [&mut b, &mut c] {
        peer.ok(
            "session.resume",
            json!({"session_id": id, "omit_messages": true}),
        )
        .await;
        let r = peer.ok("session.presence", json!({"session_id": id})).await;
        seen.push(ids(&r));
    }
    until_present(&mut a, &mut BTreeSet::new(), &all).await;
    until_present(&mut b, &mut seen[0], &all).await;
    until_present(&mut c, &mut seen[1], &all).await;

    // Either node answers for both.
    let (ann, bob, cy) = (peer_id(&a), peer_id(&b), peer_id(&c));
    let profile = b.ready["profile"].clone();
    for peer in [&mut a, &mut b] {
        let got = presence_until(peer, &id, &all).await;
        assert_eq!(got[&ann]["node"], node0.as_str());
        assert_eq!(got[&cy]["node"], node0.as_str());
        assert_eq!(got[&bob]["node"], node1.as_str());
        assert_eq!(got[&bob]["client"]["name"], "bob");
        assert_eq!(got[&bob]["profile"], profile);
    }

    // cy leaves node 0: bob on node 1 hears it (after cy's grace).
    c.close().await;
    let e = next_presence(&mut b, GRACE * 3)
        .await
        .expect("cy's leave on node 1");
    assert_eq!(e["type"], "presence.left", "{e}");
    assert_eq!(e["payload"]["peers"][0]["peer_id"], cy.as_str());
    // bob leaves node 1: ann on node 0 hears it.
    b.close().await;
    loop {
        let e = next_presence(&mut a, GRACE * 3)
            .await
            .expect("bob's leave on node 0");
        if e["type"] == "presence.left"
            && e["payload"]["peers"]
                .as_array()
                .expect("peers")
                .iter()
                .any(|p| p["peer_id"] == bob.as_str())
        {
            break;
        }
    }
    presence_until(&mut a, &id, &[ann].into()).await;
}

/// A client of node 1 that drops and comes back on node 0 with the same
/// instance inside the grace is no leave and no join for the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnect_to_another_node_inside_the_grace_is_no_leave() {
    let Some(cluster) = TestCluster::start(2, LEASE_MS) else {
        return;
    };
    let mut a = described(&cluster.nodes[0], "ann").await;
    let id = session(&mut a).await;
    let mut b = described(&cluster.nodes[1], "bob").await;
    b.ok(
        "session.resume",
        json!({"session_id": id, "omit_messages": true}),
    )
    .await;
    let both: BTreeSet<String> = [peer_id(&a), peer_id(&b)].into();
    until_present(&mut a, &mut BTreeSet::new(), &both).await;

    b.close().await;
    let mut b2 = described(&cluster.nodes[0], "bob").await;
    b2.ok(
        "session.resume",
        json!({"session_id": id, "omit_messages": true}),
    )
    .await;
    if let Some(e) = next_presence(&mut a, GRACE + Duration::from_secs(3)).await {
        panic!("a reconnect was announced: {e}");
    }
    let want = [peer_id(&a), peer_id(&b2)].into();
    presence_until(&mut a, &id, &want).await;
}
