//! The gateway's lifecycle, black-box: one gateway per data
//! directory and database, a restart that is consistent before it serves,
//! and a drain that tells every attached client how its turns ended.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

use common::Backend;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::{completes_of, submit, tempdir, turn_events, Client, Gateway};
use serde_json::{json, Value};

/// Bounds waits for something the gateway does on its own.
const WAIT: Duration = Duration::from_secs(30);

/// Runs a second `tether serve` with `args` and returns (status, stderr).
fn second_gateway(args: &[&str]) -> (Option<i32>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tether"))
        .arg("serve")
        .args(args)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start a second tether");
    let started = std::time::Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            let out = child.wait_with_output().expect("output");
            return (status.code(), String::from_utf8_lossy(&out.stderr).into());
        }
        if started.elapsed() > WAIT {
            let _ = child.kill();
            panic!("the second gateway {args:?} did not exit");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

async fn new_session(c: &mut Client) -> String {
    let r = c.ok("session.create", json!({"title": "t"})).await;
    r["session"]["session_id"].as_str().unwrap().to_string()
}

/// Waits for the event of `kind` of `turn_id`.
async fn wait_event(c: &mut Client, turn_id: &str, kind: &str) -> Value {
    loop {
        let e = c.next_event().await;
        if e["turn_id"] == turn_id && e["type"] == kind {
            return e;
        }
    }
}

#[tokio::test]
async fn a_second_gateway_on_a_locked_directory_exits_64_and_touches_nothing() {
    let dir = tempdir();
    let gw = Gateway::start(dir.path(), &["--hosts", "1"]);
    let pid = gw.pid().unwrap();
    let mut c = gw.client().await;
    let id = new_session(&mut c).await;
    // A turn running on the first gateway's host while the second starts.
    let turn = submit(&mut c, &id, "/sleep 1500\nstill here").await;

    let data_dir = dir.path().to_str().unwrap();
    for extra in [
        // Same directory, another port.
        vec!["--listen", "127.0.0.1:0"],
        // Same directory, stdio (one stdio gateway per directory too).
        vec!["--stdio"],
    ] {
        let mut args = vec!["--data-dir", data_dir];
        args.extend(extra.iter());
        let (code, stderr) = second_gateway(&args);
        assert_eq!(code, Some(64), "{args:?}: {stderr}");
        assert!(stderr.contains("tether.lock"), "{stderr}");
        assert!(stderr.contains(&format!("pid {pid}")), "{stderr}");
    }
    // Another data directory, but the first gateway's database.
    let other = tempdir();
    let url = format!("sqlite://{}", dir.path().join("tether.db").display());
    let (code, stderr) = second_gateway(&[
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        other.path().to_str().unwrap(),
        "--database-url",
        &url,
    ]);
    assert_eq!(code, Some(64), "{stderr}");
    assert!(stderr.contains("tether.db"), "{stderr}");
    assert!(stderr.contains(&format!("pid {pid}")), "{stderr}");

    // The first gateway's turn and host were left alone.
    let events = turn_events(&mut c, &turn).await;
    let done = common::complete(&events);
    assert_eq!(done["status"], "complete", "{events:?}");
    assert_eq!(done["text"], "still here");
    let stats = c.ok("session.events.stats", json!({})).await;
    assert_eq!(stats["hosts"][0]["restarts"], 0, "{stats}");
    let turn = submit(&mut c, &id, "again").await;
    let events = turn_events(&mut c, &turn).await;
    assert_eq!(common::complete(&events)["status"], "complete");
}

async fn a_lock_dies_with_its_gateway(b: Backend) {
    let dir = tempdir();
    let mut gw = Gateway::start_on(&b, dir.path(), &[]);
    // kill -9 leaves no stale lock: the kernel dropped the flock.
    gw.restart();
    let mut c = gw.client().await;
    c.ok("gateway.ping", json!({})).await;
}

async fn the_first_read_after_a_hard_restart_sees_every_interrupted_turn_ended(b: Backend) {
    const SESSIONS: usize = 20;
    let dir = tempdir();
    let mut gw = Gateway::start_on(&b, dir.path(), &[]);
    let mut c = gw.client().await;
    let mut turns = Vec::new();
    for _ in 0..SESSIONS {
        let id = new_session(&mut c).await;
        let running = submit(&mut c, &id, "/hang").await;
        let queued = submit(&mut c, &id, "behind it").await;
        turns.push((id, running, queued));
    }
    // Every running turn has started, in whatever order: the sessions run
    // side by side, and waiting for one turn's start would read past (and
    // drop) another's that came first.
    let mut not_started: std::collections::HashSet<&str> = turns
        .iter()
        .map(|(_, running, _)| running.as_str())
        .collect();
    while !not_started.is_empty() {
        let e = c.next_event().await;
        if e["type"] == "message.start" {
            not_started.remove(e["turn_id"].as_str().unwrap_or_default());
        }
    }
    drop(c);
    gw.kill();
    gw.restart();

    // Right after the listening line, one read per session, all at once.
    let reads = turns.iter().map(|(id, running, queued)| {
        let url = gw.url();
        async move {
            let mut c = Client::connect(&url).await;
            let ends = completes_of(&mut c, id).await;
            let of = |turn: &str| {
                ends.iter()
                    .find(|e| e["turn_id"] == turn)
                    .map(|e| e["payload"].clone())
            };
            (of(running), of(queued), format!("{ends:?}"))
        }
    });
    for (running, queued, events) in futures::future::join_all(reads).await {
        let running = running.unwrap_or_else(|| panic!("running turn not ended: {events}"));
        assert_eq!(running["failure_reason"], "gateway_restart", "{events}");
        assert_eq!(running["status"], "error");
        let queued = queued.unwrap_or_else(|| panic!("queued turn not ended: {events}"));
        assert_eq!(queued["failure_reason"], "dequeued", "{events}");
        assert_eq!(queued["status"], "interrupted");
    }
}

async fn sigterm_ends_running_and_queued_turns_before_clients_are_closed(b: Backend) {
    const PEERS: usize = 3;
    let dir = tempdir();
    let mut gw = Gateway::start_on(&b, dir.path(), &[]);
    let mut a = gw.client().await;
    let id = new_session(&mut a).await;
    let mut peers = vec![a];
    for _ in 1..PEERS {
        let mut p = gw.client().await;
        p.ok("session.resume", json!({"session_id": id})).await;
        peers.push(p);
    }
    let running = submit(&mut peers[0], &id, "/hang").await;
    let queued = submit(&mut peers[0], &id, "queued behind it").await;
    for p in &mut peers {
        wait_event(p, &running, "message.start").await;
    }

    gw.signal("TERM");
    for (i, p) in peers.iter_mut().enumerate() {
        // Everything this peer receives until its close.
        let mut seen: Vec<Value> = p
            .inbox
            .drain(..)
            .filter(|f| f["method"] == "event")
            .map(|f| f["params"].clone())
            .collect();
        let code = loop {
            match p.next_or_close().await {
                Ok(f) if f["method"] == "event" => seen.push(f["params"].clone()),
                Ok(_) => {}
                Err(code) => break code,
            }
        };
        assert_eq!(code, 1001, "peer {i}");
        let end = |turn: &str| {
            seen.iter()
                .find(|e| e["turn_id"] == turn && e["type"] == "message.complete")
                .map(|e| e["payload"].clone())
                .unwrap_or_else(|| panic!("peer {i}: no end of {turn} before the close: {seen:?}"))
        };
        let r = end(&running);
        assert_eq!(r["status"], "interrupted", "{r}");
        assert_eq!(r["failure_reason"], "gateway_shutdown", "{r}");
        assert_eq!(r["recoverable"], true, "{r}");
        let q = end(&queued);
        assert_eq!(q["status"], "interrupted", "{q}");
        assert_eq!(q["failure_reason"], "dequeued", "{q}");
        // The queued prompt never started during the drain.
        assert!(
            !seen
                .iter()
                .any(|e| e["turn_id"] == queued && e["type"] == "message.start"),
            "{seen:?}"
        );
    }
    assert_eq!(gw.terminate(), Some(0));

    // On disk exactly as the peers saw it, each turn ended exactly once.
    gw.restart();
    let mut c = gw.client().await;
    let r = c
        .ok(
            "session.events.since",
            json!({"session_id": id, "last_seen": 0}),
        )
        .await;
    let events = r["events"].as_array().unwrap();
    for turn in [&running, &queued] {
        let ends: Vec<&Value> = events
            .iter()
            .filter(|e| e["turn_id"] == *turn && e["type"] == "message.complete")
            .collect();
        assert_eq!(ends.len(), 1, "{turn}: {events:?}");
    }
}

backends!(
    a_lock_dies_with_its_gateway,
    the_first_read_after_a_hard_restart_sees_every_interrupted_turn_ended,
    sigterm_ends_running_and_queued_turns_before_clients_are_closed,
);

/// On PostgreSQL the database is the gateway's like a data directory: a second gateway with
/// its own directory but the same database exits 64, names the holder, and leaves the first
/// one's turn alone; bad URLs and credentials exit 64 and an unreachable server 69, with the
/// password masked everywhere.
#[tokio::test]
async fn postgres_one_gateway_per_database_and_clear_exits() {
    let Some(b) = Backend::postgres() else {
        return;
    };
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &["--hosts", "1"]);
    let url = gw.database_url().expect("a database").to_string();
    let pid = gw.pid().unwrap();
    let mut c = gw.client().await;
    let id = new_session(&mut c).await;
    let turn = submit(&mut c, &id, "/sleep 1500\nstill here").await;

    let other = tempdir();
    let other_dir = other.path().to_str().unwrap();
    let (code, stderr) = second_gateway(&[
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        other_dir,
        "--database-url",
        &url,
    ]);
    assert_eq!(code, Some(64), "{stderr}");
    assert!(
        stderr.contains("in use by another tether gateway"),
        "{stderr}"
    );
    assert!(stderr.contains(&format!("pid {pid}")), "{stderr}");
    assert!(!stderr.contains(":tether@"), "password shown: {stderr}");

    let wrong = match url.split_once('@') {
        Some((_, rest)) => format!("postgres://tether:hunter2@{rest}"),
        None => panic!("{url}"),
    };
    for (bad, want) in [
        (wrong.as_str(), 64),
        ("postgres://tether:hunter2@127.0.0.1:notaport/x", 64),
        ("mysql://tether:hunter2@127.0.0.1/x", 64),
        ("postgres://tether:hunter2@127.0.0.1:1/x", 69),
    ] {
        let (code, stderr) = second_gateway(&[
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            other_dir,
            "--database-url",
            bad,
            "--database-connect-timeout-s",
            "1",
        ]);
        assert_eq!(code, Some(want), "{bad}: {stderr}");
        assert!(!stderr.contains("hunter2"), "password shown: {stderr}");
        assert!(stderr.contains("tether:***@"), "{stderr}");
    }

    let events = turn_events(&mut c, &turn).await;
    let done = common::complete(&events);
    assert_eq!(done["status"], "complete", "{events:?}");
    assert_eq!(done["text"], "still here");
}
