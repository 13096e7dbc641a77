//! What a second prompt does while a turn runs (`prompt.submit`'s
//! `multitask`: enqueue, reject, interrupt, rollback) and `dedupe_key`,
//! black-box on the real binary with the echo engine. Across cluster
//! nodes: `multitask_cluster.rs`.
//!
//! Each test holds one turn running (`/sleep`, ended only by the policy)
//! and one queued, and checks that every accepted turn ends exactly once
//! and what the store holds afterwards.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

use common::Backend;

use common::{all_events, completes_of, session, tempdir, turn_events, Client, Gateway};
use serde_json::{json, Value};

/// A prompt that runs until something stops it.
const LONG: &str = "/sleep 600000\nnever";

async fn submit_with(c: &mut Client, id: &str, text: &str, extra: Value) -> Value {
    let mut params = json!({"session_id": id, "text": text});
    if let (Some(p), Some(e)) = (params.as_object_mut(), extra.as_object()) {
        p.extend(e.clone());
    }
    c.ok("prompt.submit", params).await
}

fn turn_of(r: &Value) -> String {
    r["turn_id"].as_str().expect("turn_id").to_string()
}

/// Waits until `turn` runs on its host (its `message.start`).
async fn started(c: &mut Client, turn: &str) {
    loop {
        let e = c.next_event().await;
        if e["type"] == "message.start" && e["turn_id"] == turn {
            return;
        }
    }
}

/// A running turn and a queued one on a new session.
async fn running_and_queued(c: &mut Client) -> (String, String, String) {
    let id = session(c).await;
    let r = submit_with(c, &id, LONG, json!({})).await;
    assert_eq!(r["status"], "started");
    let running = turn_of(&r);
    started(c, &running).await;
    let q = submit_with(c, &id, "queued one", json!({})).await;
    assert_eq!(q["status"], "queued");
    (id, running, turn_of(&q))
}

/// `(turn_id, status, failure_reason)` of each `message.complete` on disk.
async fn endings(c: &mut Client, id: &str) -> Vec<(String, String, Option<String>)> {
    completes_of(c, id)
        .await
        .iter()
        .map(|e| {
            (
                e["turn_id"].as_str().unwrap_or_default().to_string(),
                e["payload"]["status"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                e["payload"]["failure_reason"].as_str().map(str::to_string),
            )
        })
        .collect()
}

/// Every `message.user` on disk has exactly one `message.complete`.
async fn one_ending_each(c: &mut Client, id: &str) {
    let events = all_events(c, id).await;
    for user in events.iter().filter(|e| e["type"] == "message.user") {
        let n = events
            .iter()
            .filter(|e| e["type"] == "message.complete" && e["turn_id"] == user["turn_id"])
            .count();
        assert_eq!(n, 1, "turn {} ended {n} times: {events:?}", user["turn_id"]);
    }
}

/// The text of `turn`'s `message.complete`, as it streams.
async fn reply_of(c: &mut Client, turn: &str) -> Value {
    let events = turn_events(c, turn).await;
    events.last().expect("an ending")["payload"].clone()
}

fn history_of(reply: &Value) -> Vec<(String, String)> {
    let text = reply["text"].as_str().expect("text");
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{text}: {e}"))
}

async fn reject_refuses_with_4091_and_writes_nothing(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &[]);
    let mut c = gw.client().await;
    let (id, running, queued) = running_and_queued(&mut c).await;
    let before = all_events(&mut c, &id).await;
    let e = c
        .err(
            "prompt.submit",
            json!({"session_id": id, "text": "not now", "multitask": "reject"}),
        )
        .await;
    assert_eq!(e["code"], 4091, "{e}");
    assert_eq!(all_events(&mut c, &id).await, before, "nothing written");

    // Idle again, `reject` simply starts.
    c.ok("session.interrupt", json!({"session_id": id})).await;
    let r = submit_with(&mut c, &id, "now", json!({"multitask": "reject"})).await;
    assert_eq!(r["status"], "started");
    let done = reply_of(&mut c, &turn_of(&r)).await;
    assert_eq!(done["text"], "now");
    let ends = endings(&mut c, &id).await;
    let reasons: Vec<_> = ends
        .iter()
        .map(|(t, _, r)| (t.clone(), r.clone()))
        .collect();
    assert_eq!(
        reasons,
        [
            (running, None),
            (queued, Some("dequeued".into())),
            (turn_of(&r), None)
        ]
    );
    one_ending_each(&mut c, &id).await;
}

async fn interrupt_supersedes_the_running_turn_and_the_queue_goes_on(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &[]);
    let mut c = gw.client().await;
    let (id, running, queued) = running_and_queued(&mut c).await;
    let r = submit_with(&mut c, &id, "/history", json!({"multitask": "interrupt"})).await;
    // The queued prompt runs first; this one waits behind it.
    assert_eq!(r["status"], "queued", "{r}");
    let newest = turn_of(&r);
    let reply = reply_of(&mut c, &newest).await;
    assert_eq!(reply["status"], "complete");
    // An interrupt keeps the stopped turn in the history (unlike a rollback).
    let history = history_of(&reply);
    assert!(
        history.contains(&("user".into(), LONG.into())),
        "{history:?}"
    );
    let ends = endings(&mut c, &id).await;
    assert_eq!(
        ends,
        [
            (
                running.clone(),
                "interrupted".into(),
                Some("superseded".into())
            ),
            (queued, "complete".into(), None),
            (newest, "complete".into(), None),
        ]
    );
    let superseded = completes_of(&mut c, &id).await[0]["payload"].clone();
    assert_eq!(superseded["recoverable"], false, "{superseded}");
    one_ending_each(&mut c, &id).await;
}

async fn interrupt_with_drop_queued_drops_the_queue(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &[]);
    let mut c = gw.client().await;
    let (id, running, queued) = running_and_queued(&mut c).await;
    let r = submit_with(
        &mut c,
        &id,
        "instead",
        json!({"multitask": "interrupt", "drop_queued": true}),
    )
    .await;
    assert_eq!(r["status"], "started", "{r}");
    let newest = turn_of(&r);
    assert_eq!(reply_of(&mut c, &newest).await["text"], "instead");
    let ends = endings(&mut c, &id).await;
    assert_eq!(
        ends,
        [
            (running, "interrupted".into(), Some("superseded".into())),
            (queued, "interrupted".into(), Some("dequeued".into())),
            (newest, "complete".into(), None),
        ]
    );
    one_ending_each(&mut c, &id).await;
}

async fn rollback_leaves_the_stopped_turn_out_of_the_next_history(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &[]);
    let mut c = gw.client().await;
    let id = session(&mut c).await;
    let first = turn_of(&submit_with(&mut c, &id, "kept", json!({})).await);
    assert_eq!(reply_of(&mut c, &first).await["text"], "kept");
    let running = turn_of(&submit_with(&mut c, &id, LONG, json!({})).await);
    started(&mut c, &running).await;
    let queued = turn_of(&submit_with(&mut c, &id, "queued one", json!({})).await);

    let r = submit_with(&mut c, &id, "/history", json!({"multitask": "rollback"})).await;
    assert_eq!(r["status"], "started", "{r}");
    let newest = turn_of(&r);
    let events = turn_events(&mut c, &newest).await;
    assert_eq!(events[0]["type"], "message.user");
    // The mark clients grey the stopped turn out by.
    assert_eq!(events[0]["payload"]["replaces"], running.as_str());
    let history = history_of(&events.last().expect("an ending")["payload"]);
    let pair = |r: &str, t: &str| (r.to_string(), t.to_string());
    assert_eq!(history, [pair("user", "kept"), pair("assistant", "kept")]);

    // The next turn's history lacks it too; the log keeps every event.
    let next = turn_of(&submit_with(&mut c, &id, "/history", json!({})).await);
    let history = history_of(&reply_of(&mut c, &next).await);
    assert!(
        !history.iter().any(|(_, t)| t == LONG || t == "queued one"),
        "{history:?}"
    );
    assert_eq!(history.len(), 4, "{history:?}");
    let log = all_events(&mut c, &id).await;
    assert!(log
        .iter()
        .any(|e| e["type"] == "message.user" && e["turn_id"] == running.as_str()));
    let ends = endings(&mut c, &id).await;
    assert_eq!(
        ends,
        [
            (first, "complete".into(), None),
            (running, "interrupted".into(), Some("superseded".into())),
            (queued, "interrupted".into(), Some("dequeued".into())),
            (newest, "complete".into(), None),
            (next, "complete".into(), None),
        ]
    );
    // What a resume shows is the history too.
    let resumed = c
        .ok("session.resume", json!({"session_id": id, "attach": false}))
        .await;
    let texts: Vec<&str> = resumed["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| m["text"].as_str().unwrap_or_default())
        .collect();
    assert!(!texts.contains(&LONG), "{texts:?}");
    one_ending_each(&mut c, &id).await;
}

async fn enqueue_is_the_default_and_every_turn_runs(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &[]);
    let mut c = gw.client().await;
    let id = session(&mut c).await;
    let first = turn_of(&submit_with(&mut c, &id, "/sleep 3000\none", json!({})).await);
    let r = submit_with(&mut c, &id, "two", json!({"multitask": "enqueue"})).await;
    assert_eq!(r["status"], "queued");
    assert_eq!(reply_of(&mut c, &first).await["text"], "one");
    assert_eq!(reply_of(&mut c, &turn_of(&r)).await["text"], "two");
    one_ending_each(&mut c, &id).await;
}

async fn a_dedupe_key_answers_with_the_first_turn_across_a_reconnect_and_a_restart(b: Backend) {
    let dir = tempdir();
    let mut gw = Gateway::start_on(&b, dir.path(), &[]);
    let mut c = gw.client().await;
    let id = session(&mut c).await;
    let key = json!({"dedupe_key": "click-1"});
    let r = submit_with(&mut c, &id, "/sleep 300\nonce", key.clone()).await;
    let first = turn_of(&r);
    assert!(r.get("duplicate").is_none(), "{r}");
    // The double-click, while the first still runs.
    let again = submit_with(&mut c, &id, "/sleep 300\nonce", key.clone()).await;
    assert_eq!(again["turn_id"], first.as_str(), "{again}");
    assert_eq!(again["trace_id"], r["trace_id"]);
    assert_eq!(again["duplicate"], true);
    assert_eq!(reply_of(&mut c, &first).await["text"], "once");
    c.close().await;

    // A client that lost the answer retries on a new connection.
    let mut c = gw.client().await;
    let before = all_events(&mut c, &id).await;
    let retry = submit_with(&mut c, &id, "/sleep 300\nonce", key.clone()).await;
    assert_eq!(retry["turn_id"], first.as_str(), "{retry}");
    assert_eq!(retry["status"], "started");
    assert_eq!(all_events(&mut c, &id).await, before, "nothing written");
    c.close().await;

    // A new process rebuilds the keys from the stored prompts.
    gw.restart();
    let mut c = gw.client().await;
    let retry = submit_with(&mut c, &id, "/sleep 300\nonce", key.clone()).await;
    assert_eq!(retry["turn_id"], first.as_str(), "{retry}");
    assert_eq!(retry["duplicate"], true);
    // Another key is another turn.
    let other = submit_with(&mut c, &id, "other", json!({"dedupe_key": "click-2"})).await;
    assert_ne!(other["turn_id"], first.as_str());
    assert!(other.get("duplicate").is_none(), "{other}");
    let users = all_events(&mut c, &id)
        .await
        .into_iter()
        .filter(|e| e["type"] == "message.user")
        .count();
    assert_eq!(users, 2);
}

async fn a_retried_reject_gets_its_turn_back_not_4091(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &[]);
    let mut c = gw.client().await;
    let id = session(&mut c).await;
    let keyed = json!({"multitask": "reject", "dedupe_key": "batch-7"});
    let r = submit_with(&mut c, &id, LONG, keyed.clone()).await;
    let turn = turn_of(&r);
    started(&mut c, &turn).await;
    // The key is checked before the policy: its own running turn does
    // not refuse the retry.
    let retry = submit_with(&mut c, &id, LONG, keyed).await;
    assert_eq!(retry["turn_id"], turn.as_str(), "{retry}");
    assert_eq!(retry["duplicate"], true);
    let e = c
        .err(
            "prompt.submit",
            json!({"session_id": id, "text": "x", "multitask": "reject", "dedupe_key": "batch-8"}),
        )
        .await;
    assert_eq!(e["code"], 4091, "{e}");
    c.ok("session.interrupt", json!({"session_id": id})).await;
    one_ending_each(&mut c, &id).await;
}

async fn bad_multitask_params_are_refused_naming_the_field(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &[]);
    let mut c = gw.client().await;
    let id = session(&mut c).await;
    for (extra, field) in [
        (json!({"multitask": "later"}), None),
        (json!({"dedupe_key": ""}), Some("dedupe_key")),
        (json!({"dedupe_key": "k".repeat(129)}), Some("dedupe_key")),
        (json!({"drop_queued": true}), Some("drop_queued")),
        (
            json!({"replaces": "t_x", "multitask": "rollback"}),
            Some("multitask"),
        ),
    ] {
        let mut params = json!({"session_id": id, "text": "x"});
        params
            .as_object_mut()
            .expect("object")
            .extend(extra.as_object().expect("object").clone());
        let e = c.err("prompt.submit", params).await;
        assert_eq!(e["code"], -32602, "{extra}: {e}");
        if let Some(field) = field {
            assert_eq!(e["data"]["field"], field, "{e}");
        }
    }
    let users = all_events(&mut c, &id)
        .await
        .into_iter()
        .filter(|e| e["type"] == "message.user")
        .count();
    assert_eq!(users, 0);
}

backends!(
    reject_refuses_with_4091_and_writes_nothing,
    interrupt_supersedes_the_running_turn_and_the_queue_goes_on,
    interrupt_with_drop_queued_drops_the_queue,
    rollback_leaves_the_stopped_turn_out_of_the_next_history,
    enqueue_is_the_default_and_every_turn_runs,
    a_dedupe_key_answers_with_the_first_turn_across_a_reconnect_and_a_restart,
    a_retried_reject_gets_its_turn_back_not_4091,
    bad_multitask_params_are_refused_naming_the_field,
);
