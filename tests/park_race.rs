//! Requests racing parks, black-box: with `--orphan-grace-s 0` a session
//! nobody is attached to parks as soon as its turn ends, so the clients
//! below keep hitting sessions that are live, parking, parked or being
//! brought back. Every request must be answered once and right: each
//! submit runs exactly one turn (one `message.user`, one
//! `message.complete`), reads see one contiguous run of seqs, and each
//! handoff transition is announced exactly once.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

use std::time::{Duration, Instant};

use common::{tempdir, Client, Gateway};
use serde_json::{json, Value};

const CLIENTS: usize = 4;
const ROUNDS: usize = 12;

/// Every event of a session, checked to be seqs 1, 2, ... with nothing
/// missing or twice.
async fn all_events(c: &mut Client, id: &str) -> Vec<Value> {
    let r = c
        .ok(
            "session.events.since",
            json!({"session_id": id, "last_seen": 0, "limit": 1000}),
        )
        .await;
    let events = r["events"].as_array().expect("events").clone();
    let latest = r["latest_seq"].as_u64().expect("latest_seq");
    let want: Vec<u64> = (1..=latest).collect();
    assert_eq!(common::seqs(&events), want, "one contiguous run: {r}");
    events
}

/// Waits (reading, not attached) until the turn has its `message.complete`.
async fn wait_complete(c: &mut Client, id: &str, turn_id: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let done = all_events(c, id)
            .await
            .iter()
            .any(|e| e["type"] == "message.complete" && e["turn_id"] == turn_id);
        if done {
            return;
        }
        assert!(Instant::now() < deadline, "turn {turn_id} never completed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// One client: turns and handoffs on its own session, reads of the others.
async fn client(url: String, ids: Vec<String>, me: usize) -> (Vec<(String, String)>, usize) {
    let mut c = Client::connect(&url).await;
    let own = ids[me].clone();
    let mut turns = Vec::new();
    let mut transitions = 0;
    for round in 0..ROUNDS {
        let text = format!("client {me} round {round}");
        let r = c
            .ok("prompt.submit", json!({"session_id": own, "text": text}))
            .await;
        let turn_id = r["turn_id"].as_str().expect("turn_id").to_string();
        turns.push((turn_id.clone(), text));
        // Another client's session, which is probably parking right now.
        let other = &ids[(me + round + 1) % ids.len()];
        let r = c
            .ok(
                "session.resume",
                json!({"session_id": other, "attach": false, "last_seen": 0, "omit_messages": true}),
            )
            .await;
        let latest = r["latest_seq"].as_u64().expect("latest_seq");
        let want: Vec<u64> = (1..=latest).collect();
        assert_eq!(common::seqs(r["events"].as_array().expect("events")), want);
        wait_complete(&mut c, &own, &turn_id).await;
        if round % 3 == 0 {
            let r = c
                .ok(
                    "handoff.request",
                    json!({"session_id": own, "target": format!("t{me}")}),
                )
                .await;
            let h = r["handoff_id"].clone();
            let r = c
                .ok("handoff.fail", json!({"handoff_id": h, "error": "test"}))
                .await;
            assert_eq!(r["failed"], true);
            transitions += 2;
        }
    }
    (turns, transitions)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submits_reads_and_handoffs_racing_parks_each_happen_once() {
    let dir = tempdir();
    let gw = Gateway::start(
        dir.path(),
        &["--orphan-grace-s", "0", "--rate-limit-rps", "0"],
    );
    let mut setup = gw.client().await;
    let mut ids = Vec::new();
    for i in 0..CLIENTS {
        let r = setup
            .ok(
                "session.create",
                json!({"title": format!("s{i}"), "attach": false}),
            )
            .await;
        ids.push(r["session"]["session_id"].as_str().expect("id").to_string());
    }
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|me| tokio::spawn(client(gw.url(), ids.clone(), me)))
        .collect();
    let mut results = Vec::new();
    for t in tasks {
        results.push(t.await.expect("client"));
    }

    for (id, (turns, transitions)) in ids.iter().zip(&results) {
        let events = all_events(&mut setup, id).await;
        for (turn_id, text) in turns {
            let of_turn: Vec<&Value> = events.iter().filter(|e| e["turn_id"] == *turn_id).collect();
            let users: Vec<_> = of_turn
                .iter()
                .filter(|e| e["type"] == "message.user")
                .collect();
            let completes: Vec<_> = of_turn
                .iter()
                .filter(|e| e["type"] == "message.complete")
                .collect();
            assert_eq!(users.len(), 1, "turn {turn_id}: one message.user");
            assert_eq!(users[0]["payload"]["text"], text.as_str());
            assert_eq!(completes.len(), 1, "turn {turn_id}: one message.complete");
            assert_eq!(completes[0]["payload"]["status"], "complete");
            assert_eq!(completes[0]["payload"]["text"], text.as_str());
        }
        let users = events
            .iter()
            .filter(|e| e["type"] == "message.user")
            .count();
        assert_eq!(users, turns.len(), "no prompt ran that nobody sent");
        let states: Vec<&str> = events
            .iter()
            .filter(|e| e["type"] == "status.update" && e["payload"]["kind"] == "handoff")
            .map(|e| e["payload"]["text"].as_str().expect("state"))
            .collect();
        let want: Vec<&str> = ["pending", "failed"]
            .into_iter()
            .cycle()
            .take(*transitions)
            .collect();
        assert_eq!(states, want, "each handoff transition announced once");
    }
    // And with nobody attached, every one of them parks in the end.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let listed = setup.ok("session.list", json!({})).await;
        let parked = listed["sessions"]
            .as_array()
            .expect("sessions")
            .iter()
            .filter(|s| s["status"] == "parked")
            .count();
        if parked == CLIENTS {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not every session parked: {listed}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
