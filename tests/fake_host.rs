//! Badly behaved compute hosts, black-box: the gateway runs
//! `tests/fixtures/fake_host.py MODE` as its host command, and whatever the
//! host does (garbage lines, oversized lines, frames for turns and requests
//! that do not exist, no hello, a late hello, a deaf stdin, frames after
//! `shutdown`) the gateway keeps answering `gateway.ping`, and every
//! accepted turn ends with exactly one `message.complete` (PROTOCOL 1.5,
//! Part 2).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{session, tempdir, Client, Gateway};
use serde_json::{json, Value};

const FAKE_HOST: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/fake_host.py");

/// Bounds a wait for a turn's end (a late hello takes 10 s).
const WAIT: Duration = Duration::from_secs(30);

/// Pings the gateway whenever a turn has been quiet this long.
const QUIET: Duration = Duration::from_secs(1);

/// How long a slot put out of service by a rogue ack gets to come back.
const RECOVERY: Duration = Duration::from_secs(15);

/// A gateway with one host slot running the fake host in `mode`.
fn gateway(dir: &std::path::Path, mode: &str, extra: &[&str]) -> Gateway {
    let command = format!("python3 {FAKE_HOST} {mode}");
    let mut args = vec!["--hosts", "1", "--host-command", &command];
    args.extend_from_slice(extra);
    Gateway::start(dir, &args)
}

/// `MODE --once FILE`: only the first process misbehaves; replacements
/// are good hosts.
fn once(mode: &str, dir: &tempfile::TempDir) -> String {
    format!("{mode} --once {}", dir.path().join("claimed").display())
}

/// Creates a session (attached) and drains its `session.created`.
async fn submit(c: &mut Client, id: &str, text: &str) -> String {
    let r = c
        .ok("prompt.submit", json!({"session_id": id, "text": text}))
        .await;
    r["turn_id"].as_str().unwrap().to_string()
}

/// The events of one turn through its `message.complete`. While it waits
/// the gateway must keep answering `gateway.ping`, whatever the host does.
async fn turn_events(c: &mut Client, turn_id: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        // `next_event` only loses nothing when cancelled between frames,
        // which is where a timeout cancels it.
        let e = match tokio::time::timeout(QUIET, c.next_event()).await {
            Ok(e) => e,
            Err(_) => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "no message.complete for {turn_id}"
                );
                ping(c).await;
                continue;
            }
        };
        if e["turn_id"] != turn_id {
            continue;
        }
        let done = e["type"] == "message.complete";
        out.push(e);
        if done {
            return out;
        }
    }
}

/// The `message.complete` payload of a turn.
async fn complete(c: &mut Client, turn_id: &str) -> Value {
    let evs = turn_events(c, turn_id).await;
    evs.last().unwrap()["payload"].clone()
}

fn deltas_text(events: &[Value]) -> String {
    events
        .iter()
        .filter(|e| e["type"] == "message.delta")
        .map(|e| e["payload"]["text"].as_str().unwrap())
        .collect()
}

async fn ping(c: &mut Client) {
    assert_eq!(c.ok("gateway.ping", json!({})).await, json!({"ok": true}));
}

async fn host(c: &mut Client) -> Value {
    let s = c.ok("session.events.stats", json!({})).await;
    s["hosts"][0].clone()
}

/// Waits until the host said hello, so that a short turn deadline starts
/// counting only once a host has the turn.
async fn host_up(c: &mut Client) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while host(c).await["state"] != "up" {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the host never came up"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Every durable event of the session, read back from the gateway.
async fn stored(c: &mut Client, id: &str) -> Vec<Value> {
    let r = c
        .ok(
            "session.events.since",
            json!({"session_id": id, "last_seen": 0}),
        )
        .await;
    r["events"].as_array().unwrap().clone()
}

/// The store's invariants for a session: seqs 1..=latest without a gap,
/// exactly one `message.complete` per accepted turn, always its turn's
/// last event, and nothing a bad host tried to inject.
async fn assert_consistent(c: &mut Client, id: &str) -> Vec<Value> {
    let evs = stored(c, id).await;
    let seqs: Vec<u64> = evs.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=evs.len() as u64).collect::<Vec<_>>());
    let mut completes: BTreeMap<String, usize> = BTreeMap::new();
    for e in evs.iter().filter(|e| e["type"] == "message.user") {
        completes.insert(e["turn_id"].as_str().unwrap().to_string(), 0);
    }
    for (i, e) in evs.iter().enumerate() {
        if e["type"] == "message.complete" {
            let turn = e["turn_id"].as_str().unwrap();
            *completes
                .get_mut(turn)
                .unwrap_or_else(|| panic!("a complete for no accepted turn: {e}")) += 1;
            let later = evs[i + 1..].iter().any(|x| x["turn_id"] == e["turn_id"]);
            assert!(!later, "an event of {turn} after its message.complete");
        }
    }
    assert!(
        completes.values().all(|n| *n == 1),
        "message.complete per turn: {completes:?}"
    );
    let text = serde_json::to_string(&evs).unwrap();
    assert!(
        !text.contains("INJECTED"),
        "injected content stored: {text}"
    );
    evs
}

#[tokio::test]
async fn a_python_host_speaking_part_2_runs_turns_interrupts_and_compressions() {
    let dir = tempdir();
    let gw = gateway(dir.path(), "good", &[]);
    let mut c = gw.client().await;
    let id = session(&mut c).await;
    let t = submit(&mut c, &id, "hello from python ").await;
    let evs = turn_events(&mut c, &t).await;
    let done = &evs.last().unwrap()["payload"];
    assert_eq!(done["status"], "complete");
    assert_eq!(done["text"], "hello from python ");
    assert_eq!(deltas_text(&evs), "hello from python ");

    let t = submit(&mut c, &id, "/hang").await;
    while c.next_event().await["type"] != "message.delta" {}
    c.ok("session.interrupt", json!({"session_id": id})).await;
    assert_eq!(complete(&mut c, &t).await["status"], "interrupted");

    let r = c.ok("session.compress", json!({"session_id": id})).await;
    assert_eq!(r["status"], "compressed");
    assert_eq!(r["removed"], 4);
    assert_consistent(&mut c, &id).await;
    assert_eq!(host(&mut c).await["restarts"], 0);
}

#[tokio::test]
async fn garbage_around_every_host_frame_does_not_disturb_the_turns() {
    let dir = tempdir();
    let gw = gateway(dir.path(), "noisy", &[]);
    let mut c = gw.client().await;
    let id = session(&mut c).await;
    for prompt in ["first noisy turn ", "second noisy turn"] {
        let t = submit(&mut c, &id, prompt).await;
        let evs = turn_events(&mut c, &t).await;
        let done = &evs.last().unwrap()["payload"];
        assert_eq!(done["status"], "complete", "{evs:?}");
        assert_eq!(done["text"], prompt);
        assert_eq!(deltas_text(&evs), prompt);
        ping(&mut c).await;
    }
    let evs = assert_consistent(&mut c, &id).await;
    let types: Vec<_> = evs.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        types,
        [
            "session.created",
            "message.user",
            "message.start",
            "message.complete",
            "message.user",
            "message.start",
            "message.complete"
        ]
    );
    // Garbage is answered and ignored: the host was never declared dead.
    let h = host(&mut c).await;
    assert_eq!(
        (h["state"].as_str(), h["restarts"].as_u64()),
        (Some("up"), Some(0))
    );
}

#[tokio::test]
async fn frames_for_unknown_turns_and_requests_and_forbidden_events_are_dropped() {
    let dir = tempdir();
    let gw = gateway(dir.path(), "unknown_ids", &[]);
    let mut c = gw.client().await;
    let id = session(&mut c).await;
    for (n, prompt) in ["one two three ", "four five"].iter().enumerate() {
        let t = submit(&mut c, &id, prompt).await;
        let evs = turn_events(&mut c, &t).await;
        let done = &evs.last().unwrap()["payload"];
        assert_eq!(done["status"], "complete");
        assert_eq!(done["text"], *prompt);
        // Offsets are the gateway's, whatever the host claimed.
        let mut offset = 0;
        for d in evs.iter().filter(|e| e["type"] == "message.delta") {
            assert_eq!(d["payload"]["offset"], offset, "{d}");
            offset += d["payload"]["text"].as_str().unwrap().len() as u64;
        }
        assert_eq!(deltas_text(&evs), *prompt);
        // So are todo revisions: one per valid update, counting from 1.
        let todos: Vec<_> = evs.iter().filter(|e| e["type"] == "todo.updated").collect();
        assert_eq!(todos.len(), 1, "{evs:?}");
        assert_eq!(todos[0]["payload"]["revision"], n as u64 + 1);
    }
    // Acks for other request ids neither answer nor fail the compression.
    let r = c.ok("session.compress", json!({"session_id": id})).await;
    assert_eq!(r["status"], "compressed", "{r}");
    assert_eq!(r["removed"], 4);
    let compacted = loop {
        let e = c.next_event().await;
        if e["type"] == "session.compacted" {
            break e;
        }
    };
    assert_eq!(compacted["payload"]["summary"], "Summary of 4 messages.");
    // A turn after all that runs normally.
    let t = submit(&mut c, &id, "after").await;
    assert_eq!(complete(&mut c, &t).await["text"], "after");
    assert_consistent(&mut c, &id).await;
    assert_eq!(host(&mut c).await["restarts"], 0);
}

#[tokio::test]
async fn lines_over_the_line_cap_are_skipped_and_the_turns_complete() {
    let dir = tempdir();
    let gw = gateway(dir.path(), "oversized", &[]);
    let mut c = gw.client().await;
    let id = session(&mut c).await;
    for prompt in ["big lines first", "and again"] {
        let t = submit(&mut c, &id, prompt).await;
        let done = complete(&mut c, &t).await;
        assert_eq!(done["status"], "complete", "{done}");
        assert_eq!(done["text"], prompt);
        ping(&mut c).await;
    }
    assert_consistent(&mut c, &id).await;
    assert_eq!(host(&mut c).await["restarts"], 0);
}

#[tokio::test]
async fn a_line_that_never_ends_is_a_dead_host_and_the_replacement_serves() {
    let dir = tempdir();
    let mode = once("endless_line", &dir);
    let gw = gateway(dir.path(), &mode, &["--host-heartbeat-s", "1"]);
    let mut c = gw.client().await;
    let id = session(&mut c).await;
    let t = submit(&mut c, &id, "never ends").await;
    let done = complete(&mut c, &t).await;
    assert_eq!(done["status"], "error", "{done}");
    assert_eq!(done["failure_reason"], "host_crash");
    assert_eq!(done["recoverable"], true);
    assert_eq!(done["text"], "partial ", "the text streamed so far is kept");
    ping(&mut c).await;
    let t = submit(&mut c, &id, "on the replacement").await;
    assert_eq!(complete(&mut c, &t).await["text"], "on the replacement");
    assert_consistent(&mut c, &id).await;
    assert_eq!(host(&mut c).await["restarts"], 1);
}

#[tokio::test]
async fn a_host_that_never_says_hello_is_dead_and_then_prompts_get_5019() {
    let dir = tempdir();
    // No host ever says hello: without `--host-start-deadline-s 0` the
    // gateway would exit once the slot rests (tests/host_start.rs).
    let gw = gateway(
        dir.path(),
        "no_hello",
        &["--host-restarts", "0", "--host-start-deadline-s", "0"],
    );
    let mut c = gw.client().await;
    let id = session(&mut c).await;
    // While the host is starting a prompt is accepted and waits for it.
    let t = submit(&mut c, &id, "waiting for hello").await;
    ping(&mut c).await;
    // No hello within 10 s: dead, and with no restart left the slot rests
    // (for the 300 s period), so the turn finds no host.
    let done = complete(&mut c, &t).await;
    assert_eq!(done["status"], "error", "{done}");
    assert_eq!(done["failure_reason"], "host_unavailable");
    assert_eq!(host(&mut c).await["state"], "resting");
    // Now nothing is coming: refused before anything is written.
    let before = stored(&mut c, &id).await.len();
    let e = c
        .err("prompt.submit", json!({"session_id": id, "text": "x"}))
        .await;
    assert_eq!(e["code"], 5019);
    assert_eq!(stored(&mut c, &id).await.len(), before);
    ping(&mut c).await;
    assert_consistent(&mut c, &id).await;
}

#[tokio::test]
async fn a_hello_after_the_hello_timeout_is_too_late_and_the_replacement_serves() {
    let dir = tempdir();
    let mode = once("late_hello", &dir);
    let gw = gateway(dir.path(), &mode, &["--host-restarts", "1"]);
    let mut c = gw.client().await;
    let id = session(&mut c).await;
    let t = submit(&mut c, &id, "held until a host is up").await;
    ping(&mut c).await;
    // The late host is killed at 10 s, before its hello; the replacement
    // says hello at once and takes the held turn.
    let done = complete(&mut c, &t).await;
    assert_eq!(done["status"], "complete", "{done}");
    assert_eq!(done["text"], "held until a host is up");
    let h = host(&mut c).await;
    assert_eq!(
        (h["state"].as_str(), h["restarts"].as_u64()),
        (Some("up"), Some(1))
    );
    assert_consistent(&mut c, &id).await;
}

#[tokio::test]
async fn a_turn_answered_only_with_garbage_ends_at_its_deadline_and_the_host_serves_the_next() {
    let dir = tempdir();
    let gw = gateway(dir.path(), "garbage_turn", &["--turn-deadline-s", "2"]);
    let mut c = gw.client().await;
    let id = session(&mut c).await;
    host_up(&mut c).await;
    let t = submit(&mut c, &id, "only garbage comes back").await;
    let done = complete(&mut c, &t).await;
    assert_eq!(done["status"], "error", "{done}");
    assert_eq!(done["failure_reason"], "host_timeout");
    assert_eq!(done["recoverable"], true);
    let t = submit(&mut c, &id, "a proper answer").await;
    assert_eq!(complete(&mut c, &t).await["text"], "a proper answer");
    assert_consistent(&mut c, &id).await;
    assert_eq!(host(&mut c).await["restarts"], 0);
}

#[tokio::test]
async fn a_host_that_never_reads_its_stdin_cannot_hold_a_turn_past_its_deadline() {
    let dir = tempdir();
    let gw = gateway(dir.path(), "deaf", &["--turn-deadline-s", "2"]);
    let mut c = gw.client().await;
    let id = session(&mut c).await;
    host_up(&mut c).await;
    let t = submit(&mut c, &id, "nobody reads this").await;
    let done = complete(&mut c, &t).await;
    assert_eq!(done["status"], "error", "{done}");
    let reason = done["failure_reason"].as_str();
    assert!(
        matches!(reason, Some("host_timeout" | "host_crash")),
        "{done}"
    );
    ping(&mut c).await;
    assert_consistent(&mut c, &id).await;
}

#[tokio::test]
async fn a_host_that_dies_in_the_middle_of_a_line_fails_its_turn_once() {
    let dir = tempdir();
    let mode = once("crash_partial", &dir);
    let gw = gateway(dir.path(), &mode, &[]);
    let mut c = gw.client().await;
    let id = session(&mut c).await;
    let t = submit(&mut c, &id, "crash mid-line").await;
    let done = complete(&mut c, &t).await;
    assert_eq!(done["failure_reason"], "host_crash", "{done}");
    assert_eq!(done["text"], "before the crash ");
    let t = submit(&mut c, &id, "next").await;
    assert_eq!(complete(&mut c, &t).await["text"], "next");
    assert_consistent(&mut c, &id).await;
}

#[tokio::test]
async fn a_flood_of_host_lines_does_not_starve_clients() {
    let dir = tempdir();
    let gw = gateway(dir.path(), "flood", &[]);
    let mut c = gw.client().await;
    let id = session(&mut c).await;
    let mut other = gw.client().await;
    for i in 0..3 {
        let prompt = format!("during the flood {i}");
        let t = submit(&mut c, &id, &prompt).await;
        ping(&mut other).await;
        assert_eq!(complete(&mut c, &t).await["text"], prompt.as_str());
    }
    assert_consistent(&mut c, &id).await;
    assert_eq!(host(&mut c).await["restarts"], 0);
}

/// Runs a `/hang` turn on a host in `mode`, drains the gateway with
/// SIGTERM, starts it again, and returns the turn's one `message.complete`.
async fn drain_with_a_hanging_turn(mode: &str) -> Value {
    let dir = tempdir();
    let mut gw = gateway(dir.path(), mode, &[]);
    let mut c = gw.client().await;
    let id = session(&mut c).await;
    let t = submit(&mut c, &id, "/hang").await;
    while c.next_event().await["type"] != "message.delta" {}
    let pid = host(&mut c).await["pid"].as_u64().expect("a host pid");
    // The host acknowledges the shutdown and then keeps talking without
    // ever exiting: the gateway kills it after the grace and exits cleanly.
    assert_eq!(gw.terminate(), Some(0));
    let gone = !std::path::Path::new(&format!("/proc/{pid}")).exists()
        || std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| s.contains(") Z "))
            .unwrap_or(true);
    assert!(gone, "the host {pid} outlived the gateway");
    // Whatever it sent after the shutdown, the turn has exactly one
    // message.complete once the gateway is back.
    gw.restart();
    let mut c = gw.client().await;
    let r = c
        .ok(
            "session.resume",
            json!({"session_id": id, "last_seen": 0, "omit_messages": true}),
        )
        .await;
    let mut evs = r["events"].as_array().unwrap().clone();
    while !evs
        .iter()
        .any(|e| e["type"] == "message.complete" && e["turn_id"] == t)
    {
        evs.push(c.next_event().await);
    }
    let evs = assert_consistent(&mut c, &id).await;
    let done: Vec<_> = evs
        .iter()
        .filter(|e| e["type"] == "message.complete")
        .collect();
    assert_eq!(done.len(), 1, "{evs:?}");
    let done = done[0].clone();
    let t = submit(&mut c, &id, "after the restart").await;
    assert_eq!(complete(&mut c, &t).await["text"], "after the restart");
    done
}

/// The drain ends a running turn itself (`interrupted` /
/// `gateway_shutdown`) before the hosts are told to stop, so whatever a
/// host says after `shutdown` can neither add a second ending nor keep the
/// turn open.
fn assert_ended_by_the_drain(done: &Value) {
    assert_eq!(done["payload"]["status"], "interrupted", "{done}");
    assert_eq!(
        done["payload"]["failure_reason"], "gateway_shutdown",
        "{done}"
    );
    assert_eq!(done["payload"]["recoverable"], true, "{done}");
}

#[tokio::test]
async fn a_turn_finished_after_shutdown_counts_once_and_the_babble_after_it_not_at_all() {
    // The host finishes its turn after `shutdown`, then repeats ends,
    // hellos and garbage: none of it counts.
    let done = drain_with_a_hanging_turn("after_shutdown").await;
    assert_ended_by_the_drain(&done);
}

#[tokio::test]
async fn a_host_that_babbles_after_shutdown_without_ending_its_turn_cannot_keep_it_open() {
    let done = drain_with_a_hanging_turn("shutdown_babble").await;
    assert_ended_by_the_drain(&done);
}

/// A host that says `shutdown.ack` though nobody asked it to stop, and then
/// goes on heartbeating and serving, keeps its slot: only an answer to the
/// gateway's own `shutdown` marks a slot finishing (otherwise the slot
/// would take no work and never restart, and every prompt would get 5019).
#[tokio::test]
async fn an_unsolicited_shutdown_ack_does_not_take_the_slot_out_for_good() {
    let dir = tempdir();
    let gw = gateway(dir.path(), "rogue_ack", &[]);
    let mut c = gw.client().await;
    let id = session(&mut c).await;
    // The first turn is served; the rogue ack follows its turn.end.
    let t = submit(&mut c, &id, "first").await;
    assert_eq!(complete(&mut c, &t).await["text"], "first");
    let deadline = tokio::time::Instant::now() + RECOVERY;
    let t = loop {
        let r = c
            .call("prompt.submit", json!({"session_id": id, "text": "served"}))
            .await;
        if let Some(t) = r["result"]["turn_id"].as_str() {
            break t.to_string();
        }
        assert_eq!(r["error"]["code"], 5019, "{r}");
        assert!(
            tokio::time::Instant::now() < deadline,
            "the slot never served again: {}",
            host(&mut c).await
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(complete(&mut c, &t).await["text"], "served");
}

/// Every frame `c` receives until the `message.complete` of `turn_id`, as
/// raw text (so the size of what reached the client can be checked).
async fn frames_through_complete(c: &mut Client, turn_id: &str) -> Vec<String> {
    let is_end =
        |v: &Value| v["params"]["type"] == "message.complete" && v["params"]["turn_id"] == turn_id;
    // What arrived while a reply was awaited is already parsed.
    let mut out: Vec<String> = c.inbox.drain(..).map(|v| v.to_string()).collect();
    if out
        .iter()
        .any(|f| is_end(&serde_json::from_str(f).unwrap()))
    {
        return out;
    }
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let text = match tokio::time::timeout(QUIET, c.next_text()).await {
            Ok(text) => text,
            Err(_) => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "no message.complete for {turn_id}"
                );
                continue;
            }
        };
        let done = is_end(&serde_json::from_str(&text).unwrap());
        out.push(text);
        if done {
            return out;
        }
    }
}

/// A second client attached to `id`, its resume reply drained.
async fn peer(gw: &Gateway, id: &str) -> Client {
    let mut p = gw.client().await;
    p.ok(
        "session.resume",
        json!({"session_id": id, "omit_messages": true}),
    )
    .await;
    p
}

/// The host line cap is its own flag: a line over it ends the turn it
/// belongs to with an error, reaches no peer, and the host keeps serving.
#[tokio::test]
async fn a_line_over_the_host_line_cap_ends_its_turn_with_an_error_and_reaches_no_peer() {
    let dir = tempdir();
    let cap = 65_536;
    let mode = format!("giant --bytes {}", 4 * cap);
    let gw = gateway(
        dir.path(),
        &mode,
        &["--max-host-line-bytes", &cap.to_string()],
    );
    let mut c = gw.client().await;
    let id = session(&mut c).await;
    let mut p = peer(&gw, &id).await;
    host_up(&mut c).await;
    let t = submit(&mut c, &id, "/giant").await;
    for (who, frames) in [
        ("submitter", frames_through_complete(&mut c, &t).await),
        ("peer", frames_through_complete(&mut p, &t).await),
    ] {
        for f in &frames {
            assert!(f.len() < cap, "the {who} got a frame of {} bytes", f.len());
            assert!(!f.contains("GIANT"), "the {who} got the giant payload");
        }
        let events: Vec<Value> = frames
            .iter()
            .map(|f| serde_json::from_str::<Value>(f).unwrap()["params"].clone())
            .filter(|e| e["turn_id"] == t)
            .collect();
        let types: Vec<_> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert_eq!(
            types,
            [
                "message.user",
                "message.start",
                "message.delta",
                "error",
                "message.complete"
            ],
            "{who}: {events:?}"
        );
        let done = &events[4]["payload"];
        assert_eq!(done["status"], "error", "{done}");
        assert_eq!(done["failure_reason"], "host_line_too_long");
        assert_eq!(done["text"], "before ");
        assert!(events[3]["payload"]["message"]
            .as_str()
            .unwrap()
            .contains("host line cap"));
    }
    // The rest of that turn (more deltas, its turn.end) counted for nothing,
    // and the same host serves the next turn.
    let t = submit(&mut c, &id, "after the giant").await;
    assert_eq!(complete(&mut c, &t).await["text"], "after the giant");
    // A control answer over the cap fails the request at once.
    let e = c
        .err(
            "session.compress",
            json!({"session_id": id, "focus": "giant"}),
        )
        .await;
    assert_eq!(e["code"], 5019, "{e}");
    assert!(
        e["message"].as_str().unwrap().contains("host line cap"),
        "{e}"
    );
    ping(&mut c).await;
    let evs = assert_consistent(&mut c, &id).await;
    assert!(!serde_json::to_string(&evs).unwrap().contains("GIANT"));
    assert_eq!(host(&mut c).await["restarts"], 0);
}

/// With the default cap (16 MiB), a 17 MiB line of a turn does the same.
#[tokio::test]
async fn a_line_over_the_default_host_line_cap_ends_its_turn() {
    let dir = tempdir();
    let gw = gateway(dir.path(), "giant", &["--max-frame-bytes", "1048576"]);
    let mut c = gw.client().await;
    let id = session(&mut c).await;
    let t = submit(&mut c, &id, "/giant").await;
    let done = complete(&mut c, &t).await;
    assert_eq!(done["status"], "error", "{done}");
    assert_eq!(done["failure_reason"], "host_line_too_long");
    let t = submit(&mut c, &id, "next").await;
    assert_eq!(complete(&mut c, &t).await["text"], "next");
    assert_consistent(&mut c, &id).await;
}

/// Waits until the one slot is up after `restarts` restarts.
async fn host_up_after(c: &mut Client, restarts: u64) -> Value {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let h = host(c).await;
        if h["state"] == "up" && h["restarts"] == restarts {
            return h;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the slot never came up after {restarts} restart(s): {h}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_hello_with_another_protocol_version_is_refused_and_the_slot_restarted() {
    let dir = tempdir();
    let mode = once("bad_protocol", &dir);
    let gw = gateway(dir.path(), &mode, &[]);
    let mut c = gw.client().await;
    let id = session(&mut c).await;
    // Accepted while the slot starts; run by the good replacement.
    let t = submit(&mut c, &id, "on the replacement").await;
    assert_eq!(complete(&mut c, &t).await["text"], "on the replacement");
    let h = host_up_after(&mut c, 1).await;
    assert_ne!(h["pid"], Value::Null);
    assert_consistent(&mut c, &id).await;
}

#[tokio::test]
async fn a_hello_with_a_pid_that_is_not_the_hosts_own_is_refused_and_the_slot_restarted() {
    let dir = tempdir();
    let mode = once("bad_pid", &dir);
    let gw = gateway(dir.path(), &mode, &[]);
    let mut c = gw.client().await;
    let id = session(&mut c).await;
    let h = host_up_after(&mut c, 1).await;
    // The pid that is up is the replacement's own, not the one the first
    // host claimed (the gateway's).
    let pid = h["pid"].as_u64().unwrap();
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    assert!(
        String::from_utf8_lossy(&cmdline).contains("fake_host.py"),
        "{pid} is not a fake host"
    );
    let t = submit(&mut c, &id, "served").await;
    assert_eq!(complete(&mut c, &t).await["text"], "served");
}

#[tokio::test]
async fn a_host_that_always_lies_in_its_hello_ends_up_resting_and_prompts_get_5019() {
    let dir = tempdir();
    // No hello is ever accepted: kept serving past the slot's rest, which
    // would otherwise end the gateway (tests/host_start.rs).
    let gw = gateway(
        dir.path(),
        "bad_protocol",
        &[
            "--host-restarts",
            "1",
            "--host-restart-period-s",
            "600",
            "--host-start-deadline-s",
            "0",
        ],
    );
    let mut c = gw.client().await;
    let id = session(&mut c).await;
    let deadline = tokio::time::Instant::now() + WAIT;
    while host(&mut c).await["state"] != "resting" {
        assert!(tokio::time::Instant::now() < deadline, "never resting");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(host(&mut c).await["restarts"], 1);
    let e = c
        .err("prompt.submit", json!({"session_id": id, "text": "x"}))
        .await;
    assert_eq!(e["code"], 5019);
    ping(&mut c).await;
}

/// A gateway with one fake host whose stderr (its log) goes to `log`.
fn gateway_logging_to(dir: &std::path::Path, mode: &str, log: &std::path::Path) -> (Child, String) {
    let command = format!("python3 {FAKE_HOST} {mode}");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_tether"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir)
        .args(["--hosts", "1", "--host-command", &command])
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let addr = line
        .trim()
        .strip_prefix("tether listening on http://")
        .unwrap_or_else(|| panic!("unexpected start-up line {line:?}"))
        .to_string();
    (Child(child), addr)
}

/// Kills the gateway when dropped.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn well_formed_frames_a_host_may_not_send_are_dropped_and_logged_sparingly() {
    let dir = tempdir();
    let log = dir.path().join("gateway.log");
    let (_gw, addr) = gateway_logging_to(&dir.path().join("data"), "forbidden_flood", &log);
    let mut c = Client::connect(&format!("ws://{addr}/ws")).await;
    let id = session(&mut c).await;
    for prompt in ["flooded once ", "and twice"] {
        let t = submit(&mut c, &id, prompt).await;
        let done = complete(&mut c, &t).await;
        assert_eq!(done["status"], "complete", "{done}");
        assert_eq!(done["text"], prompt);
    }
    assert_consistent(&mut c, &id).await;
    let h = host(&mut c).await;
    assert_eq!(
        (h["state"].as_str(), h["restarts"].as_u64()),
        (Some("up"), Some(0))
    );
    // 40 000 forbidden frames; every one dropped, a few dozen logged.
    let text = std::fs::read_to_string(&log).unwrap();
    let lines = text.lines().count();
    assert!(
        lines <= 100,
        "{lines} log lines for 40 000 forbidden frames"
    );
    assert!(
        text.contains("forbidden_frames"),
        "the count is logged: {text}"
    );
}

/// A host that offered to keep histories and then says it lost one
/// (`history_mismatch`): that turn fails with the host's reason, and the
/// host is replaced, since the gateway's books of what it holds can no
/// longer be trusted; the replacement runs the next turn.
#[tokio::test]
async fn a_host_that_loses_a_history_it_kept_is_replaced() {
    let dir = tempdir();
    let mode = once("forgetful", &dir);
    let gw = gateway(dir.path(), &mode, &[]);
    let mut c = gw.client().await;
    let id = session(&mut c).await;
    // The first two turns go with base 0 (nothing is held before the
    // first, and the first's history is empty); the third names the two
    // messages the second brought.
    for prompt in ["first ", "second "] {
        let t = submit(&mut c, &id, prompt).await;
        assert_eq!(complete(&mut c, &t).await["status"], "complete");
    }
    let t = submit(&mut c, &id, "third ").await;
    let done = complete(&mut c, &t).await;
    assert_eq!(done["status"], "error", "{done}");
    assert_eq!(done["failure_reason"], "history_mismatch", "{done}");
    host_up_after(&mut c, 1).await;
    let t = submit(&mut c, &id, "on the replacement ").await;
    assert_eq!(complete(&mut c, &t).await["text"], "on the replacement ");
    assert_consistent(&mut c, &id).await;
}

/// From a host that never offered to keep histories, `history_mismatch` is
/// a turn's failure reason like any other: the host keeps serving.
#[tokio::test]
async fn history_mismatch_from_a_host_that_keeps_none_only_fails_the_turn() {
    let dir = tempdir();
    let gw = gateway(dir.path(), "mismatch_blind", &[]);
    let mut c = gw.client().await;
    let id = session(&mut c).await;
    let t = submit(&mut c, &id, "first ").await;
    let done = complete(&mut c, &t).await;
    assert_eq!(done["failure_reason"], "history_mismatch", "{done}");
    let t = submit(&mut c, &id, "second ").await;
    assert_eq!(complete(&mut c, &t).await["text"], "second ");
    assert_eq!(host(&mut c).await["restarts"], 0);
    assert_consistent(&mut c, &id).await;
}
