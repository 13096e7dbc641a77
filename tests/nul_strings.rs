//! NUL (U+0000) in a request's strings is refused at the edge, the same on
//! both stores (PROTOCOL Part 4, "NUL in strings"): -32602 naming the
//! field, nothing written; an id holding a NUL names nothing (4001, 4090
//! for a handoff), never a storage error.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

use common::{session, tempdir, Backend, Client, Gateway};
use serde_json::{json, Value};

const NUL: &str = "a\u{0}b";

/// `method` with `params` is refused with `code` (and `field` for -32602).
async fn refused(c: &mut Client, method: &str, params: Value, code: i64, field: Option<&str>) {
    let e = c.err(method, params.clone()).await;
    assert_eq!(e["code"], code, "{method} {params}: {e}");
    if let Some(field) = field {
        assert_eq!(e["data"]["field"], field, "{method} {params}: {e}");
    }
}

async fn nul_is_refused_naming_the_field(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &[]);
    let mut c = gw.client().await;
    let id = session(&mut c).await;

    let cases = [
        ("session.create", json!({"title": NUL}), "title"),
        ("session.create", json!({"profile": NUL}), "profile"),
        (
            "session.create",
            json!({"messages": [{"role": "user", "text": NUL}]}),
            "messages[0].text",
        ),
        (
            "session.branch",
            json!({"session_id": id, "title": NUL}),
            "title",
        ),
        (
            "prompt.submit",
            json!({"session_id": id, "text": NUL}),
            "text",
        ),
        (
            "handoff.request",
            json!({"session_id": id, "target": NUL}),
            "target",
        ),
        ("handoff.claim", json!({"target": NUL}), "target"),
        ("session.list", json!({"profile": NUL}), "profile"),
        (
            "session.resume",
            json!({"session_id": id, "profile": NUL}),
            "profile",
        ),
    ];
    for (method, params, field) in cases {
        refused(&mut c, method, params, -32602, Some(field)).await;
    }
    // A handoff's error.
    let h = c
        .ok("handoff.request", json!({"session_id": id, "target": "t"}))
        .await;
    let hid = h["handoff_id"].as_str().expect("handoff_id").to_string();
    refused(
        &mut c,
        "handoff.fail",
        json!({"handoff_id": hid, "error": NUL}),
        -32602,
        Some("error"),
    )
    .await;
    // Ids holding a NUL name nothing.
    for method in [
        "session.resume",
        "session.close",
        "prompt.submit",
        "handoff.state",
    ] {
        let params = json!({"session_id": "s_\u{0}", "text": "x"});
        refused(&mut c, method, params, 4001, None).await;
    }
    refused(
        &mut c,
        "session.events.since",
        json!({"session_id": "s_\u{0}", "last_seen": 0}),
        4001,
        None,
    )
    .await;
    refused(
        &mut c,
        "handoff.complete",
        json!({"handoff_id": "h_\u{0}"}),
        4090,
        None,
    )
    .await;

    // Nothing was written: one session, unchanged, with its events only;
    // the handoff still pending.
    let list = c.ok("session.list", json!({})).await;
    let sessions = list["sessions"].as_array().expect("sessions");
    assert_eq!(sessions.len(), 1, "{list}");
    assert_eq!(sessions[0]["title"], "t", "{list}");
    let state = c.ok("handoff.state", json!({"session_id": id})).await;
    assert_eq!(state["handoff"]["state"], "pending", "{state}");
    let events = common::all_events(&mut c, &id).await;
    assert!(
        events.iter().all(|e| e["type"] != "message.user"),
        "a refused prompt left an event: {events:?}"
    );
    // And the gateway still serves both ways.
    let r = c
        .ok("session.create", json!({"title": "after", "attach": false}))
        .await;
    assert_eq!(r["session"]["title"], "after");
}

backends!(nul_is_refused_naming_the_field);
