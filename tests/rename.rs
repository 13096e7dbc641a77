//! `session.rename`, black-box: the new title is a durable `session.info`
//! event, answered once it is on disk, seen by every attached peer, by a
//! replay, by a listing and after a restart; a bad title, an unknown or a
//! closed session change nothing. On a cluster, a rename sent through a
//! node that only follows the session runs on its owner (written under
//! the owner's fence) and its followers know the new title.
//!
//! The cluster test skips with one loud line without
//! `TETHER_TEST_POSTGRES` (and fails with `TETHER_REQUIRE_POSTGRES=1`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;
#[path = "cluster/mod.rs"]
mod harness;

use common::{all_events, session, tempdir, Backend, Client, Gateway};
use harness::clients::{durable_until, fences, owner_and_follower};
use harness::TestCluster;
use serde_json::{json, Value};

/// The title `id` has as a non-attaching resume through `c` tells it.
async fn title_of(c: &mut Client, id: &str) -> Value {
    let r = c
        .ok(
            "session.resume",
            json!({"session_id": id, "attach": false, "omit_messages": true}),
        )
        .await;
    r["session"]["title"].clone()
}

async fn renamed_for_good(backend: Backend) {
    let dir = tempdir();
    let mut gw = Gateway::start_on(&backend, dir.path(), &[]);
    let mut c = gw.client().await;
    let id = session(&mut c).await;

    let r = c
        .ok(
            "session.rename",
            json!({"session_id": id, "title": "plans"}),
        )
        .await;
    assert_eq!(r["title"], "plans", "{r}");
    assert_eq!(r["session_id"], id.as_str());
    assert_eq!(r["latest_seq"], 2, "the answer is as of its own event: {r}");

    // The attached peer gets it live, as the next durable event.
    let e = c.next_event().await;
    assert_eq!(e["type"], "session.info", "{e}");
    assert_eq!(e["seq"], 2);
    assert_eq!(e["payload"], json!({"title": "plans"}));

    // Answered after its commit: another client reads it at once.
    let mut other = gw.client().await;
    let events = all_events(&mut other, &id).await;
    assert_eq!(events.last().expect("events")["type"], "session.info");
    assert_eq!(title_of(&mut other, &id).await, "plans");
    let listed = other.ok("session.list", json!({})).await;
    assert_eq!(listed["sessions"][0]["title"], "plans", "{listed}");

    // An empty title is a title too.
    let r = c
        .ok("session.rename", json!({"session_id": id, "title": ""}))
        .await;
    assert_eq!(r["title"], "");
    assert_eq!(c.next_event().await["payload"], json!({"title": ""}));
    let r = c
        .ok(
            "session.rename",
            json!({"session_id": id, "title": "again"}),
        )
        .await;
    assert_eq!(r["latest_seq"], 4, "{r}");

    // The title is the store's: after a restart it is still there.
    drop(c);
    drop(other);
    gw.restart();
    let mut c = gw.client().await;
    assert_eq!(title_of(&mut c, &id).await, "again");
    let listed = c.ok("session.list", json!({})).await;
    assert_eq!(listed["sessions"][0]["title"], "again", "{listed}");
}

async fn bad_renames_change_nothing(backend: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&backend, dir.path(), &["--max-title-bytes", "8"]);
    let mut c = gw.client().await;
    let id = session(&mut c).await;

    for (params, field) in [
        (json!({"session_id": id}), "title"),
        (json!({"session_id": id, "title": 7}), "title"),
        (json!({"session_id": id, "title": null}), "title"),
        (json!({"title": "x"}), "session_id"),
        // Nine bytes of UTF-8 (five characters) against a bound of eight.
        (json!({"session_id": id, "title": "ééééx"}), "title"),
    ] {
        let e = c.err("session.rename", params.clone()).await;
        assert_eq!(e["code"], -32602, "{params}: {e}");
        assert_eq!(e["data"]["field"], field, "{params}: {e}");
    }
    let e = c
        .err(
            "session.rename",
            json!({"session_id": "s_nobody", "title": "x"}),
        )
        .await;
    assert_eq!(e["code"], 4001, "{e}");
    // Nothing was written: the session still has only its first event.
    let events = all_events(&mut c, &id).await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(title_of(&mut c, &id).await, "t");

    // A closed session keeps its title.
    c.ok("session.close", json!({"session_id": id})).await;
    let e = c
        .err("session.rename", json!({"session_id": id, "title": "late"}))
        .await;
    assert_eq!(e["code"], 4002, "{e}");
    let events = all_events(&mut c, &id).await;
    assert_eq!(events.last().expect("events")["type"], "session.closed");
}

backends!(renamed_for_good, bad_renames_change_nothing);

/// A rename through a follower runs on the owner: one `session.info`,
/// written under the owner's fence, seen by both nodes' clients; the
/// follower answers with the new title and knows it from then on; a bad
/// title through it is refused by the owner and writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rename_through_a_follower_runs_on_the_owner() {
    let Some(cluster) = TestCluster::start(2, 1000) else {
        return;
    };
    let (mut a, mut b, id) = owner_and_follower(&cluster).await;
    let r = b
        .ok(
            "session.rename",
            json!({"session_id": id, "title": "moved"}),
        )
        .await;
    assert_eq!(r["title"], "moved", "{r}");
    assert_eq!(r["latest_seq"], 2, "{r}");

    let on_a = durable_until(&mut a, |e| e["type"] == "session.info").await;
    let on_b = durable_until(&mut b, |e| e["type"] == "session.info").await;
    assert_eq!(on_a, on_b, "every node's clients see the same frames");
    assert_eq!(
        on_a.last().expect("the rename")["payload"],
        json!({"title": "moved"})
    );

    // Both nodes tell the new title, the follower from what it relayed.
    assert_eq!(title_of(&mut a, &id).await, "moved");
    assert_eq!(title_of(&mut b, &id).await, "moved");

    // Written once, by the owner: one fence along the whole session.
    let stored = fences(cluster.database_url(), &id).await;
    assert_eq!(stored.len(), 2, "{stored:?}");
    assert_eq!(stored[0].1, stored[1].1, "{stored:?}");

    let e = b
        .err(
            "session.rename",
            json!({"session_id": id, "title": "x".repeat(1025)}),
        )
        .await;
    assert_eq!(e["code"], -32602, "{e}");
    assert_eq!(e["data"]["field"], "title", "{e}");
    assert_eq!(all_events(&mut b, &id).await.len(), 2);
}
