//! Compute-host slots seen from a client, black-box against the real
//! binary: a slot past its restart intensity rests and comes back (issue
//! 15), work that needs a host waits for a starting one, and `/readyz` is
//! ready only once a host has said hello.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

use common::Backend;

use std::time::Duration;

use common::{complete, session, submit, tempdir, turn_events, Client, Gateway};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Generous bound for anything that comes by itself (a rest, a hello).
const DEADLINE: Duration = Duration::from_secs(60);

/// `GET /readyz`: (status, body).
async fn readyz(addr: &str) -> (u16, String) {
    let mut tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let head = format!("GET /readyz HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    tcp.write_all(head.as_bytes()).await.expect("write");
    let mut raw = Vec::new();
    tokio::time::timeout(common::FRAME_WAIT, tcp.read_to_end(&mut raw))
        .await
        .expect("timed out waiting for /readyz")
        .expect("read");
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {text:?}"));
    let body = text
        .split("\r\n\r\n")
        .nth(1)
        .unwrap_or_default()
        .to_string();
    (status, body)
}

async fn hosts(c: &mut Client) -> Vec<Value> {
    let s = c.ok("session.events.stats", json!({})).await;
    s["hosts"].as_array().expect("hosts").clone()
}

/// Creates a session (attached) and drains its `session.created`.
/// The reads a client does while no host is up must keep working.
async fn reads_work(c: &mut Client, id: &str) {
    let list = c.ok("session.list", json!({})).await;
    assert!(
        list["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["session_id"] == id),
        "{list}"
    );
    let since = c
        .ok(
            "session.events.since",
            json!({"session_id": id, "last_seen": 0}),
        )
        .await;
    assert!(!since["events"].as_array().unwrap().is_empty(), "{since}");
}

/// One client crashing every slot past its budget takes the hosts down
/// only until the restart period has passed: then the slots come back on
/// their own, `/readyz` is ready again and prompts complete, while reads
/// kept working throughout.
async fn slots_past_their_restart_intensity_rest_and_come_back_after_the_period(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(
        &b,
        dir.path(),
        &[
            "--hosts",
            "2",
            "--host-restarts",
            "1",
            // Long enough that both slots rest at once however slowly the
            // crashes come, short enough for a test.
            "--host-restart-period-s",
            "4",
        ],
    );
    let mut c = gw.client().await;
    let mut reader = gw.client().await;
    let id = session(&mut c).await;

    // Crash the hosts until no slot is left: 5019, nothing written.
    let mut crashes = 0;
    loop {
        let r = c
            .call("prompt.submit", json!({"session_id": id, "text": "/crash"}))
            .await;
        if r["error"]["code"] == 5019 {
            break;
        }
        let turn = r["result"]["turn_id"].as_str().expect("a turn").to_string();
        let done = complete(&turn_events(&mut c, &turn).await).clone();
        assert_eq!(done["status"], "error", "{done}");
        crashes += 1;
        assert!(crashes <= 20, "the slots never ran out of restarts");
        reads_work(&mut reader, &id).await;
    }
    assert!(crashes >= 3, "{crashes} crashes spent both budgets");
    let states: Vec<_> = hosts(&mut reader)
        .await
        .iter()
        .map(|h| h["state"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(states, ["resting", "resting"]);
    let (status, body) = readyz(&gw.addr).await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("no compute host up"), "{body}");

    // They come back by themselves once the period has passed.
    let until = tokio::time::Instant::now() + DEADLINE;
    loop {
        reads_work(&mut reader, &id).await;
        if readyz(&gw.addr).await.0 == 200 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < until,
            "the slots never came back: {:?}",
            hosts(&mut reader).await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let t = submit(&mut c, &id, "back again").await;
    let done = complete(&turn_events(&mut c, &t).await).clone();
    assert_eq!(done["status"], "complete", "{done}");
    assert_eq!(done["text"], "back again");
    // Every crash but the ones that began a rest was followed by a restart,
    // and at least one slot was retried after its rest (a restart too).
    let restarts: u64 = hosts(&mut reader)
        .await
        .iter()
        .map(|h| h["restarts"].as_u64().unwrap())
        .sum();
    assert!(
        restarts + 1 >= crashes,
        "{restarts} restarts for {crashes} crashes"
    );
}

/// `sh -c 'sleep S; exec tether host --engine echo'`: a host whose hello
/// comes S seconds after its start.
fn slow_host(seconds: u32) -> String {
    format!(
        "sh -c 'sleep {seconds}; exec {} host --engine echo'",
        env!("CARGO_BIN_EXE_tether")
    )
}

async fn readyz_is_ready_only_once_a_host_said_hello(b: Backend) {
    let dir = tempdir();
    let command = slow_host(2);
    let gw = Gateway::start_on(
        &b,
        dir.path(),
        &["--hosts", "1", "--host-command", &command],
    );
    let (status, body) = readyz(&gw.addr).await;
    assert_eq!(status, 503, "ready before any hello: {body}");
    assert!(body.contains("no compute host up"), "{body}");
    let mut c = gw.client().await;
    assert_eq!(hosts(&mut c).await[0]["state"], "starting");
    let until = tokio::time::Instant::now() + DEADLINE;
    while readyz(&gw.addr).await.0 != 200 {
        assert!(tokio::time::Instant::now() < until, "never ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(hosts(&mut c).await[0]["state"], "up");
}

/// Compressions and prompts sent at once after the listening line wait for
/// the hosts' hello instead of failing with 5019: with hosts that take a
/// second to say hello (always racing), and with the default ones.
async fn a_compress_and_a_submit_right_after_the_listening_line_succeed(b: Backend) {
    let slow = slow_host(1);
    let runs: Vec<Vec<&str>> = vec![
        vec!["--hosts", "1", "--host-command", &slow],
        vec!["--hosts", "2", "--host-command", &slow],
        vec![],
        vec![],
        vec![],
        vec![],
    ];
    for (run, flags) in runs.iter().enumerate() {
        for first in ["session.compress", "prompt.submit"] {
            let dir = tempdir();
            let gw = Gateway::start_on(&b, dir.path(), flags);
            let mut c = gw.client().await;
            let created = c
                .ok("session.create", json!({"title": "t", "attach": false}))
                .await;
            let id = created["session"]["session_id"]
                .as_str()
                .unwrap()
                .to_string();
            let compress = json!({"session_id": id});
            let prompt = json!({"session_id": id, "text": "right away"});
            if first == "session.compress" {
                let r = c.call("session.compress", compress).await;
                assert_eq!(r["result"]["status"], "compressed", "run {run}: {r}");
            } else {
                let r = c.call("prompt.submit", prompt).await;
                assert_eq!(r["result"]["status"], "started", "run {run}: {r}");
                // Not attached: the turn's end is read back from the store.
                let turn = r["result"]["turn_id"].clone();
                let until = tokio::time::Instant::now() + DEADLINE;
                loop {
                    let since = c
                        .ok(
                            "session.events.since",
                            json!({"session_id": id, "last_seen": 0}),
                        )
                        .await;
                    let done = since["events"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .find(|e| e["type"] == "message.complete" && e["turn_id"] == turn);
                    if let Some(done) = done {
                        assert_eq!(done["payload"]["status"], "complete", "run {run}: {done}");
                        assert_eq!(done["payload"]["text"], "right away");
                        break;
                    }
                    assert!(tokio::time::Instant::now() < until, "run {run}: no end");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }
}

backends!(
    slots_past_their_restart_intensity_rest_and_come_back_after_the_period,
    readyz_is_ready_only_once_a_host_said_hello,
    a_compress_and_a_submit_right_after_the_listening_line_succeed,
);
