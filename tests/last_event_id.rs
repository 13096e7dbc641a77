//! A `Last-Event-ID` tether never sent is 400 on every route that takes
//! one (docs/PROTOCOL.md 1.9 and "The AG-UI routes"): the SSE events of a
//! session (`SEQ`, and `?last_seen`) and an AG-UI thread's events
//! (`SEQ.STEP.TEXT.REASONING`). Tether writes its numbers as plain decimal
//! digits, and a step no further than its event has; `+3`, `03` or a step
//! 255 name nothing a resume could start from.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

use common::http::{http, Sse};
use common::{tempdir, Gateway};
use serde_json::json;

/// A finished AG-UI run on `thread`: the session id and the ids it sent.
async fn run(gw: &Gateway, thread: &str) -> (String, Vec<String>) {
    let body = json!({"threadId": thread, "runId": "r",
        "messages": [{"id": "m", "role": "user", "content": "hello there"}],
        "tools": [], "context": [], "state": {}, "forwardedProps": {}});
    let r = http(
        &gw.addr,
        "POST",
        "/v1/ag-ui",
        &[("content-type", "application/json")],
        body.to_string().as_bytes(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let session = r
        .header("x-tether-session-id")
        .expect("session header")
        .to_string();
    let ids = String::from_utf8_lossy(&r.body)
        .lines()
        .filter_map(|l| l.strip_prefix("id: "))
        .map(str::to_string)
        .collect();
    (session, ids)
}

async fn ag_ui_status(gw: &Gateway, thread: &str, id: &str) -> (u16, String) {
    let r = http(
        &gw.addr,
        "GET",
        &format!("/v1/ag-ui/threads/{thread}/events"),
        &[("last-event-id", id)],
        b"",
    )
    .await;
    (r.status, String::from_utf8_lossy(&r.body).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ag_ui_id_tether_never_sent_is_400() {
    let dir = tempdir();
    let gw = Gateway::start(dir.path(), &[]);
    let (_, ids) = run(&gw, "thread-1").await;
    let first = ids.first().expect("ids").clone();
    let seq = first.split('.').next().expect("seq").to_string();

    // What tether sent resumes (the run is over: nothing left, 204).
    for id in [&first, ids.last().expect("ids")] {
        let (status, body) = ag_ui_status(&gw, "thread-1", id).await;
        assert!(status == 200 || status == 204, "{id}: {status} {body}");
    }
    for never in [
        format!("{seq}.255.0.0"),
        format!("+{seq}.1.0.0"),
        format!("0{seq}.1.0.0"),
        format!("{seq}.+1.0.0"),
        format!("{seq}.1.00.0"),
    ] {
        let (status, body) = ag_ui_status(&gw, "thread-1", &never).await;
        assert_eq!(status, 400, "{never}: {body}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sse_watermark_tether_never_sent_is_400() {
    let dir = tempdir();
    let gw = Gateway::start(dir.path(), &[]);
    let (session, _) = run(&gw, "thread-2").await;
    let path = format!("/v1/sessions/{session}/events");

    assert!(Sse::open(&gw.addr, &path, &[("Last-Event-ID", "2")])
        .await
        .is_ok());
    assert!(Sse::open(&gw.addr, &format!("{path}?last_seen=0"), &[])
        .await
        .is_ok());
    for never in ["+2", "02", "2.0", "-0"] {
        let r = Sse::open(&gw.addr, &path, &[("Last-Event-ID", never)]).await;
        assert_eq!(
            r.err().map(|r| r.status),
            Some(400),
            "Last-Event-ID {never}"
        );
        let query = never.replace('+', "%2B");
        let r = Sse::open(&gw.addr, &format!("{path}?last_seen={query}"), &[]).await;
        assert_eq!(r.err().map(|r| r.status), Some(400), "last_seen={never}");
    }
}
