//! Retention, black-box, on both stores, with periods of a second and a
//! sweep every fifth of one: each rule does what it says and nothing more.
//!
//! - closed sessions are erased once closed for `--retain-closed-s`;
//! - parked sessions idle for `--retain-parked-s` are closed (a
//!   `session.closed` written), and later erased by the closed rule;
//! - a profile's `[profiles.NAME.retention]` overrides the default;
//! - a session's events beyond `--retain-max-events` are trimmed, but never
//!   its current segment: `messages` are unchanged, a replay from 0 says
//!   `truncated` and starts at the oldest kept event.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

use std::time::{Duration, Instant};

use common::{session_with, submit, tempdir, turn_events, Backend, Client, Gateway};
use serde_json::{json, Value};

/// How long a test waits for a sweep to have done something.
const SWEEP_WAIT: Duration = Duration::from_secs(15);

/// Polls the session's status (or error code) every 100 ms until it is
/// `want`, or fails after SWEEP_WAIT.
async fn until_status(q: &mut Client, id: &str, profile: &str, want: Value, what: &str) {
    let started = Instant::now();
    loop {
        let now = status(q, id, profile).await;
        if now == want {
            return;
        }
        assert!(
            started.elapsed() < SWEEP_WAIT,
            "never happened: {what} (now {now})"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The session's status as a listing tells it, or 4001 if it is not
/// listed.
async fn status(c: &mut Client, id: &str, profile: &str) -> Value {
    let listed = c
        .ok(
            "session.list",
            json!({"profile": profile, "include_closed": true, "limit": 500}),
        )
        .await;
    listed["sessions"]
        .as_array()
        .expect("sessions")
        .iter()
        .find(|s| s["session_id"] == id)
        .map_or(json!(4001), |s| s["status"].clone())
}

async fn closed_sessions_are_erased_per_profile(backend: Backend) {
    let dir = tempdir();
    let file = dir.path().join("tether.toml");
    std::fs::write(&file, "[profiles.keep.retention]\nclosed_s = 3600\n").expect("config");
    let gw = Gateway::start_on(
        &backend,
        dir.path(),
        &[
            "--config",
            file.to_str().expect("utf-8"),
            "--retain-closed-s",
            "1",
            "--retention-interval-s",
            "0.2",
        ],
    );
    let mut c = gw.client().await;
    let gone = session_with(&mut c, json!({"title": "closed"})).await;
    let open = session_with(&mut c, json!({"title": "open"})).await;
    let kept = session_with(&mut c, json!({"title": "kept", "profile": "keep"})).await;
    c.ok("session.close", json!({"session_id": gone})).await;
    c.ok(
        "session.close",
        json!({"session_id": kept, "profile": "keep"}),
    )
    .await;

    let mut q = gw.client().await;
    until_status(
        &mut q,
        &gone,
        "default",
        json!(4001),
        "the closed session is erased",
    )
    .await;
    // Not before its period: it was closed at least a second ago.
    assert_eq!(status(&mut q, &open, "default").await, "idle");
    assert_eq!(
        status(&mut q, &kept, "keep").await,
        "closed",
        "the profile's own period (an hour) applies to it"
    );
}

async fn idle_parked_sessions_are_closed_then_erased(backend: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(
        &backend,
        dir.path(),
        &[
            "--orphan-grace-s",
            "0",
            "--retain-parked-s",
            "1",
            "--retention-interval-s",
            "0.2",
        ],
    );
    let mut c = gw.client().await;
    let id = session_with(&mut c, json!({"title": "parked"})).await;
    c.ok("session.detach", json!({"session_id": id})).await;
    let mut q = gw.client().await;
    until_status(
        &mut q,
        &id,
        "default",
        json!("closed"),
        "the idle parked session is closed",
    )
    .await;
    let events = common::all_events(&mut q, &id).await;
    let last = events.last().expect("events");
    assert_eq!(last["type"], "session.closed", "{last}");
    drop(gw);

    // With the closed rule too, it goes altogether.
    let dir = tempdir();
    let gw = Gateway::start_on(
        &backend,
        dir.path(),
        &[
            "--orphan-grace-s",
            "0",
            "--retain-parked-s",
            "1",
            "--retain-closed-s",
            "0.5",
            "--retention-interval-s",
            "0.2",
        ],
    );
    let mut c = gw.client().await;
    let id = session_with(&mut c, json!({"title": "parked"})).await;
    c.ok("session.detach", json!({"session_id": id})).await;
    let mut q = gw.client().await;
    until_status(
        &mut q,
        &id,
        "default",
        json!(4001),
        "the idle parked session is closed and erased",
    )
    .await;
}

async fn old_segments_are_trimmed_the_current_one_kept(backend: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(
        &backend,
        dir.path(),
        &["--retain-max-events", "2", "--retention-interval-s", "0.2"],
    );
    let mut c = gw.client().await;
    let id = session_with(&mut c, json!({"title": "long"})).await;
    for i in 0..3 {
        let t = submit(&mut c, &id, &format!("before {i}")).await;
        turn_events(&mut c, &t).await;
    }
    let r = c.ok("session.compress", json!({"session_id": id})).await;
    assert_eq!(r["status"], "compressed", "{r}");
    let t = submit(&mut c, &id, "after").await;
    turn_events(&mut c, &t).await;
    let before = c
        .ok("session.resume", json!({"session_id": id, "attach": false}))
        .await;

    let mut q = gw.client().await;
    let since = eventually_truncated(&mut q, &id).await;
    // What is left starts at the compaction: the current segment is whole.
    let events = since["events"].as_array().expect("events");
    assert_eq!(events[0]["type"], "session.compacted", "{since}");
    let after = q
        .ok("session.resume", json!({"session_id": id, "attach": false}))
        .await;
    assert_eq!(
        after["messages"], before["messages"],
        "the transcript is kept"
    );
    assert_eq!(after["latest_seq"], before["latest_seq"]);
    // A resume from before the kept events says so.
    let r = q
        .ok(
            "session.resume",
            json!({"session_id": id, "attach": false, "last_seen": 0}),
        )
        .await;
    assert_eq!(r["truncated"], true, "{r}");
    // The session lives on.
    let t = submit(&mut c, &id, "still here").await;
    turn_events(&mut c, &t).await;
}

/// `session.events.since` from 0, once it says `truncated`.
async fn eventually_truncated(q: &mut Client, id: &str) -> Value {
    let started = Instant::now();
    loop {
        let since = q
            .ok(
                "session.events.since",
                json!({"session_id": id, "last_seen": 0}),
            )
            .await;
        if since["truncated"] == true {
            return since;
        }
        assert!(started.elapsed() < SWEEP_WAIT, "never trimmed: {since}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

backends!(
    closed_sessions_are_erased_per_profile,
    idle_parked_sessions_are_closed_then_erased,
    old_segments_are_trimmed_the_current_one_kept,
);
