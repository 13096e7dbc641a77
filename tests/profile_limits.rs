//! Per-profile limits, black-box against the real binary: one test per
//! limit. Each checks the refusal (4290 with `data.limit` naming the limit,
//! or HTTP 429 for a connection), that the refused request wrote nothing,
//! and that the profile's other work and another profile go on.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

use std::time::Duration;

use common::http::{read_head, Sse};
use common::{all_events, complete, session, tempdir, turn_events, Client, Gateway};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

const A: &str = "a-token";
const B: &str = "b-token";

/// How long something that frees by itself (a closed connection) may take.
const DEADLINE: Duration = Duration::from_secs(20);

fn start(dir: &std::path::Path, limits: &[&str]) -> Gateway {
    let mut args = vec![
        "--token".to_string(),
        format!("a:{A}"),
        "--token".to_string(),
        format!("b:{B}"),
    ];
    for l in limits {
        args.push("--profile-limit".into());
        args.push(l.to_string());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Gateway::start(dir, &args)
}

async fn as_profile(gw: &Gateway, token: &str) -> Client {
    Client::connect(&format!("{}?token={token}", gw.url())).await
}

/// Asserts a 4290 naming `limit` with `max`; returns its `data`.
fn assert_limit(error: &Value, limit: &str, max: u64) -> Value {
    assert_eq!(error["code"], 4290, "{error}");
    assert_eq!(error["message"], "profile limit reached", "{error}");
    assert_eq!(error["data"]["limit"], limit, "{error}");
    assert_eq!(error["data"]["max"], max, "{error}");
    error["data"].clone()
}

async fn session_ids(c: &mut Client) -> Vec<String> {
    let list = c.ok("session.list", json!({})).await;
    list["sessions"]
        .as_array()
        .expect("sessions")
        .iter()
        .map(|s| s["session_id"].as_str().expect("id").to_string())
        .collect()
}

/// Submits `text`; the answer's `(status, turn_id)`.
async fn submit(c: &mut Client, id: &str, text: &str) -> (String, String) {
    let r = c
        .ok("prompt.submit", json!({"session_id": id, "text": text}))
        .await;
    (
        r["status"].as_str().expect("status").to_string(),
        r["turn_id"].as_str().expect("turn_id").to_string(),
    )
}

async fn users(c: &mut Client, id: &str) -> usize {
    all_events(c, id)
        .await
        .iter()
        .filter(|e| e["type"] == "message.user")
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_sessions_refuse_a_new_session_and_nothing_else() {
    let dir = tempdir();
    let gw = start(dir.path(), &["a:live_sessions=2"]);
    let mut a = as_profile(&gw, A).await;
    let s1 = session(&mut a).await;
    let _s2 = session(&mut a).await;

    let err = a.err("session.create", json!({"title": "third"})).await;
    let data = assert_limit(&err, "live_sessions", 2);
    assert!(
        data.get("retry_after_ms").is_none(),
        "waiting alone does not help: {data}"
    );
    // Nothing written: still two sessions.
    assert_eq!(session_ids(&mut a).await.len(), 2);

    // The profile's sessions still work.
    let (status, turn) = submit(&mut a, &s1, "still here").await;
    assert_eq!(status, "started");
    let events = turn_events(&mut a, &turn).await;
    assert_eq!(complete(&events)["status"], "complete");

    // Another profile is not limited by it (only the default, none).
    let mut b = as_profile(&gw, B).await;
    for _ in 0..3 {
        session(&mut b).await;
    }
    assert_eq!(session_ids(&mut b).await.len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn running_turns_refuse_a_prompt_that_would_run() {
    let dir = tempdir();
    let gw = start(dir.path(), &["a:running_turns=1"]);
    let mut a = as_profile(&gw, A).await;
    let s1 = session(&mut a).await;
    let s2 = session(&mut a).await;
    let (status, first) = submit(&mut a, &s1, "/sleep 1500\nfirst").await;
    assert_eq!(status, "started");

    let err = a
        .err("prompt.submit", json!({"session_id": s2, "text": "second"}))
        .await;
    let data = assert_limit(&err, "running_turns", 1);
    assert!(data.get("retry_after_ms").is_none(), "{data}");
    assert_eq!(
        users(&mut a, &s2).await,
        0,
        "a refused prompt writes nothing"
    );

    // The running session may still queue behind its turn: that is not
    // one more running.
    let (status, queued) = submit(&mut a, &s1, "behind it").await;
    assert_eq!(status, "queued");

    // Another profile runs at the same time.
    let mut b = as_profile(&gw, B).await;
    let sb = session(&mut b).await;
    let (status, b_turn) = submit(&mut b, &sb, "b runs").await;
    assert_eq!(status, "started");
    assert_eq!(
        complete(&turn_events(&mut b, &b_turn).await)["status"],
        "complete"
    );

    // Both of a's accepted turns end; then s2 may run.
    assert_eq!(
        complete(&turn_events(&mut a, &first).await)["status"],
        "complete"
    );
    assert_eq!(
        complete(&turn_events(&mut a, &queued).await)["status"],
        "complete"
    );
    let (status, later) = submit(&mut a, &s2, "now").await;
    assert_eq!(status, "started");
    assert_eq!(
        complete(&turn_events(&mut a, &later).await)["status"],
        "complete"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_turns_refuse_a_prompt_that_would_wait() {
    let dir = tempdir();
    let gw = start(dir.path(), &["a:queued_turns=1"]);
    let mut a = as_profile(&gw, A).await;
    let s1 = session(&mut a).await;
    let s2 = session(&mut a).await;
    let (_, t1) = submit(&mut a, &s1, "/sleep 1500\none").await;
    let (status, q1) = submit(&mut a, &s1, "queued one").await;
    assert_eq!(status, "queued");
    let (status, t2) = submit(&mut a, &s2, "/sleep 1500\ntwo").await;
    assert_eq!(status, "started", "running turns have no limit here");

    let err = a
        .err(
            "prompt.submit",
            json!({"session_id": s2, "text": "queued two"}),
        )
        .await;
    assert_limit(&err, "queued_turns", 1);
    assert_eq!(
        users(&mut a, &s2).await,
        1,
        "only the running turn's prompt"
    );

    // Another profile queues as it likes.
    let mut b = as_profile(&gw, B).await;
    let sb = session(&mut b).await;
    submit(&mut b, &sb, "/sleep 500\nb").await;
    for _ in 0..2 {
        let (status, _) = submit(&mut b, &sb, "b queued").await;
        assert_eq!(status, "queued");
    }

    // Every accepted turn of a completes, none dropped.
    all_complete(&mut a, &[t1, q1, t2]).await;
}

/// `multitask: interrupt` and `rollback` stop the running turn and put the
/// new prompt in its place: under a `running_turns` or `queued_turns`
/// limit the profile holds no more turns than before, so the prompt is
/// accepted. (It was refused 4290 after the turn had already been
/// stopped: a refused request that changed something.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preempting_prompt_takes_the_place_of_the_turn_it_stops() {
    let dir = tempdir();
    let gw = start(dir.path(), &["a:running_turns=1,queued_turns=1"]);
    let mut a = as_profile(&gw, A).await;
    let s1 = session(&mut a).await;
    let (_, first) = submit(&mut a, &s1, "/sleep 30000\nfirst").await;

    // Running turns at their limit: an interrupt takes the running place.
    let r = a
        .ok(
            "prompt.submit",
            json!({"session_id": s1, "text": "/sleep 30000\ninstead", "multitask": "interrupt"}),
        )
        .await;
    assert_eq!(r["status"], "started", "{r}");
    let second = r["turn_id"].as_str().expect("turn_id").to_string();
    let ended = complete(&turn_events(&mut a, &first).await).clone();
    assert_eq!(ended["status"], "interrupted", "{ended}");

    // Queued turns at their limit too: an interrupt stops the running
    // turn, the queued one moves up, and the prompt takes its place in
    // the queue.
    let (status, queued) = submit(&mut a, &s1, "/sleep 30000\nqueued").await;
    assert_eq!(status, "queued");
    let r = a
        .ok(
            "prompt.submit",
            json!({"session_id": s1, "text": "behind", "multitask": "interrupt"}),
        )
        .await;
    assert_eq!(r["status"], "queued", "{r}");
    let behind = r["turn_id"].as_str().expect("turn_id").to_string();
    let ended = complete(&turn_events(&mut a, &second).await).clone();
    assert_eq!(ended["status"], "interrupted", "{ended}");

    // A rollback drops the queue and runs in the running turn's place.
    let r = a
        .ok(
            "prompt.submit",
            json!({"session_id": s1, "text": "over", "multitask": "rollback"}),
        )
        .await;
    assert_eq!(r["status"], "started", "{r}");
    let over = r["turn_id"].as_str().expect("turn_id").to_string();
    let mut ended = std::collections::HashMap::new();
    while ended.len() < 3 {
        let e = a.next_event().await;
        let turn = e["turn_id"].as_str().unwrap_or_default().to_string();
        if e["type"] == "message.complete" && [&queued, &behind, &over].contains(&&turn) {
            ended.insert(turn, e["payload"]["status"].clone());
        }
    }
    assert_eq!(ended[&queued], "interrupted");
    assert_eq!(ended[&behind], "interrupted");
    assert_eq!(ended[&over], "complete");

    // The places are given back: the limits still hold one of each.
    let (status, _) = submit(&mut a, &s1, "/sleep 30000\nafter").await;
    assert_eq!(status, "started");
    let (status, _) = submit(&mut a, &s1, "queued after").await;
    assert_eq!(status, "queued");
    let err = a
        .err(
            "prompt.submit",
            json!({"session_id": s1, "text": "one more"}),
        )
        .await;
    assert_limit(&err, "queued_turns", 1);
}

/// Reads `c`'s events until each of `turns` has its `message.complete`,
/// and asserts every one of them completed.
async fn all_complete(c: &mut Client, turns: &[String]) {
    let mut left: Vec<&String> = turns.iter().collect();
    while !left.is_empty() {
        let e = c.next_event().await;
        if e["type"] != "message.complete" {
            continue;
        }
        if let Some(at) = left.iter().position(|t| e["turn_id"] == t.as_str()) {
            assert_eq!(e["payload"]["status"], "complete", "{e}");
            left.remove(at);
        }
    }
}

/// A JSON-RPC batch of `calls` on `c`; the answers, in order.
async fn batch(c: &mut Client, calls: &[(&str, Value)], first_id: u64) -> Vec<Value> {
    let frame: Vec<Value> = calls
        .iter()
        .enumerate()
        .map(|(i, (m, p))| json!({"jsonrpc": "2.0", "id": first_id + i as u64, "method": m, "params": p}))
        .collect();
    c.send_text(&Value::from(frame).to_string()).await;
    loop {
        let f = c.next_frame().await;
        if let Some(answers) = f.as_array() {
            return answers.clone();
        }
        c.inbox.push_back(f);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_per_second_are_shared_by_the_profiles_connections() {
    let dir = tempdir();
    let gw = start(dir.path(), &["a:requests_per_s=1"]);
    let mut a1 = as_profile(&gw, A).await;
    let mut a2 = as_profile(&gw, A).await;
    let mut b = as_profile(&gw, B).await;

    // One token a second, none saved beyond one: the second member of a
    // batch finds the bucket empty.
    let answers = batch(
        &mut a1,
        &[("session.list", json!({})), ("session.list", json!({}))],
        100,
    )
    .await;
    assert!(answers[0].get("result").is_some(), "{answers:?}");
    let data = assert_limit(&answers[1]["error"], "requests_per_s", 1);
    let wait = data["retry_after_ms"].as_u64().expect("retry_after_ms");
    assert!(wait > 0 && wait <= 1000, "{data}");

    // The other connection of the profile draws from the same bucket; a
    // refused create creates nothing.
    let answers = batch(&mut a2, &[("session.create", json!({"title": "x"}))], 200).await;
    assert_limit(&answers[0]["error"], "requests_per_s", 1);

    // Another profile is not slowed down.
    let answers = batch(
        &mut b,
        &[
            ("session.list", json!({})),
            ("session.list", json!({})),
            ("session.list", json!({})),
        ],
        300,
    )
    .await;
    assert!(
        answers.iter().all(|a| a.get("result").is_some()),
        "{answers:?}"
    );

    // Once the wait is over, a goes on: and nothing was created.
    tokio::time::sleep(Duration::from_millis(wait + 50)).await;
    assert_eq!(session_ids(&mut a2).await.len(), 0);
}

/// A WebSocket upgrade with `token`: (status, `Retry-After`, body).
async fn upgrade(addr: &str, token: &str) -> (u16, Option<String>, Vec<u8>) {
    let mut tcp = TcpStream::connect(addr).await.expect("connect");
    let head = format!(
        "GET /ws?token={token} HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    );
    tcp.write_all(head.as_bytes()).await.expect("write");
    let mut r = BufReader::new(tcp);
    let (status, headers) = tokio::time::timeout(common::FRAME_WAIT, read_head(&mut r))
        .await
        .expect("timed out waiting for the upgrade's answer");
    let header = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
    };
    let mut body = Vec::new();
    if let Some(len) = header("content-length").and_then(|l| l.parse::<usize>().ok()) {
        body.resize(len, 0);
        r.read_exact(&mut body).await.expect("body");
    }
    (status, header("retry-after"), body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_the_limit_get_429_before_anything_starts() {
    let dir = tempdir();
    let gw = start(dir.path(), &["a:connections=2"]);
    let mut a1 = as_profile(&gw, A).await;
    let s = session(&mut a1).await;
    let a2 = as_profile(&gw, A).await;

    let (status, retry, body) = upgrade(&gw.addr, A).await;
    assert_eq!(status, 429);
    assert!(retry.is_some_and(|r| r.parse::<u64>().is_ok_and(|s| s >= 1)));
    let body: Value = serde_json::from_slice(&body).expect("a JSON-RPC error");
    assert_limit(&body["error"], "connections", 2);

    // An SSE stream is a connection too.
    let path = format!("/v1/sessions/{s}/events?token={A}");
    let refused = match Sse::open(&gw.addr, &path, &[]).await {
        Ok(_) => panic!("a third connection of a was let in over SSE"),
        Err(resp) => resp,
    };
    assert_eq!(refused.status, 429);
    assert!(refused.header("retry-after").is_some());
    assert_limit(&refused.json()["error"], "connections", 2);

    // The connections already open keep working; another profile connects.
    assert_eq!(session_ids(&mut a1).await, [s]);
    let mut b = as_profile(&gw, B).await;
    assert!(session_ids(&mut b).await.is_empty());

    // One of a's ends: its place frees (once the gateway saw the close).
    a2.close().await;
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let (status, _, _) = upgrade(&gw.addr, A).await;
        if status == 101 {
            break;
        }
        assert_eq!(status, 429);
        assert!(
            tokio::time::Instant::now() < deadline,
            "the closed connection's place never freed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The config file's `[limits."*"]` is every profile's default, and a
/// profile's own table sits on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_config_file_gives_a_default_and_per_profile_tables() {
    let dir = tempdir();
    let file = dir.path().join("tether.toml");
    std::fs::write(
        &file,
        "[limits.\"*\"]\nlive_sessions = 1\n\n[limits.b]\nlive_sessions = 2\n",
    )
    .expect("write");
    let file = file.to_string_lossy().into_owned();
    let gw = Gateway::start(
        dir.path(),
        &[
            "--config",
            &file,
            "--token",
            &format!("a:{A}"),
            "--token",
            &format!("b:{B}"),
        ],
    );
    let mut a = as_profile(&gw, A).await;
    session(&mut a).await;
    let err = a.err("session.create", json!({})).await;
    assert_limit(&err, "live_sessions", 1);
    let mut b = as_profile(&gw, B).await;
    session(&mut b).await;
    session(&mut b).await;
    let err = b.err("session.create", json!({})).await;
    assert_limit(&err, "live_sessions", 2);
}

/// SIGHUP re-reads the config file's `[limits.PROFILE]` tables: a raised
/// limit lets new work in, a lowered one refuses new work and takes
/// nothing away, and a `--profile-limit` flag still wins over the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_applies_the_files_new_limits_to_new_work() {
    let dir = tempdir();
    let file = dir.path().join("tether.toml");
    let write = |live: u32| {
        std::fs::write(
            &file,
            format!("[limits.a]\nlive_sessions = {live}\n\n[limits.b]\nlive_sessions = 1\n"),
        )
        .expect("write the config file")
    };
    write(1);
    let config = file.to_str().expect("utf-8 path").to_string();
    let gw = Gateway::start(
        dir.path(),
        &[
            "--token",
            &format!("a:{A}"),
            "--token",
            &format!("b:{B}"),
            "--config",
            &config,
            "--profile-limit",
            "b:live_sessions=2",
        ],
    );
    let mut a = as_profile(&gw, A).await;
    let s1 = session(&mut a).await;
    let err = a.err("session.create", json!({"title": "second"})).await;
    assert_limit(&err, "live_sessions", 1);

    // Raised in the file: the next create gets in, after the reload.
    write(3);
    gw.signal("HUP");
    let deadline = std::time::Instant::now() + DEADLINE;
    loop {
        let r = a.call("session.create", json!({"title": "second"})).await;
        if r.get("result").is_some() {
            break;
        }
        assert_limit(&r["error"], "live_sessions", 1);
        assert!(
            std::time::Instant::now() < deadline,
            "the reload never applied"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(session_ids(&mut a).await.len(), 2);

    // Lowered: both sessions stay and work; a third is refused at the new max.
    write(1);
    gw.signal("HUP");
    let deadline = std::time::Instant::now() + DEADLINE;
    loop {
        // Until the reload lands a create may still get in (max 3).
        let r = a.call("session.create", json!({"title": "third"})).await;
        if let Some(error) = r.get("error") {
            if error["data"]["max"] == 1 {
                break;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the lowered limit never applied: {r}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let ids = session_ids(&mut a).await;
    assert!(ids.contains(&s1), "{ids:?}");
    let (status, turn) = submit(&mut a, &s1, "still here").await;
    assert_eq!(status, "started");
    assert_eq!(
        complete(&turn_events(&mut a, &turn).await)["status"],
        "complete"
    );

    // The flag (2) still wins over the file's 1 for profile b.
    let mut b = as_profile(&gw, B).await;
    session(&mut b).await;
    session(&mut b).await;
    let err = b.err("session.create", json!({"title": "third"})).await;
    assert_limit(&err, "live_sessions", 2);
}
