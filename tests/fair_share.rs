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
