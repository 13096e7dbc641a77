//! A transcript tells how each turn that did not complete ended (PROTOCOL
//! Part 4, "Assistant messages"): the assistant entry carries the
//! `message.complete`'s `status` and `failure_reason`, and the turn's
//! `error` message, on every backend, in a resume and in a branch.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

use common::{tempdir, Backend, Client, Gateway};
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

/// The assistant entries of a resume: (text, status, failure_reason, error).
fn endings(r: &Value) -> Vec<Value> {
    r["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["role"] == "assistant")
        .map(|m| {
            json!([
                m["text"],
                m.get("status"),
                m.get("failure_reason"),
                m.get("error")
            ])
        })
        .collect()
}

async fn each_entry_says_how_its_turn_ended(b: Backend) {
    let dir = tempdir();
    let mut gw = Gateway::start_on(&b, dir.path(), &[]);
    let mut c = gw.client().await;
    let created = c.ok("session.create", json!({"title": "endings"})).await;
    let id = created["session"]["session_id"]
        .as_str()
        .expect("id")
        .to_string();
    run_turn(&mut c, &id, "fine").await;
    run_turn(&mut c, &id, "/error boom").await;
    // A turn the gateway's death cuts is ended by the next gateway.
    c.ok("prompt.submit", json!({"session_id": id, "text": "/hang"}))
        .await;
    loop {
        let e = c.next_event().await;
        if e["type"] == "message.delta" {
            break;
        }
    }
    gw.restart();
    let mut c = gw.client().await;
    let r = c.ok("session.resume", json!({"session_id": id})).await;
    let want = vec![
        json!(["fine", null, null, null]),
        json!(["", "error", "engine_error", "boom"]),
        json!(["", "error", "gateway_restart", null]),
    ];
    assert_eq!(endings(&r), want, "{}", r["messages"]);

    // A branch reads like its parent.
    let branch = c.ok("session.branch", json!({"session_id": id})).await;
    let bid = branch["session"]["session_id"].as_str().expect("branch id");
    let r = c.ok("session.resume", json!({"session_id": bid})).await;
    assert_eq!(endings(&r), want, "the branch: {}", r["messages"]);
}

backends!(each_entry_says_how_its_turn_ended);
