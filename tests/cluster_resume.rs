//! A client that moves from one node to another resumes with the watermark
//! it reached on the first (docs/ARCHITECTURE.md "Cluster":
//! the epoch is one per database, attach + replay on a
//! follower is atomic the same way as on the owner). The node it lands on
//! may not have read everything the client saw yet (a follower relays a
//! few milliseconds behind the owner's commit): it must still deliver no
//! seq at or below `last_seen` again.
//!
//! Found by `tests/cluster_chaos.rs` (seed 19, 90 s: clients that had seen
//! seq n through one node resumed through a follower with `last_seen` n and
//! got n again, live). A follower now holds such a resume until it has read
//! up to `last_seen` (`actors/src/session/cluster/follow_resume.rs`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;
#[path = "cluster/mod.rs"]
mod harness;

use std::time::Duration;

use common::{session, submit, Client};
use harness::TestCluster;
use serde_json::json;

const LEASE_MS: u64 = 1000;
/// Tries of the race (a resume landing before the follower's read); a
/// few in ten hit it on the 2-core VM.
const TRIES: usize = 60;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_through_a_lagging_follower_delivers_nothing_twice() {
    let Some(cluster) = TestCluster::start(2, LEASE_MS) else {
        return;
    };
    let mut a = cluster.nodes[0].client().await;
    let id = session(&mut a).await;
    // A follower of the session on node 1, kept live by this peer.
    let mut follower_peer = cluster.nodes[1].client().await;
    follower_peer
        .ok(
            "session.resume",
            json!({"session_id": id, "last_seen": 1, "omit_messages": true}),
        )
        .await;
    let mut lagging = 0;
    for k in 0..TRIES {
        // Connected before the turn, so that the resume follows the
        // owner's frame as closely as a client can.
        let mut moved = Client::connect(&cluster.nodes[1].url()).await;
        let turn = submit(&mut a, &id, &format!("try {k}")).await;
        let seen = loop {
            let e = a.next_event().await;
            if e["type"] == "message.complete" && e["turn_id"] == turn.as_str() {
                break e["seq"].as_u64().expect("seq");
            }
        };
        let r = moved
            .ok(
                "session.resume",
                json!({"session_id": id, "last_seen": seen, "omit_messages": true}),
            )
            .await;
        let latest = r["latest_seq"].as_u64().expect("latest_seq");
        if latest < seen {
            lagging += 1;
        }
        // Whatever comes next must be past the watermark.
        while let Ok(e) = tokio::time::timeout(Duration::from_millis(150), moved.next_event()).await
        {
            let Some(seq) = e["seq"].as_u64() else {
                continue;
            };
            assert!(
                seq > seen,
                "try {k}: resumed through node 1 with last_seen {seen} (its latest_seq was \
                 {latest}), then got seq {seq} again, live: {e}"
            );
        }
        moved.close().await;
        // Keep the follower's peer drained.
        while tokio::time::timeout(Duration::from_millis(1), follower_peer.next_event())
            .await
            .is_ok()
        {}
    }
    println!("{lagging} of {TRIES} resumes landed on a follower behind the client");
}
