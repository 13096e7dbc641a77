//! `session.branch`: a new session with a copy of the parent's
//! transcript up to `upto_seq`, found again after a restart, titled
//! "PARENT (branch N)"; and a branch the disk cannot hold leaves nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod chaos;
mod common;

use common::Backend;

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{tempdir, Client, Gateway};
use serde_json::{json, Value};

async fn run_turn(c: &mut Client, id: &str, text: &str) {
    let t = c
        .ok("prompt.submit", json!({"session_id": id, "text": text}))
        .await;
    loop {
        let e = c.next_event().await;
        if e["type"] == "message.complete" && e["turn_id"] == t["turn_id"] {
            return;
        }
    }
}

/// `(role, text)` of each transcript message.
fn transcript(r: &Value) -> Vec<(String, String)> {
    r["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap().into(),
                m["text"].as_str().unwrap().into(),
            )
        })
        .collect()
}

async fn resume(c: &mut Client, id: &str) -> Value {
    c.ok("session.resume", json!({"session_id": id, "attach": false}))
        .await
}

async fn a_branch_copies_the_transcript_is_titled_and_survives_a_restart(b: Backend) {
    let dir = tempdir();
    let mut gw = Gateway::start_on(&b, dir.path(), &[]);
    let mut c = gw.client().await;
    let r = c
        .ok(
            "session.create",
            json!({"title": "Plan", "attach": false,
                   "messages": [{"role": "system", "text": "be brief"}]}),
        )
        .await;
    let parent = r["session"]["session_id"].as_str().unwrap().to_string();
    c.ok("session.resume", json!({"session_id": parent})).await;
    run_turn(&mut c, &parent, "first question").await;
    let cut = resume(&mut c, &parent).await["latest_seq"]
        .as_u64()
        .unwrap();
    run_turn(&mut c, &parent, "second question").await;
    let whole = resume(&mut c, &parent).await;

    let b1 = c.ok("session.branch", json!({"session_id": parent})).await["session"].clone();
    assert_eq!(b1["title"], "Plan (branch 1)");
    assert_eq!(b1["parent_session_id"], parent.as_str());
    assert_ne!(b1["session_id"], parent.as_str());
    let b1_id = b1["session_id"].as_str().unwrap().to_string();
    let b2 = c
        .ok(
            "session.branch",
            json!({"session_id": parent, "upto_seq": cut}),
        )
        .await["session"]
        .clone();
    assert_eq!(b2["title"], "Plan (branch 2)");
    let b2_id = b2["session_id"].as_str().unwrap().to_string();
    let b3 = c
        .ok(
            "session.branch",
            json!({"session_id": parent, "title": "mine"}),
        )
        .await["session"]
        .clone();
    assert_eq!(b3["title"], "mine");

    let want_all = transcript(&whole);
    assert_eq!(transcript(&resume(&mut c, &b1_id).await), want_all);
    let want_cut: Vec<_> = whole["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["seq"].as_u64().unwrap() <= cut)
        .map(|m| {
            (
                m["role"].as_str().unwrap().to_string(),
                m["text"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(transcript(&resume(&mut c, &b2_id).await), want_cut);
    assert_eq!(
        want_cut.len() + 2,
        want_all.len(),
        "the cut drops the second turn"
    );

    // The branch is a session like any other: it takes turns of its own,
    // and the parent does not see them.
    c.ok("session.resume", json!({"session_id": b2_id})).await;
    run_turn(&mut c, &b2_id, "another way").await;
    assert_eq!(transcript(&resume(&mut c, &parent).await), want_all);

    // After a hard restart the branches are there, whole.
    drop(c);
    gw.restart();
    let mut c = gw.client().await;
    let listed = c.ok("session.list", json!({})).await;
    let titles: Vec<&str> = listed["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["title"].as_str().unwrap())
        .collect();
    for t in ["Plan", "Plan (branch 1)", "Plan (branch 2)", "mine"] {
        assert!(titles.contains(&t), "{t} listed: {titles:?}");
    }
    assert_eq!(transcript(&resume(&mut c, &b1_id).await), want_all);
    let b2_now = transcript(&resume(&mut c, &b2_id).await);
    assert_eq!(b2_now[..want_cut.len()], want_cut[..]);
    assert_eq!(b2_now.last().unwrap().1, "another way");
    let b4 = c.ok("session.branch", json!({"session_id": parent})).await;
    assert_eq!(b4["session"]["title"], "Plan (branch 3)");
}

async fn a_branch_after_a_compaction_starts_from_the_summary(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &[]);
    let mut c = gw.client().await;
    let r = c.ok("session.create", json!({"title": "t"})).await;
    let id = r["session"]["session_id"].as_str().unwrap().to_string();
    run_turn(&mut c, &id, "one").await;
    c.ok("session.compress", json!({"session_id": id})).await;
    run_turn(&mut c, &id, "two").await;
    let parent = resume(&mut c, &id).await;
    let b = c.ok("session.branch", json!({"session_id": id})).await;
    let branch = resume(&mut c, b["session"]["session_id"].as_str().unwrap()).await;
    assert_eq!(transcript(&branch), transcript(&parent));
    assert_eq!(transcript(&branch)[0].0, "system");
    assert!(transcript(&branch)[0].1.starts_with("Summary of"));
}

async fn bad_branches_are_refused_and_change_nothing(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &[]);
    let mut c = gw.client().await;
    let r = c
        .ok(
            "session.create",
            json!({"title": "t", "attach": false, "profile": "p1"}),
        )
        .await;
    let id = r["session"]["session_id"].as_str().unwrap().to_string();
    let latest = r["session"]["latest_seq"].as_u64().unwrap();
    for (params, code, field) in [
        (
            json!({"session_id": id, "profile": "p1", "upto_seq": latest + 1}),
            -32602,
            Some("upto_seq"),
        ),
        (
            json!({"session_id": id, "profile": "p1", "upto_seq": 0}),
            -32602,
            Some("upto_seq"),
        ),
        (json!({"session_id": id}), 4001, None),
        (
            json!({"session_id": "s_01NOTTHERE", "profile": "p1"}),
            4001,
            None,
        ),
    ] {
        let e = c.err("session.branch", params.clone()).await;
        assert_eq!(e["code"], code, "{params}: {e}");
        if let Some(f) = field {
            assert_eq!(e["data"]["field"], f);
        }
    }
    let listed = c.ok("session.list", json!({"profile": "p1"})).await;
    assert_eq!(listed["sessions"].as_array().unwrap().len(), 1);
}

/// In-process, with a store writer that runs out of disk after a restart:
/// the branch of a large transcript fails with 5070 and leaves nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_branch_the_disk_cannot_hold_leaves_nothing() {
    use chaos::client::{CallError, Conn};
    use tether_actors::hooks::{core_actor, Child};
    use tether_actors::{GatewayArgs, GatewayConfig, GatewayHandle, WriterFactory};
    use tether_store::testing::open_sqlite_writer_with_page_headroom;
    use tether_store::{open_sqlite, open_sqlite_writer, StoreConfig};

    let dir = tempdir();
    let cfg = StoreConfig::new(dir.path().join("tether.db"));
    let opened = open_sqlite(&cfg).await.unwrap();
    let reader = opened.reader.clone();
    // The first writer has room; every later one (after a restart) has
    // only a few pages left.
    let made = Arc::new(AtomicUsize::new(0));
    let factory: WriterFactory = {
        let made = made.clone();
        Arc::new(move || {
            let cfg = cfg.clone();
            let n = made.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move {
                if n == 0 {
                    open_sqlite_writer(&cfg).await
                } else {
                    open_sqlite_writer_with_page_headroom(&cfg, 4).await
                }
            })
        })
    };
    let gw = GatewayHandle::start(GatewayArgs {
        config: GatewayConfig::default(),
        hosts: None,
        reader: opened.reader,
        handoffs: opened.handoffs,
        eraser: opened.eraser,
        epoch: opened.epoch,
        writer_factory: factory,
        cluster: None,
    })
    .await
    .unwrap();
    let mut c = Conn::open(gw.ctx()).await.unwrap();
    let seed: Vec<Value> = (0..200)
        .map(|i| json!({"role": "user", "text": format!("{i} {}", "x".repeat(2000))}))
        .collect();
    let r = c
        .call(
            "session.create",
            json!({"title": "big", "attach": false, "messages": seed}),
        )
        .await
        .unwrap_or_else(|e| panic!("create: {e:?}"));
    let parent = r["session"]["session_id"].as_str().unwrap().to_string();

    // Restart the writer: the new one is nearly out of disk.
    let writer = || core_actor(gw.ctx(), Child::StoreWriter);
    let old = writer().unwrap();
    old.kill();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while writer().is_none_or(|w| w.get_id() == old.get_id()) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the writer never came back"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    match c
        .call("session.branch", json!({"session_id": parent}))
        .await
    {
        Err(CallError::Rpc(e)) => assert_eq!(e["code"], 5070, "{e}"),
        other => panic!("expected 5070, got {other:?}"),
    }
    let (rows, _) = reader
        .list_sessions("default", true, None, 100)
        .await
        .unwrap();
    assert_eq!(rows.len(), 1, "only the parent exists");
    assert_eq!(rows[0].id.as_str(), parent);
    gw.shutdown(Duration::from_secs(5)).await;
}

/// Every event of `id` from the store, in order.
async fn stored_events(c: &mut Client, id: &str) -> Vec<Value> {
    let r = c
        .ok(
            "session.events.since",
            json!({"session_id": id, "last_seen": 0, "limit": 10000}),
        )
        .await;
    r["events"].as_array().unwrap().clone()
}

/// The seq of the `message.user` that started `turn`.
fn user_seq(events: &[Value], turn: &Value) -> u64 {
    events
        .iter()
        .find(|e| e["type"] == "message.user" && e["turn_id"] == *turn)
        .and_then(|e| e["seq"].as_u64())
        .expect("the turn's message.user")
}

/// No turn without its end, no turn id twice, no two user messages in a
/// row: what a branch's store and transcript must look like.
fn assert_whole_turns(events: &[Value], messages: &[(String, String)]) {
    let mut open = HashSet::new();
    for e in events {
        let Some(turn) = e["turn_id"].as_str() else {
            continue;
        };
        match e["type"].as_str().unwrap() {
            "message.user" => assert!(open.insert(turn.to_string()), "turn twice: {e}"),
            "message.complete" => assert!(open.remove(turn), "an end without a start: {e}"),
            _ => {}
        }
    }
    assert!(open.is_empty(), "unfinished turns in the branch: {open:?}");
    for pair in messages.windows(2) {
        assert!(
            !(pair[0].0 == "user" && pair[1].0 == "user"),
            "two user messages in a row: {messages:?}"
        );
    }
}

async fn a_branch_taken_during_a_turn_stops_before_that_turn(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &["--hosts", "1"]);
    let mut c = gw.client().await;
    let r = c.ok("session.create", json!({"title": "live"})).await;
    let parent = r["session"]["session_id"].as_str().unwrap().to_string();
    run_turn(&mut c, &parent, "finished one").await;
    let before = transcript(&resume(&mut c, &parent).await);

    // A turn that runs until interrupted, and one queued behind it.
    let hang = c
        .ok(
            "prompt.submit",
            json!({"session_id": parent, "text": "/hang"}),
        )
        .await;
    let queued = c
        .ok(
            "prompt.submit",
            json!({"session_id": parent, "text": "queued"}),
        )
        .await;
    assert_eq!(queued["status"], "queued");
    let events = stored_events(&mut c, &parent).await;
    let hang_user = user_seq(&events, &hang["turn_id"]);
    let latest = resume(&mut c, &parent).await["latest_seq"]
        .as_u64()
        .unwrap();

    // Everything (the default), just after the turn's message.user, and
    // just after the queued one's: each cut moves to before the running turn.
    let queued_user = user_seq(&events, &queued["turn_id"]);
    for upto in [None, Some(hang_user), Some(queued_user), Some(latest)] {
        let mut params = json!({"session_id": parent});
        if let Some(n) = upto {
            params["upto_seq"] = json!(n);
        }
        let b = c.ok("session.branch", params).await;
        assert_eq!(b["upto_seq"], hang_user - 1, "{upto:?}: {b}");
        let id = b["session"]["session_id"].as_str().unwrap().to_string();
        let branch = resume(&mut c, &id).await;
        assert_eq!(transcript(&branch), before, "{upto:?}");
        assert_whole_turns(&stored_events(&mut c, &id).await, &transcript(&branch));
    }
    // A cut before the turn is taken as it is.
    let b = c
        .ok(
            "session.branch",
            json!({"session_id": parent, "upto_seq": hang_user - 1}),
        )
        .await;
    assert_eq!(b["upto_seq"], hang_user - 1, "{b}");

    // The branch takes turns of its own that complete and read right.
    let id = b["session"]["session_id"].as_str().unwrap().to_string();
    c.ok("session.resume", json!({"session_id": id})).await;
    run_turn(&mut c, &id, "on the branch").await;
    let branch = resume(&mut c, &id).await;
    let messages = transcript(&branch);
    assert_eq!(
        messages.last().unwrap(),
        &("assistant".to_string(), "on the branch".to_string())
    );
    assert_whole_turns(&stored_events(&mut c, &id).await, &messages);

    c.ok("session.interrupt", json!({"session_id": parent}))
        .await;
}

async fn a_branch_between_a_queued_turns_start_and_the_running_ones_end_stops_before_both(
    b: Backend,
) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &["--hosts", "1"]);
    let mut c = gw.client().await;
    let r = c.ok("session.create", json!({"title": "q"})).await;
    let parent = r["session"]["session_id"].as_str().unwrap().to_string();
    run_turn(&mut c, &parent, "done").await;
    let before = transcript(&resume(&mut c, &parent).await);
    // The first turn is slow enough for the second to queue behind it;
    // the second never ends.
    let slow = c
        .ok(
            "prompt.submit",
            json!({"session_id": parent, "text": "/sleep 700\nslow"}),
        )
        .await;
    let hang = c
        .ok(
            "prompt.submit",
            json!({"session_id": parent, "text": "/hang"}),
        )
        .await;
    assert_eq!(hang["status"], "queued");
    // Wait for the slow turn's end.
    let slow_end = loop {
        let e = c.next_event().await;
        if e["type"] == "message.complete" && e["turn_id"] == slow["turn_id"] {
            break e["seq"].as_u64().unwrap();
        }
    };
    let events = stored_events(&mut c, &parent).await;
    let slow_user = user_seq(&events, &slow["turn_id"]);
    assert!(user_seq(&events, &hang["turn_id"]) < slow_end);
    // At the slow turn's end the queued one has begun (its message.user
    // is in range) but not ended: the branch stops before both.
    let b = c
        .ok(
            "session.branch",
            json!({"session_id": parent, "upto_seq": slow_end}),
        )
        .await;
    assert_eq!(b["upto_seq"], slow_user - 1, "{b}");
    let id = b["session"]["session_id"].as_str().unwrap().to_string();
    let branch = resume(&mut c, &id).await;
    assert_eq!(transcript(&branch), before);
    assert_whole_turns(&stored_events(&mut c, &id).await, &transcript(&branch));
    c.ok("session.interrupt", json!({"session_id": parent}))
        .await;
}

backends!(
    a_branch_copies_the_transcript_is_titled_and_survives_a_restart,
    a_branch_after_a_compaction_starts_from_the_summary,
    bad_branches_are_refused_and_change_nothing,
    a_branch_taken_during_a_turn_stops_before_that_turn,
    a_branch_between_a_queued_turns_start_and_the_running_ones_end_stops_before_both,
);
