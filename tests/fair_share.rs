//! The fair share of compute-host slots, black-box against the real
//! binary: with every slot full, a profile that queued fifty turns delays
//! another profile's single turn by one slot's turn, not by fifty.
//!
//! Counted in starts, not milliseconds: the gateway runs two hosts of one
//! turn each, profile `a` fills both and queues 48 more, `b` then submits
//! one, and `b`'s `message.start` must come before a third of `a`'s. The
//! echo engine's `/sleep` spaces the starts out by seconds (`a`'s first
//! turn ends after 500 ms, its second after 8 s, `b`'s after 8 s), so the
//! order in which the two clients see their starts is the gateway's.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

use std::time::Duration;

use common::{session, tempdir, Client, Gateway};
use serde_json::{json, Value};

const A: &str = "a-token";
const B: &str = "b-token";

/// How long anything here may take before the test gives up.
const DEADLINE: Duration = Duration::from_secs(60);

async fn as_profile(gw: &Gateway, token: &str) -> Client {
    Client::connect(&format!("{}?token={token}", gw.url())).await
}

async fn submit(c: &mut Client, session_id: &str, text: &str) {
    let r = c
        .ok(
            "prompt.submit",
            json!({"session_id": session_id, "text": text}),
        )
        .await;
    assert_eq!(r["status"], "started", "{r}");
}

/// The next event of `c` that is a `message.start`, its session id.
async fn next_start(c: &mut Client) -> String {
    loop {
        let e: Value = c.next_event().await;
        if e["type"] == "message.start" {
            return e["session_id"].as_str().expect("session_id").to_string();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_profiles_backlog_delays_anothers_turn_by_one_slot_at_most() {
    let dir = tempdir();
    let gw = Gateway::start(
        dir.path(),
        &[
            "--hosts",
            "2",
            "--host-max-turns",
            "1",
            "--token",
            &format!("a:{A}"),
            "--token",
            &format!("b:{B}"),
        ],
    );
    let mut a = as_profile(&gw, A).await;
    let mut b = as_profile(&gw, B).await;

    let mut a_sessions = Vec::new();
    for _ in 0..50 {
        a_sessions.push(session(&mut a).await);
    }
    // The first ends soon and frees a slot; the second holds the other.
    submit(&mut a, &a_sessions[0], "/sleep 500\nfirst").await;
    submit(&mut a, &a_sessions[1], "/sleep 8000\nsecond").await;
    for id in &a_sessions[2..] {
        submit(&mut a, id, "/sleep 8000\nlater").await;
    }
    let b_session = session(&mut b).await;
    submit(&mut b, &b_session, "/sleep 8000\nb's only turn").await;

    // `a`'s starts as they come, until `b`'s turn starts.
    let mut a_started = Vec::new();
    let outcome = tokio::time::timeout(DEADLINE, async {
        loop {
            tokio::select! {
                id = next_start(&mut a) => {
                    a_started.push(id);
                    if a_started.len() > 2 {
                        return Err(a_started.len());
                    }
                }
                id = next_start(&mut b) => {
                    assert_eq!(id, b_session);
                    return Ok(a_started.len());
                }
            }
        }
    })
    .await
    .expect("b's turn never started");
    match outcome {
        Ok(n) => assert!(n <= 2, "b started after {n} of a's turns"),
        Err(n) => panic!("{n} of a's turns started while b's single turn still waited"),
    }
    // The two that ran first were `a`'s first two, in order.
    assert_eq!(a_started, a_sessions[..2].to_vec());
}

/// A turn waiting for room is the session's running turn: it can be
/// interrupted while it waits, ends once (never started on a host), and
/// leaves no trace in the queue: the next turn runs when room comes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_waiting_for_room_ends_once_when_interrupted() {
    let dir = tempdir();
    let gw = Gateway::start(dir.path(), &["--hosts", "1", "--host-max-turns", "1"]);
    let mut c = gw.client().await;
    let busy = session(&mut c).await;
    let waiting = session(&mut c).await;
    submit(&mut c, &busy, "/sleep 1500\nholds the only slot").await;
    assert_eq!(next_start(&mut c).await, busy);
    // Accepted (the session runs it), but no host has room.
    let r = c
        .ok(
            "prompt.submit",
            // Were it started after all, it would hold the only slot far
            // past the test's wait for the next turn.
            json!({"session_id": waiting, "text": "/sleep 60000\nwaits"}),
        )
        .await;
    assert_eq!(r["status"], "started", "{r}");
    let turn = r["turn_id"].as_str().expect("turn_id").to_string();
    let r = c
        .ok("session.interrupt", json!({"session_id": waiting}))
        .await;
    assert_eq!(r["status"], "interrupted", "{r}");

    // The slot frees; the interrupted turn never takes it, and the next
    // prompt of that session runs.
    let next = common::submit(&mut c, &waiting, "after").await;
    let events = common::turn_events(&mut c, &next).await;
    assert_eq!(common::complete(&events)["status"], "complete");
    let stored = common::all_events(&mut c, &waiting).await;
    let of_turn: Vec<&str> = stored
        .iter()
        .filter(|e| e["turn_id"] == turn.as_str())
        .map(|e| e["type"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        of_turn.iter().filter(|t| **t == "message.complete").count(),
        1,
        "{of_turn:?}"
    );
    assert!(!of_turn.contains(&"message.start"), "{of_turn:?}");
    let ended = stored
        .iter()
        .find(|e| e["turn_id"] == turn.as_str() && e["type"] == "message.complete")
        .expect("its ending");
    assert_eq!(ended["payload"]["status"], "interrupted", "{ended}");
}
