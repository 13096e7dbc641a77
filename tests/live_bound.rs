//! `--max-live-sessions` is a bound on the sessions a gateway keeps live
//! (PROTOCOL 1.7, Part 4 "Disconnects"): a burst of creations past it
//! parks the least recently active idle orphans, so that every answer to a
//! creation finds no more sessions live than the bound (sessions a peer
//! holds, or a turn, are the only ones allowed past it), and every session
//! parked that way is brought back by a resume with nothing lost.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

use common::{tempdir, Client, Gateway};
use serde_json::{json, Value};

const CAP: u64 = 20;
const BURST: usize = 200;

/// `sessions_live` as `session.events.stats` reports it.
async fn live(c: &mut Client) -> u64 {
    let r = c.ok("session.events.stats", json!({})).await;
    r["sessions_live"].as_u64().expect("sessions_live")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_creations_never_passes_the_live_bound() {
    let dir = tempdir();
    let cap = CAP.to_string();
    // A long grace: only the bound may park anything here. No rate limit:
    // one client sends every request.
    let gw = Gateway::start(
        dir.path(),
        &[
            "--max-live-sessions",
            &cap,
            "--orphan-grace-s",
            "3600",
            "--rate-limit-rps",
            "0",
        ],
    );
    let mut c = gw.client().await;
    let mut ids = Vec::new();
    let mut most = 0;
    for i in 0..BURST {
        let r = c
            .ok(
                "session.create",
                json!({"title": format!("s{i}"), "attach": false,
                       "messages": [{"role": "user", "text": format!("m{i}")}]}),
            )
            .await;
        ids.push(r["session"]["session_id"].as_str().expect("id").to_string());
        let n = live(&mut c).await;
        most = most.max(n);
        assert!(
            n <= CAP,
            "{n} sessions live after creation {i}, over --max-live-sessions {CAP}"
        );
    }
    println!("at most {most} sessions live during a burst of {BURST}");
    // Parked, not lost: every session comes back whole. (Each resume brings
    // one live again; the bound parks another, least recently active first.)
    for (i, id) in ids.iter().enumerate() {
        let r: Value = c
            .ok("session.resume", json!({"session_id": id, "attach": false}))
            .await;
        assert_eq!(r["latest_seq"], 2, "{r}");
        assert_eq!(r["messages"][0]["text"], format!("m{i}"), "{r}");
        let n = live(&mut c).await;
        assert!(n <= CAP, "{n} sessions live after resuming {i}");
    }
    // Sessions with a peer are never parked by the bound: past it they stay.
    let mut holders = Vec::new();
    for _ in 0..(CAP as usize + 5) {
        let mut h = gw.client().await;
        h.ok("session.create", json!({"title": "held"})).await;
        holders.push(h);
    }
    assert_eq!(live(&mut c).await, CAP + 5);
}
