//! Black-box tests of the handoff queue (PROTOCOL.md 1.4 "Handoff") over WebSocket JSON-RPC.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

use common::Backend;

use common::{tempdir, Client, Gateway};
use serde_json::{json, Value};

/// A new session (not attached) in `profile`; its id.
/// A session of `profile` that `c` does not attach to.
async fn detached_session(c: &mut Client, profile: &str) -> String {
    let r = c
        .ok(
            "session.create",
            json!({"profile": profile, "attach": false}),
        )
        .await;
    r["session"]["session_id"]
        .as_str()
        .expect("session_id")
        .to_string()
}

async fn request(c: &mut Client, session_id: &str, target: &str) -> String {
    let r = c
        .ok(
            "handoff.request",
            json!({"session_id": session_id, "target": target}),
        )
        .await;
    assert_eq!(r["state"], "pending", "{r}");
    let id = r["handoff_id"].as_str().expect("handoff_id").to_string();
    assert!(id.starts_with("h_"), "{id}");
    id
}

async fn state_of(c: &mut Client, session_id: &str) -> Value {
    c.ok("handoff.state", json!({"session_id": session_id}))
        .await["handoff"]
        .clone()
}

async fn a_handoff_goes_pending_running_completed_and_one_at_a_time(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &[]);
    let mut c = gw.client().await;
    let s = detached_session(&mut c, "default").await;

    assert_eq!(state_of(&mut c, &s).await, Value::Null);
    let h = request(&mut c, &s, "phone").await;
    assert_eq!(
        state_of(&mut c, &s).await,
        json!({"handoff_id": h, "session_id": s, "target": "phone", "state": "pending", "error": null})
    );

    // One in flight per session: 4090 while pending.
    let e = c
        .err(
            "handoff.request",
            json!({"session_id": s, "target": "laptop"}),
        )
        .await;
    assert_eq!(e["code"], 4090, "{e}");
    // Completing a pending handoff is a conflict, and changes nothing.
    let e = c.err("handoff.complete", json!({"handoff_id": h})).await;
    assert_eq!(e["code"], 4090, "{e}");

    // Nothing pending for another target.
    let r = c.ok("handoff.claim", json!({"target": "laptop"})).await;
    assert_eq!(r, json!({"handoff": null}));
    let r = c.ok("handoff.claim", json!({"target": "phone"})).await;
    assert_eq!(
        r,
        json!({"handoff": {"handoff_id": h, "session_id": s, "target": "phone", "state": "running"}})
    );
    assert_eq!(state_of(&mut c, &s).await["state"], "running");
    let r = c.ok("handoff.claim", json!({"target": "phone"})).await;
    assert_eq!(r, json!({"handoff": null}), "claimed twice");

    // 4090 while running too.
    let e = c
        .err(
            "handoff.request",
            json!({"session_id": s, "target": "phone"}),
        )
        .await;
    assert_eq!(e["code"], 4090, "{e}");

    let r = c.ok("handoff.complete", json!({"handoff_id": h})).await;
    assert_eq!(r, json!({"state": "completed"}));
    assert_eq!(
        state_of(&mut c, &s).await,
        json!({"handoff_id": h, "session_id": s, "target": "phone", "state": "completed", "error": null})
    );
    // A second completion is a conflict: the handoff is no longer running.
    let e = c.err("handoff.complete", json!({"handoff_id": h})).await;
    assert_eq!(e["code"], 4090, "{e}");

    // Finished: a new request is allowed and is now the latest.
    let h2 = request(&mut c, &s, "laptop").await;
    assert_ne!(h2, h);
    let latest = state_of(&mut c, &s).await;
    assert_eq!(latest["handoff_id"], h2.as_str());
    assert_eq!(latest["state"], "pending");
}

async fn fail_respects_only_if_pending_and_truncates_the_error_to_500_bytes(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &[]);
    let mut c = gw.client().await;

    // only_if_pending fails a pending handoff.
    let s1 = detached_session(&mut c, "default").await;
    let h1 = request(&mut c, &s1, "phone").await;
    let r = c
        .ok(
            "handoff.fail",
            json!({"handoff_id": h1, "error": "nobody came", "only_if_pending": true}),
        )
        .await;
    assert_eq!(r, json!({"failed": true, "state": "failed"}));
    let st = state_of(&mut c, &s1).await;
    assert_eq!(st["state"], "failed");
    assert_eq!(st["error"], "nobody came");
    // A failed handoff is never claimed, and the session may ask again.
    let r = c.ok("handoff.claim", json!({"target": "phone"})).await;
    assert_eq!(r["handoff"], Value::Null);
    let again = request(&mut c, &s1, "phone").await;
    assert_ne!(again, h1);

    // only_if_pending never fails a running handoff: it answers the state, unchanged.
    let s2 = detached_session(&mut c, "default").await;
    let h2 = request(&mut c, &s2, "tablet").await;
    let claimed = c.ok("handoff.claim", json!({"target": "tablet"})).await;
    assert_eq!(claimed["handoff"]["handoff_id"], h2.as_str());
    let r = c
        .ok(
            "handoff.fail",
            json!({"handoff_id": h2, "error": "late", "only_if_pending": true}),
        )
        .await;
    assert_eq!(r, json!({"failed": false, "state": "running"}));
    assert_eq!(state_of(&mut c, &s2).await["state"], "running");
    assert_eq!(state_of(&mut c, &s2).await["error"], Value::Null);

    // Without it the running handoff fails; the error keeps at most 500 bytes, cut at a
    // character boundary: 499 bytes of ASCII, then "é" (2 bytes) would end at byte 501.
    let long = format!("{}é{}", "x".repeat(499), "ü".repeat(300));
    let r = c
        .ok("handoff.fail", json!({"handoff_id": h2, "error": long}))
        .await;
    assert_eq!(r, json!({"failed": true, "state": "failed"}));
    let st = state_of(&mut c, &s2).await;
    assert_eq!(st["state"], "failed");
    assert_eq!(st["error"], "x".repeat(499).as_str());

    // An error of multi-byte characters only: 250 × "é" is exactly 500 bytes and is kept.
    let s3 = detached_session(&mut c, "default").await;
    let h3 = request(&mut c, &s3, "tv").await;
    let r = c
        .ok(
            "handoff.fail",
            json!({"handoff_id": h3, "error": "é".repeat(400)}),
        )
        .await;
    assert_eq!(r["failed"], true);
    let err = state_of(&mut c, &s3).await["error"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(err, "é".repeat(250));

    // A finished handoff is reported as it is.
    let r = c
        .ok("handoff.fail", json!({"handoff_id": h3, "error": "again"}))
        .await;
    assert_eq!(r, json!({"failed": false, "state": "failed"}));

    // An unknown handoff id is 4090; a non-string one -32602.
    let e = c
        .err(
            "handoff.fail",
            json!({"handoff_id": "h_nope", "error": "x"}),
        )
        .await;
    assert_eq!(e["code"], 4090, "{e}");
    let e = c.err("handoff.complete", json!({"handoff_id": 7})).await;
    assert_eq!(e["code"], -32602, "{e}");
}

async fn handoffs_are_scoped_by_profile(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &[]);
    let mut c = gw.client().await;
    let s = detached_session(&mut c, "alice").await;

    // Another profile's session is 4001, as is an unknown one.
    for (params, what) in [
        (
            json!({"session_id": s, "profile": "bob", "target": "phone"}),
            "bob's request",
        ),
        (
            json!({"session_id": "s_nope", "profile": "alice", "target": "phone"}),
            "unknown session",
        ),
    ] {
        let e = c.err("handoff.request", params).await;
        assert_eq!(e["code"], 4001, "{what}: {e}");
    }
    let e = c
        .err("handoff.state", json!({"session_id": s, "profile": "bob"}))
        .await;
    assert_eq!(e["code"], 4001, "{e}");

    let r = c
        .ok(
            "handoff.request",
            json!({"session_id": s, "profile": "alice", "target": "phone"}),
        )
        .await;
    let h = r["handoff_id"].as_str().unwrap().to_string();

    // Bob cannot see, claim, complete or fail alice's handoff.
    let r = c
        .ok(
            "handoff.claim",
            json!({"profile": "bob", "target": "phone"}),
        )
        .await;
    assert_eq!(r["handoff"], Value::Null);
    let e = c
        .err(
            "handoff.complete",
            json!({"handoff_id": h, "profile": "bob"}),
        )
        .await;
    assert_eq!(e["code"], 4090, "{e}");
    assert!(
        e["message"].as_str().unwrap().contains("does not exist"),
        "{e}"
    );
    let e = c
        .err(
            "handoff.fail",
            json!({"handoff_id": h, "profile": "bob", "error": "mine now"}),
        )
        .await;
    assert_eq!(e["code"], 4090, "{e}");

    // Alice's handoff is untouched, and alice can claim it.
    let st = c
        .ok(
            "handoff.state",
            json!({"session_id": s, "profile": "alice"}),
        )
        .await;
    assert_eq!(st["handoff"]["state"], "pending");
    let r = c
        .ok(
            "handoff.claim",
            json!({"profile": "alice", "target": "phone"}),
        )
        .await;
    assert_eq!(r["handoff"]["handoff_id"], h.as_str());
}

async fn a_closed_session_cannot_be_handed_off_but_its_state_stays_readable(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &[]);
    let mut c = gw.client().await;
    let s = detached_session(&mut c, "default").await;
    let h = request(&mut c, &s, "phone").await;
    c.ok(
        "handoff.fail",
        json!({"handoff_id": h, "error": "cancelled"}),
    )
    .await;
    c.ok("session.close", json!({"session_id": s})).await;

    let e = c
        .err(
            "handoff.request",
            json!({"session_id": s, "target": "phone"}),
        )
        .await;
    assert_eq!(e["code"], 4002, "{e}");
    let st = state_of(&mut c, &s).await;
    assert_eq!(st["handoff_id"], h.as_str());
    assert_eq!(st["error"], "cancelled");

    // Right after the close's reply, while the session may still be stopping.
    for _ in 0..20 {
        let s = detached_session(&mut c, "default").await;
        c.ok("session.close", json!({"session_id": s})).await;
        let e = c
            .err(
                "handoff.request",
                json!({"session_id": s, "target": "phone"}),
            )
            .await;
        assert_eq!(e["code"], 4002, "{e}");
        assert_eq!(state_of(&mut c, &s).await, Value::Null);
    }
}

/// The durable `status.update` `{"kind":"handoff","text":STATE}` of each transition
/// reaches a peer attached to the session, in order, and is replayed by `events.since`.
async fn every_transition_is_a_durable_status_update_on_the_session(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &[]);
    let mut watcher = gw.client().await;
    let created = watcher.ok("session.create", json!({})).await;
    let s = created["session"]["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    let first = watcher.next_event().await;
    assert_eq!(first["type"], "session.created");

    let mut other = gw.client().await;
    let h1 = request(&mut other, &s, "phone").await;
    other.ok("handoff.claim", json!({"target": "phone"})).await;
    other
        .ok("handoff.complete", json!({"handoff_id": h1}))
        .await;
    let h2 = request(&mut other, &s, "phone").await;
    other
        .ok("handoff.fail", json!({"handoff_id": h2, "error": "gone"}))
        .await;
    // Refusals write nothing.
    other
        .err("handoff.complete", json!({"handoff_id": h2}))
        .await;
    other
        .ok(
            "handoff.fail",
            json!({"handoff_id": h2, "error": "x", "only_if_pending": true}),
        )
        .await;

    let expected = ["pending", "running", "completed", "pending", "failed"];
    let live = watcher.events(expected.len()).await;
    for (ev, state) in live.iter().zip(expected) {
        assert_eq!(ev["type"], "status.update", "{ev}");
        assert_eq!(ev["session_id"], s.as_str());
        assert_eq!(
            ev["payload"],
            json!({"kind": "handoff", "text": state}),
            "{ev}"
        );
    }
    let seqs = common::seqs(&live);
    assert_eq!(seqs, vec![2, 3, 4, 5, 6]);

    let since = other
        .ok(
            "session.events.since",
            json!({"session_id": s, "last_seen": 1}),
        )
        .await;
    assert_eq!(since["events"], json!(live));
    assert_eq!(since["latest_seq"], 6);
}

/// PROTOCOL: two claimers never get the same handoff. 100 trials, each with exactly one
/// pending handoff and two clients on separate connections whose claims are sent together.
async fn concurrent_claims_give_each_handoff_to_exactly_one_client_over_100_trials(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &[]);
    let mut setup = gw.client().await;
    let mut a = gw.client().await;
    let mut b = gw.client().await;
    let (mut wins_a, mut wins_b) = (0, 0);
    for trial in 0..100 {
        let s = detached_session(&mut setup, "default").await;
        let h = request(&mut setup, &s, "worker").await;
        let (ra, rb) = tokio::join!(
            a.ok("handoff.claim", json!({"target": "worker"})),
            b.ok("handoff.claim", json!({"target": "worker"})),
        );
        let (ha, hb) = (&ra["handoff"], &rb["handoff"]);
        match (ha.is_null(), hb.is_null()) {
            (false, true) => wins_a += 1,
            (true, false) => wins_b += 1,
            _ => panic!("trial {trial}: both or neither got {h}: {ra} / {rb}"),
        }
        let won = if ha.is_null() { hb } else { ha };
        assert_eq!(
            *won,
            json!({"handoff_id": h, "session_id": s, "target": "worker", "state": "running"}),
            "trial {trial}"
        );
        assert_eq!(state_of(&mut setup, &s).await["state"], "running");
    }
    assert_eq!(wins_a + wins_b, 100);
}

backends!(
    a_handoff_goes_pending_running_completed_and_one_at_a_time,
    fail_respects_only_if_pending_and_truncates_the_error_to_500_bytes,
    handoffs_are_scoped_by_profile,
    a_closed_session_cannot_be_handed_off_but_its_state_stays_readable,
    every_transition_is_a_durable_status_update_on_the_session,
    concurrent_claims_give_each_handoff_to_exactly_one_client_over_100_trials,
);
