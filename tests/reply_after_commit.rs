//! A reply that reports a durable change comes after that change is on
//! disk, black-box: a `session.resume` (or `session.events.since`) sent the
//! moment a write method answers already shows what the answer reports,
//! for every such method, on both stores, and through a node that only
//! follows the session in a cluster.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;
#[path = "cluster/mod.rs"]
mod harness;

use common::{all_events, session, submit, tempdir, Backend, Client, Gateway};
use harness::clients::owner_and_follower;
use harness::TestCluster;
use serde_json::{json, Value};

/// How many times each racy check runs: an answer sent before its commit
/// is seen stale by a resume right after it nearly every time, but not
/// always.
const TRIES: usize = 4;

/// `session.resume` without attaching: what the session says now.
async fn resume(c: &mut Client, id: &str) -> Value {
    c.ok("session.resume", json!({"session_id": id, "attach": false}))
        .await
}

/// The text of the first message of the current segment.
fn first_text(resumed: &Value) -> &str {
    resumed["messages"][0]["text"].as_str().unwrap_or("")
}

/// Waits for the `message.complete` of `turn` on an attached client.
async fn ended(c: &mut Client, turn: &str) {
    loop {
        let e = c.next_event().await;
        if e["type"] == "message.complete" && e["turn_id"] == turn {
            return;
        }
    }
}

/// `session.compress` (the case): two turns, compress, one more
/// turn, compress again; a resume right after each answer returns the new
/// segment (its summary and `history_version`), never the old one.
async fn a_resume_right_after_compress_shows_the_new_segment(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &[]);
    for _ in 0..TRIES {
        let mut a = gw.client().await;
        let id = session(&mut a).await;
        for text in ["one", "two"] {
            let t = submit(&mut a, &id, text).await;
            ended(&mut a, &t).await;
        }
        let r = a.ok("session.compress", json!({"session_id": id})).await;
        assert_eq!(r["status"], "compressed", "{r}");
        let seen = resume(&mut a, &id).await;
        assert_eq!(first_text(&seen), "Summary of 4 messages.", "{seen}");
        assert_eq!(seen["session"]["history_version"], r["history_version"]);

        let t = submit(&mut a, &id, "three").await;
        ended(&mut a, &t).await;
        let r = a.ok("session.compress", json!({"session_id": id})).await;
        assert_eq!(r["removed"], 3, "{r}");
        let seen = resume(&mut a, &id).await;
        assert_eq!(first_text(&seen), "Summary of 3 messages.", "{seen}");
        assert_eq!(seen["messages"].as_array().map(Vec::len), Some(1), "{seen}");
        assert_eq!(seen["session"]["history_version"], r["history_version"]);
    }
}

/// `session.interrupt` answered `interrupted`: a resume right after it
/// has the turn's ending (its assistant message, `interrupted`) and no
/// active turn.
async fn a_resume_right_after_interrupt_shows_the_ending(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &[]);
    let mut a = gw.client().await;
    let id = session(&mut a).await;
    for _ in 0..TRIES {
        let turn = submit(&mut a, &id, "/sleep 60000\nnever").await;
        loop {
            let e = a.next_event().await;
            if e["type"] == "message.start" && e["turn_id"] == turn {
                break;
            }
        }
        let r = a.ok("session.interrupt", json!({"session_id": id})).await;
        assert_eq!(r["status"], "interrupted", "{r}");
        let seen = resume(&mut a, &id).await;
        assert_eq!(seen["active_turn"], Value::Null, "{seen}");
        let last = seen["messages"]
            .as_array()
            .and_then(|m| m.last())
            .cloned()
            .unwrap_or_default();
        assert_eq!(
            (&last["role"], &last["turn_id"], &last["status"]),
            (&json!("assistant"), &json!(turn), &json!("interrupted")),
            "{seen}"
        );
        ended(&mut a, &turn).await;
    }
}

/// The other write methods: `session.create`, `prompt.submit`,
/// `session.branch`, `handoff.request` / `claim` / `complete` / `fail`
/// and `session.close` each show their change to the very next read.
async fn every_other_write_is_read_right_after_its_answer(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &[]);
    let mut a = gw.client().await;
    for n in 0..TRIES {
        // create
        let r = a
            .ok("session.create", json!({"title": "fresh", "attach": false}))
            .await;
        let id = r["session"]["session_id"].as_str().expect("id").to_string();
        let seen = resume(&mut a, &id).await;
        assert_eq!(seen["latest_seq"], 1, "{seen}");

        // submit: its message.user
        let r = a
            .ok(
                "prompt.submit",
                json!({"session_id": id, "text": "/sleep 100\nhi"}),
            )
            .await;
        let seen = resume(&mut a, &id).await;
        let users: Vec<&Value> = seen["messages"]
            .as_array()
            .expect("messages")
            .iter()
            .filter(|m| m["role"] == "user" && m["turn_id"] == r["turn_id"])
            .collect();
        assert_eq!(users.len(), 1, "{seen}");

        // branch: the new session, whole
        let r = a.ok("session.branch", json!({"session_id": id})).await;
        let child = r["session"]["session_id"].as_str().expect("child");
        let seen = resume(&mut a, child).await;
        assert_eq!(seen["latest_seq"], r["session"]["latest_seq"], "{seen} {r}");
        assert!(seen["latest_seq"].as_u64() >= Some(1), "{seen}");

        // handoffs: each transition's announcement
        let target = format!("worker-{n}");
        let last_handoff = |events: &[Value]| {
            events
                .iter()
                .rev()
                .find(|e| e["type"] == "status.update" && e["payload"]["kind"] == "handoff")
                .map(|e| e["payload"]["text"].clone())
        };
        let r = a
            .ok(
                "handoff.request",
                json!({"session_id": id, "target": target}),
            )
            .await;
        let handoff = r["handoff_id"].as_str().expect("handoff").to_string();
        let events = all_events(&mut a, &id).await;
        assert_eq!(last_handoff(&events), Some(json!("pending")), "{events:?}");
        a.ok("handoff.claim", json!({"target": target})).await;
        let events = all_events(&mut a, &id).await;
        assert_eq!(last_handoff(&events), Some(json!("running")), "{events:?}");
        if n % 2 == 0 {
            a.ok("handoff.complete", json!({"handoff_id": handoff}))
                .await;
            let events = all_events(&mut a, &id).await;
            assert_eq!(last_handoff(&events), Some(json!("completed")));
        } else {
            a.ok(
                "handoff.fail",
                json!({"handoff_id": handoff, "error": "no"}),
            )
            .await;
            let events = all_events(&mut a, &id).await;
            assert_eq!(last_handoff(&events), Some(json!("failed")));
        }

        // close: session.closed is the last event, and resume says 4002
        a.ok("session.close", json!({"session_id": id})).await;
        let events = all_events(&mut a, &id).await;
        assert_eq!(
            events.last().map(|e| e["type"].clone()),
            Some(json!("session.closed")),
            "{events:?}"
        );
        let err = a
            .err("session.resume", json!({"session_id": id, "attach": false}))
            .await;
        assert_eq!(err["code"], 4002, "{err}");
    }
}

/// Through a node that only follows the session (a cluster): the owner
/// runs the write, and the follower relays its answer only once it has
/// read what the write committed, so a resume on the follower right after
/// the answer shows it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_through_a_follower_show_on_it_right_after_the_answer() {
    let Some(cluster) = TestCluster::start(2, 1000) else {
        return;
    };
    let (mut a, mut b, id) = owner_and_follower(&cluster).await;
    for _ in 0..TRIES {
        // submit
        let r = b
            .ok(
                "prompt.submit",
                json!({"session_id": id, "text": "through b"}),
            )
            .await;
        let turn = r["turn_id"].as_str().expect("turn").to_string();
        let seen = resume(&mut b, &id).await;
        let users = seen["messages"]
            .as_array()
            .expect("messages")
            .iter()
            .filter(|m| m["role"] == "user" && m["turn_id"] == turn)
            .count();
        assert_eq!(users, 1, "{seen}");
        ended(&mut a, &turn).await;
        ended(&mut b, &turn).await;

        // compress
        let r = b.ok("session.compress", json!({"session_id": id})).await;
        assert_eq!(r["status"], "compressed", "{r}");
        let seen = resume(&mut b, &id).await;
        assert_eq!(
            seen["session"]["history_version"], r["history_version"],
            "{seen}"
        );
        assert!(first_text(&seen).starts_with("Summary of "), "{seen}");

        // interrupt
        let turn = submit(&mut b, &id, "/sleep 60000\nnever").await;
        loop {
            let e = b.next_event().await;
            if e["type"] == "message.start" && e["turn_id"] == turn {
                break;
            }
        }
        let r = b.ok("session.interrupt", json!({"session_id": id})).await;
        assert_eq!(r["status"], "interrupted", "{r}");
        let seen = resume(&mut b, &id).await;
        let last = seen["messages"]
            .as_array()
            .and_then(|m| m.last())
            .cloned()
            .unwrap_or_default();
        assert_eq!(
            (&last["turn_id"], &last["status"]),
            (&json!(turn), &json!("interrupted")),
            "{seen}"
        );
        ended(&mut a, &turn).await;
        ended(&mut b, &turn).await;
    }
    // close
    b.ok("session.close", json!({"session_id": id})).await;
    let err = b
        .err("session.resume", json!({"session_id": id, "attach": false}))
        .await;
    assert_eq!(err["code"], 4002, "{err}");
}

backends!(
    a_resume_right_after_compress_shows_the_new_segment,
    a_resume_right_after_interrupt_shows_the_ending,
    every_other_write_is_read_right_after_its_answer,
);
