//! Turns on real compute hosts (the echo engine), black-box over WebSocket.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

use common::Backend;

use std::time::Duration;

use common::{complete, completes_of, session, tempdir, turn_events, Client, Gateway};
use serde_json::{json, Value};

/// Creates a session (attached) and drains its `session.created`.
/// Waits until a turn is under way on its host: its first delta.
async fn first_delta(c: &mut Client) {
    while c.next_event().await["type"] != "message.delta" {}
}

async fn submit(c: &mut Client, id: &str, text: &str) -> Value {
    c.ok("prompt.submit", json!({"session_id": id, "text": text}))
        .await
}

fn deltas_text(events: &[Value]) -> String {
    events
        .iter()
        .filter(|e| e["type"] == "message.delta")
        .map(|e| e["payload"]["text"].as_str().unwrap())
        .collect()
}

async fn host_pids(c: &mut Client) -> Vec<u32> {
    let s = c.ok("session.events.stats", json!({})).await;
    s["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|h| h["pid"].as_u64().map(|p| p as u32))
        .collect()
}

fn kill9(pid: u32) {
    let ok = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .expect("kill")
        .success();
    assert!(ok, "kill -9 {pid}");
}

fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| s.contains(") Z "))
            .unwrap_or(true)
}

async fn a_reply_streams_to_every_peer_and_deltas_add_up_to_the_complete_text(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &[]);
    let mut a = gw.client().await;
    let id = session(&mut a).await;
    let mut b = gw.client().await;
    b.ok(
        "session.resume",
        json!({"session_id": id, "omit_messages": true}),
    )
    .await;

    let prompt = "the quick  brown fox jumps over the lazy dog ";
    let r = submit(&mut a, &id, prompt).await;
    assert_eq!(r["status"], "started");
    let turn_id = r["turn_id"].as_str().unwrap().to_string();
    let trace_id = r["trace_id"].as_str().unwrap().to_string();
    assert!(turn_id.starts_with("t_"));
    assert_eq!(trace_id.len(), 12);

    for c in [&mut a, &mut b] {
        let evs = turn_events(c, &turn_id).await;
        let types: Vec<_> = evs.iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert_eq!(types[0], "message.user");
        assert_eq!(types[1], "message.start");
        assert!(evs.iter().all(|e| e["trace_id"] == trace_id.as_str()));
        assert_eq!(complete(&evs)["status"], "complete");
        assert_eq!(complete(&evs)["text"], prompt);
        assert_eq!(deltas_text(&evs), prompt);
        // Offsets are the bytes before each delta; deltas carry no seq.
        let mut offset = 0;
        for d in evs.iter().filter(|e| e["type"] == "message.delta") {
            assert_eq!(d["payload"]["offset"], offset);
            assert!(d.get("seq").is_none());
            offset += d["payload"]["text"].as_str().unwrap().len() as u64;
        }
    }
    let r = a
        .ok("session.resume", json!({"session_id": id, "attach": false}))
        .await;
    let roles: Vec<_> = r["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant"]);
    assert_eq!(r["session"]["status"], "idle");
}

async fn echo_directives_do_what_part_3_says(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &[]);
    let mut c = gw.client().await;
    let id = session(&mut c).await;

    let t = submit(&mut c, &id, "/tool ls {\"path\":\"/tmp\"}\ndone").await;
    let evs = turn_events(&mut c, t["turn_id"].as_str().unwrap()).await;
    let start = evs
        .iter()
        .find(|e| e["type"] == "tool.start")
        .expect("tool.start");
    assert_eq!(start["payload"]["name"], "ls");
    assert_eq!(start["payload"]["args"], json!({"path": "/tmp"}));
    assert!(start["seq"].is_u64(), "tool events are durable");
    let done = evs
        .iter()
        .find(|e| e["type"] == "tool.complete")
        .expect("tool.complete");
    assert_eq!(done["payload"]["result"], json!({"path": "/tmp"}));
    assert_eq!(complete(&evs)["text"], "done");

    let t = submit(&mut c, &id, "/todo write tests; fix bugs\nok").await;
    let evs = turn_events(&mut c, t["turn_id"].as_str().unwrap()).await;
    let todo = evs
        .iter()
        .find(|e| e["type"] == "todo.updated")
        .expect("todo.updated");
    assert_eq!(todo["payload"]["revision"], 1);
    assert_eq!(todo["payload"]["items"][1]["text"], "fix bugs");
    let t = submit(&mut c, &id, "/todo one").await;
    let evs = turn_events(&mut c, t["turn_id"].as_str().unwrap()).await;
    let todo = evs
        .iter()
        .find(|e| e["type"] == "todo.updated")
        .expect("todo.updated");
    assert_eq!(
        todo["payload"]["revision"], 2,
        "the gateway numbers revisions"
    );

    let t = submit(&mut c, &id, "/error the model refused").await;
    let evs = turn_events(&mut c, t["turn_id"].as_str().unwrap()).await;
    assert_eq!(complete(&evs)["status"], "error");
    assert_eq!(complete(&evs)["failure_reason"], "engine_error");
    let err = evs
        .iter()
        .find(|e| e["type"] == "error")
        .expect("error event");
    assert_eq!(err["payload"]["message"], "the model refused");

    let t = submit(&mut c, &id, "/big 5000").await;
    let evs = turn_events(&mut c, t["turn_id"].as_str().unwrap()).await;
    assert_eq!(complete(&evs)["text"].as_str().unwrap().len(), 5000);
    assert_eq!(deltas_text(&evs).len(), 5000);

    let t = submit(&mut c, &id, "/sleep 200\nslept").await;
    let started = std::time::Instant::now();
    let evs = turn_events(&mut c, t["turn_id"].as_str().unwrap()).await;
    assert!(started.elapsed() >= Duration::from_millis(150));
    assert_eq!(complete(&evs)["text"], "slept");

    // The session's todo snapshot survives a resume.
    let r = c
        .ok(
            "session.resume",
            json!({"session_id": id, "attach": false, "omit_messages": true}),
        )
        .await;
    assert_eq!(r["todos"]["revision"], 2);
}

async fn queued_prompts_run_in_order_and_the_queue_is_bounded(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &["--max-queued", "2"]);
    let mut c = gw.client().await;
    let id = session(&mut c).await;
    // Long enough that the next two arrive while it runs, even on a
    // loaded machine.
    let first = submit(&mut c, &id, "/sleep 3000\none").await;
    assert_eq!(first["status"], "started");
    let second = submit(&mut c, &id, "two").await;
    let third = submit(&mut c, &id, "three").await;
    assert_eq!(second["status"], "queued");
    assert_eq!(third["status"], "queued");
    let full = c
        .err("prompt.submit", json!({"session_id": id, "text": "four"}))
        .await;
    assert_eq!(full["code"], 4009);
    let mut texts = Vec::new();
    for t in [&first, &second, &third] {
        let evs = turn_events(&mut c, t["turn_id"].as_str().unwrap()).await;
        texts.push(complete(&evs)["text"].as_str().unwrap().to_string());
    }
    assert_eq!(texts, ["one", "two", "three"]);
}

async fn interrupting_a_hanging_turn_ends_it_and_drops_the_queue(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &[]);
    let mut c = gw.client().await;
    let id = session(&mut c).await;
    let hang = submit(&mut c, &id, "/hang").await;
    let queued = submit(&mut c, &id, "later").await;
    assert_eq!(queued["status"], "queued");
    first_delta(&mut c).await;
    let mut other = gw.client().await;
    let r = other
        .ok(
            "session.resume",
            json!({"session_id": id, "omit_messages": true}),
        )
        .await;
    assert_eq!(r["active_turn"]["turn_id"], hang["turn_id"]);
    assert_eq!(r["active_turn"]["text"], "…");
    assert_eq!(r["session"]["status"], "running");

    let r = c.ok("session.interrupt", json!({"session_id": id})).await;
    assert_eq!(r["status"], "interrupted");
    let evs = turn_events(&mut c, hang["turn_id"].as_str().unwrap()).await;
    assert_eq!(complete(&evs)["status"], "interrupted");
    let evs = turn_events(&mut c, queued["turn_id"].as_str().unwrap()).await;
    assert_eq!(complete(&evs)["status"], "interrupted");
    assert_eq!(complete(&evs)["failure_reason"], "dequeued");
    assert!(
        !evs.iter().any(|e| e["type"] == "message.start"),
        "a dropped prompt never starts"
    );
    let r = c.ok("session.interrupt", json!({"session_id": id})).await;
    assert_eq!(r["status"], "idle");
    // The session works on.
    let t = submit(&mut c, &id, "again").await;
    let evs = turn_events(&mut c, t["turn_id"].as_str().unwrap()).await;
    assert_eq!(complete(&evs)["text"], "again");
}

async fn a_crashing_host_ends_the_turn_with_host_crash_and_the_next_prompt_works(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &["--hosts", "1"]);
    let mut c = gw.client().await;
    let id = session(&mut c).await;
    let t = submit(&mut c, &id, "/crash").await;
    let evs = turn_events(&mut c, t["turn_id"].as_str().unwrap()).await;
    let p = complete(&evs);
    assert_eq!(p["status"], "error");
    assert_eq!(p["failure_reason"], "host_crash");
    assert_eq!(p["recoverable"], true);
    let t = submit(&mut c, &id, "still here").await;
    let evs = turn_events(&mut c, t["turn_id"].as_str().unwrap()).await;
    assert_eq!(complete(&evs)["text"], "still here");
}

async fn kill_9_of_a_host_mid_turn_gives_host_crash(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &["--hosts", "1"]);
    let mut c = gw.client().await;
    let id = session(&mut c).await;
    let t = submit(&mut c, &id, "/hang").await;
    first_delta(&mut c).await;
    let pids = host_pids(&mut c).await;
    assert_eq!(pids.len(), 1);
    kill9(pids[0]);
    let evs = turn_events(&mut c, t["turn_id"].as_str().unwrap()).await;
    assert_eq!(complete(&evs)["failure_reason"], "host_crash");
    let t = submit(&mut c, &id, "recovered").await;
    let evs = turn_events(&mut c, t["turn_id"].as_str().unwrap()).await;
    assert_eq!(complete(&evs)["text"], "recovered");
    let new_pids = host_pids(&mut c).await;
    assert_ne!(new_pids, pids, "a replacement host runs");
}

async fn a_slot_past_its_restart_intensity_rests_and_prompts_get_5019(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &["--hosts", "1", "--host-restarts", "1"]);
    let mut c = gw.client().await;
    let id = session(&mut c).await;
    for _ in 0..2 {
        let t = submit(&mut c, &id, "/crash").await;
        let evs = turn_events(&mut c, t["turn_id"].as_str().unwrap()).await;
        assert_eq!(complete(&evs)["failure_reason"], "host_crash");
    }
    // The first crash was restarted, the second exceeded the intensity: the
    // slot rests until its period (300 s) has passed.
    let mut resting = false;
    for _ in 0..50 {
        let s = c.ok("session.events.stats", json!({})).await;
        if s["hosts"][0]["state"] == "resting" {
            resting = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(resting, "the slot is reported resting");
    let before = c
        .ok(
            "session.events.since",
            json!({"session_id": id, "last_seen": 0}),
        )
        .await["latest_seq"]
        .clone();
    let e = c
        .err("prompt.submit", json!({"session_id": id, "text": "x"}))
        .await;
    assert_eq!(e["code"], 5019);
    let after = c
        .ok(
            "session.events.since",
            json!({"session_id": id, "last_seen": 0}),
        )
        .await["latest_seq"]
        .clone();
    assert_eq!(before, after, "a refused prompt writes nothing");
}

async fn compress_answers_at_once_refuses_during_a_turn_and_starts_a_new_segment(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &[]);
    let mut c = gw.client().await;
    let id = session(&mut c).await;
    for text in ["a", "b"] {
        let t = submit(&mut c, &id, text).await;
        turn_events(&mut c, t["turn_id"].as_str().unwrap()).await;
    }
    let t = submit(&mut c, &id, "/sleep 3000\nbusy").await;
    let e = c.err("session.compress", json!({"session_id": id})).await;
    assert_eq!(e["code"], 4009);
    turn_events(&mut c, t["turn_id"].as_str().unwrap()).await;

    let r = c.ok("session.compress", json!({"session_id": id})).await;
    assert_eq!(r["status"], "compressed");
    assert_eq!(r["history_version"], 1);
    assert_eq!(r["removed"], 6);
    let e = c.next_event().await;
    assert_eq!(e["type"], "session.compacted");
    assert_eq!(e["payload"]["summary"], "Summary of 6 messages.");
    let r = c
        .ok("session.resume", json!({"session_id": id, "attach": false}))
        .await;
    let msgs = r["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 1);
    assert_eq!(msgs[0]["role"], "system");
    assert_eq!(msgs[0]["text"], "Summary of 6 messages.");
    assert_eq!(r["session"]["history_version"], 1);
    assert_eq!(r["session"]["message_count"], 1);
}

async fn a_slow_compress_answers_pending_and_its_late_answer_is_adopted(b: Backend) {
    let dir = tempdir();
    let host = format!(
        "{} host --engine echo --compress-delay-ms 1500",
        env!("CARGO_BIN_EXE_tether")
    );
    let gw = Gateway::start_on(
        &b,
        dir.path(),
        &[
            "--hosts",
            "1",
            "--host-command",
            &host,
            "--control-wait-s",
            "1",
        ],
    );
    let mut c = gw.client().await;
    let id = session(&mut c).await;
    let t = submit(&mut c, &id, "hello").await;
    turn_events(&mut c, t["turn_id"].as_str().unwrap()).await;
    let r = c.ok("session.compress", json!({"session_id": id})).await;
    assert_eq!(r["status"], "pending");
    assert!(r["request_id"].is_string());
    let mut kinds = Vec::new();
    loop {
        let e = c.next_event().await;
        match e["type"].as_str().unwrap() {
            "status.update" => {
                kinds.push(e["payload"]["kind"].as_str().unwrap().to_string());
                if e["payload"]["kind"] == "compacted" {
                    break;
                }
            }
            "session.compacted" => {
                kinds.push("session.compacted".into());
                assert_eq!(e["payload"]["removed"], 2);
            }
            _ => {}
        }
    }
    assert_eq!(kinds, ["compacting", "session.compacted", "compacted"]);
}

async fn a_gateway_killed_mid_turn_ends_the_turn_at_restart_and_leaves_no_host(b: Backend) {
    let dir = tempdir();
    let mut gw = Gateway::start_on(&b, dir.path(), &["--hosts", "2"]);
    let mut c = gw.client().await;
    let id = session(&mut c).await;
    let t = submit(&mut c, &id, "/hang").await;
    let queued = submit(&mut c, &id, "next").await;
    first_delta(&mut c).await;
    // Both slots have a process (the idle one may still be starting).
    let mut pids = host_pids(&mut c).await;
    for _ in 0..300 {
        if pids.len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        pids = host_pids(&mut c).await;
    }
    assert_eq!(pids.len(), 2);
    drop(c);
    gw.restart(); // SIGKILL of the gateway, then a new one on the same data dir
    let mut c = gw.client().await;
    let r = c
        .ok(
            "session.resume",
            json!({"session_id": id, "last_seen": 0, "omit_messages": true}),
        )
        .await;
    assert_eq!(r["session"]["status"], "idle");
    assert!(r["active_turn"].is_null());
    // The turns are ended as the session comes back: their completes are
    // either in the replay or follow it live, exactly once.
    let mut evs = r["events"].as_array().unwrap().clone();
    let completes = |evs: &[Value]| {
        evs.iter()
            .filter(|e| e["type"] == "message.complete")
            .count()
    };
    while completes(&evs) < 2 {
        evs.push(c.next_event().await);
    }
    assert_eq!(completes(&evs), 2);
    let done_for = |turn: &Value| {
        evs.iter()
            .find(|e| e["type"] == "message.complete" && e["turn_id"] == *turn)
            .cloned()
            .unwrap_or_else(|| panic!("no message.complete for {turn}: {evs:?}"))
    };
    let running = done_for(&t["turn_id"]);
    assert_eq!(running["payload"]["status"], "error");
    assert_eq!(running["payload"]["failure_reason"], "gateway_restart");
    assert_eq!(running["payload"]["recoverable"], true);
    let dropped = done_for(&queued["turn_id"]);
    assert_eq!(dropped["payload"]["failure_reason"], "dequeued");
    // The old gateway's hosts are gone (they exit on stdin EOF, and the new
    // gateway kills recorded leftovers).
    for _ in 0..50 {
        if pids.iter().all(|p| !alive(*p)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for p in &pids {
        assert!(!alive(*p), "host {p} of the killed gateway still runs");
    }
    let t = submit(&mut c, &id, "works").await;
    let evs = turn_events(&mut c, t["turn_id"].as_str().unwrap()).await;
    assert_eq!(complete(&evs)["text"], "works");
}

async fn stats_show_running_turns_and_hosts(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &["--hosts", "2"]);
    let mut c = gw.client().await;
    let id = session(&mut c).await;
    let t = submit(&mut c, &id, "/hang").await;
    first_delta(&mut c).await;
    // The second slot may still be starting on a loaded machine.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let s = loop {
        let s = c.ok("session.events.stats", json!({})).await;
        let up = s["hosts"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|h| h["state"] == "up")
            .count();
        if up == 2 || std::time::Instant::now() > deadline {
            break s;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let turns = s["active_turns"].as_array().unwrap();
    assert_eq!(turns.len(), 1);
    assert_eq!(turns[0]["turn_id"], t["turn_id"]);
    assert_eq!(turns[0]["trace_id"], t["trace_id"]);
    assert!(turns[0]["elapsed_s"].as_f64().unwrap() >= 0.0);
    let hosts = s["hosts"].as_array().unwrap();
    assert_eq!(hosts.len(), 2);
    assert!(hosts
        .iter()
        .all(|h| h["state"] == "up" && h["pid"].is_u64()));
    let busy: u64 = hosts
        .iter()
        .map(|h| h["active_turns"].as_u64().unwrap())
        .sum();
    assert_eq!(busy, 1);
    c.ok("session.interrupt", json!({"session_id": id})).await;
}

async fn a_turn_past_its_deadline_ends_with_host_timeout(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &["--turn-deadline-s", "1"]);
    let mut c = gw.client().await;
    let id = session(&mut c).await;
    // A first turn, so that the session's host is up and the deadline
    // below is spent hanging, not starting a slow host (an interpreted
    // one under TETHER_TEST_HOST_COMMAND on a loaded machine).
    let t = submit(&mut c, &id, "warm").await;
    let evs = turn_events(&mut c, t["turn_id"].as_str().unwrap()).await;
    assert_eq!(complete(&evs)["text"], "warm");
    let t = submit(&mut c, &id, "/hang").await;
    let evs = turn_events(&mut c, t["turn_id"].as_str().unwrap()).await;
    let p = complete(&evs);
    assert_eq!(p["status"], "error");
    assert_eq!(p["failure_reason"], "host_timeout");
    assert_eq!(p["recoverable"], true);
    assert_eq!(p["text"], "…", "the text streamed so far is kept");
    // Exactly one complete, and the session serves the next prompt.
    let t = submit(&mut c, &id, "next").await;
    let evs = turn_events(&mut c, t["turn_id"].as_str().unwrap()).await;
    assert_eq!(complete(&evs)["text"], "next");
    assert_eq!(completes_of(&mut c, &id).await.len(), 3);
}

async fn a_close_on_disconnect_session_closes_when_its_last_peer_leaves(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &[]);
    let mut a = gw.client().await;
    let r = a
        .ok("session.create", json!({"close_on_disconnect": true}))
        .await;
    assert_eq!(r["session"]["close_on_disconnect"], true);
    let id = r["session"]["session_id"].as_str().unwrap().to_string();
    let mut b = gw.client().await;
    b.ok(
        "session.resume",
        json!({"session_id": id, "omit_messages": true}),
    )
    .await;
    let t = submit(&mut a, &id, "/hang").await;
    first_delta(&mut a).await;
    // One peer leaving is not enough: B is still attached, the turn runs on.
    a.close().await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let s = b.ok("session.events.stats", json!({})).await;
    assert_eq!(s["active_turns"][0]["turn_id"], t["turn_id"]);
    b.close().await;
    // Nobody is left: the session is closed with reason "disconnect".
    let mut c = gw.client().await;
    let mut closed = None;
    for _ in 0..50 {
        let r = c
            .call("session.resume", json!({"session_id": id, "attach": false}))
            .await;
        if r["error"]["code"] == 4002 {
            closed = Some(r);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        closed.is_some(),
        "the session was not closed after its last peer left"
    );
    // The close answers 4002 as soon as it is decided; its events reach
    // the store right after.
    let mut evs = Vec::new();
    for _ in 0..100 {
        let all = c
            .ok(
                "session.events.since",
                json!({"session_id": id, "last_seen": 0}),
            )
            .await;
        evs = all["events"].as_array().unwrap().clone();
        if evs.last().is_some_and(|e| e["type"] == "session.closed") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let n = evs.len();
    let types: Vec<_> = evs
        .iter()
        .map(|e| e["type"].as_str().unwrap_or("?"))
        .collect();
    assert_eq!(evs[n - 2]["type"], "message.complete", "{types:?}");
    assert_eq!(evs[n - 2]["turn_id"], t["turn_id"]);
    assert_eq!(evs[n - 2]["payload"]["status"], "interrupted");
    assert_eq!(evs[n - 1]["type"], "session.closed");
    assert_eq!(evs[n - 1]["payload"]["reason"], "disconnect");
}

backends!(
    a_reply_streams_to_every_peer_and_deltas_add_up_to_the_complete_text,
    echo_directives_do_what_part_3_says,
    queued_prompts_run_in_order_and_the_queue_is_bounded,
    interrupting_a_hanging_turn_ends_it_and_drops_the_queue,
    a_crashing_host_ends_the_turn_with_host_crash_and_the_next_prompt_works,
    kill_9_of_a_host_mid_turn_gives_host_crash,
    a_slot_past_its_restart_intensity_rests_and_prompts_get_5019,
    compress_answers_at_once_refuses_during_a_turn_and_starts_a_new_segment,
    a_slow_compress_answers_pending_and_its_late_answer_is_adopted,
    a_gateway_killed_mid_turn_ends_the_turn_at_restart_and_leaves_no_host,
    stats_show_running_turns_and_hosts,
    a_turn_past_its_deadline_ends_with_host_timeout,
    a_close_on_disconnect_session_closes_when_its_last_peer_leaves,
);
