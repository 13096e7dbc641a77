//! `SessionInfo.attached` (PROTOCOL Part 4): who is attached to a session
//! and over which transport, where the session answers about itself, while
//! `peers` stays the count everywhere.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

use std::time::{Duration, Instant};

use common::{tempdir, Client, Gateway};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The `attached` of a non-attaching resume, as (peer_id, transport).
async fn attached(c: &mut Client, id: &str) -> Vec<(String, String)> {
    let r = c
        .ok(
            "session.resume",
            json!({"session_id": id, "attach": false, "omit_messages": true}),
        )
        .await;
    let session = &r["session"];
    let list = session["attached"]
        .as_array()
        .unwrap_or_else(|| panic!("no attached in {session}"));
    assert_eq!(
        session["peers"].as_u64(),
        Some(list.len() as u64),
        "peers is the count of attached: {session}"
    );
    list.iter()
        .map(|p| {
            let field = |k: &str| p[k].as_str().unwrap_or_default().to_string();
            (field("peer_id"), field("transport"))
        })
        .collect()
}

fn peer_id(c: &Client) -> String {
    c.ready["peer_id"].as_str().expect("peer_id").to_string()
}

#[tokio::test]
async fn attached_names_each_peer_and_its_transport() {
    let dir = tempdir();
    let gw = Gateway::start(dir.path(), &[]);

    // The creator attaches: the answer names it.
    let mut a = gw.client().await;
    let created = a.ok("session.create", json!({"title": "who"})).await;
    let id = created["session"]["session_id"]
        .as_str()
        .expect("id")
        .to_string();
    assert_eq!(
        created["session"]["attached"],
        json!([{"peer_id": peer_id(&a), "transport": "ws"}])
    );

    // A second WebSocket peer and an SSE stream join.
    let mut b = gw.client().await;
    b.ok("session.resume", json!({"session_id": id})).await;
    let mut sse = TcpStream::connect(&gw.addr).await.expect("connect");
    let head = format!(
        "GET /v1/sessions/{id}/events HTTP/1.1\r\nHost: {}\r\nLast-Event-ID: 0\r\n\r\n",
        gw.addr
    );
    sse.write_all(head.as_bytes()).await.expect("write");
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(common::FRAME_WAIT, sse.read(&mut buf))
        .await
        .expect("the stream answers")
        .expect("read");
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));

    // A peer that is not attached asks (and is not in the list).
    let mut watcher = gw.client().await;
    let mut want = vec![
        (peer_id(&a), "ws".to_string()),
        (peer_id(&b), "ws".to_string()),
    ];
    want.sort();
    let got = attached(&mut watcher, &id).await;
    let ws: Vec<(String, String)> = got.iter().filter(|p| p.1 == "ws").cloned().collect();
    assert_eq!(ws, want, "both WebSocket peers, by id: {got:?}");
    assert_eq!(
        got.iter().filter(|p| p.1 == "sse").count(),
        1,
        "the SSE stream: {got:?}"
    );
    assert_eq!(got.len(), 3, "{got:?}");

    // A listing carries the count only.
    let list = watcher.ok("session.list", json!({})).await;
    let entry: &Value = &list["sessions"][0];
    assert_eq!(entry["peers"], 3, "{entry}");
    assert!(entry.get("attached").is_none(), "{entry}");

    // A peer that leaves leaves the list.
    b.close().await;
    drop(sse);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let got = attached(&mut watcher, &id).await;
        if got == [(peer_id(&a), "ws".to_string())] {
            break;
        }
        assert!(Instant::now() < deadline, "still attached: {got:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
