//! A host's durable events while the database cannot be reached: a
//! cluster node reaches it through a proxy (`common/proxy.rs`) that resets
//! every connection for less than half the lease (so the node does not
//! stand down), in the middle of a turn whose host sends a `tool.start`
//! every 100 ms. Every event of the turn is then
//! stored, or the turn ends `error` with `storage_unavailable`: never
//! `complete` with events missing (docs/PROTOCOL.md 1.5).
//!
//! Without `TETHER_TEST_POSTGRES` this skips with one loud line; with
//! `TETHER_REQUIRE_POSTGRES=1` it fails instead.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;
#[path = "cluster/mod.rs"]
mod harness;

use std::time::Duration;

use common::proxy::Link;
use common::{all_events, submit};
use harness::TestCluster;
use serde_json::Value;

/// Long enough that a cut of [`CUT`] stays under half of it.
const LEASE_MS: u64 = 20000;
/// How long the database cannot be reached: long enough that the writer
/// gives up on the appends it holds.
const CUT: Duration = Duration::from_millis(8000);

/// `tool.start`s the host sends for the turn, 100 ms apart.
const TOOLS: usize = 40;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_whose_events_cannot_be_stored_fails_instead_of_completing() {
    let Some(cluster) = TestCluster::start_behind_proxy(1, LEASE_MS, &[]) else {
        return;
    };
    let mut c = cluster.nodes[0].client().await;
    let id = common::session(&mut c).await;
    let turn = submit(&mut c, &id, &format!("/flood {TOOLS} 10 16\ndone")).await;
    loop {
        let e = c.next_event().await;
        if e["type"] == "tool.start" && e["turn_id"] == turn {
            break;
        }
    }
    cluster.link(Link::Reset);
    tokio::time::sleep(CUT).await;
    cluster.link(Link::Normal);

    // The turn's ending reaches the client (owed until the store is back).
    let ending = loop {
        let e = c.next_event().await;
        if e["type"] == "message.complete" && e["turn_id"] == turn {
            break e;
        }
    };
    let stored = all_events(&mut c, &id).await;
    let of_turn = |kind: &str| -> Vec<&Value> {
        stored
            .iter()
            .filter(|e| e["type"] == kind && e["turn_id"] == turn)
            .collect()
    };
    let completes = of_turn("message.complete");
    assert_eq!(completes.len(), 1, "{stored:?}");
    assert_eq!(completes[0]["payload"], ending["payload"]);
    let tools = of_turn("tool.start").len();
    println!(
        "{tools} of {TOOLS} tool.start stored; ended {}",
        ending["payload"]
    );
    if ending["payload"]["status"] == "complete" {
        assert_eq!(tools, TOOLS, "completed with events missing: {ending}");
    } else {
        assert_eq!(ending["payload"]["status"], "error", "{ending}");
        assert_eq!(
            ending["payload"]["failure_reason"], "storage_unavailable",
            "{ending}"
        );
        assert_eq!(ending["payload"]["recoverable"], true, "{ending}");
    }
}
