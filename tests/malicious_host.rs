//! A compute host that tries to pass off what it may not, black-box: the
//! gateway runs `tests/fixtures/malicious_host.py` (or the echo engine) and
//! must check what it sends the way it checks what a client sends
//! (PROTOCOL Part 2 and Part 4, "The host edge"):
//!
//! - a host line nested deeper than 64 levels is refused whole and ends
//!   the turn it names (`host_protocol_error`); no client ever receives a
//!   frame nested deeper than that, and the transcript loses nothing;
//! - a `status.update` of a kind only the gateway announces is dropped;
//! - a `turn.end` `interrupted` that the gateway did not ask for fails the
//!   turn instead of passing as an interrupt;
//! - text a host controls cannot start a line of its own in the gateway's
//!   log, nor put an escape sequence in it.
//!
//! The frames are read as text and their depth checked before anything is
//! parsed: a test client is one of the parsers a deep frame would break.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use common::{session, tempdir, Client, Gateway};
use serde_json::{json, Value};

const HOST: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/malicious_host.py"
);

/// Bounds every wait for a turn's end.
const WAIT: Duration = Duration::from_secs(30);

/// What the gateway accepts from clients and hosts alike, and so the
/// deepest event frame it sends (an event's payload sits as deep in the
/// host's frame as in the client's).
const MAX_DEPTH: usize = 64;

/// The deepest reply: one that lists events (`session.events.since`,
/// `session.resume`) holds each two levels further in (`result`,
/// `events`).
const MAX_REPLY_DEPTH: usize = MAX_DEPTH + 2;

/// A gateway with one host slot running the malicious host.
fn gateway(dir: &Path) -> Gateway {
    let command = format!("python3 {HOST}");
    Gateway::start(dir, &["--hosts", "1", "--host-command", &command])
}

/// The deepest `[`/`{` nesting of a JSON text (outside strings).
fn depth(text: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for b in text.bytes() {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// Parses a frame the gateway sent, after checking its depth: an event
/// no deeper than what the gateway itself accepts, a reply two levels more.
fn parse(text: &str) -> Value {
    let d = depth(text);
    let event = text.starts_with(r#"{"jsonrpc":"2.0","method":"event""#);
    let limit = if event { MAX_DEPTH } else { MAX_REPLY_DEPTH };
    assert!(
        d <= limit,
        "the gateway sent a frame nested {d} levels deep: {}…",
        &text[..text.len().min(300)]
    );
    serde_json::from_str(text).expect("a frame is JSON")
}

/// The next frame, read as text and checked (see [`parse`]).
async fn next(c: &mut Client) -> Value {
    let text = tokio::time::timeout(WAIT, c.next_text())
        .await
        .expect("no frame in time");
    parse(&text)
}

/// Sends a request and waits for its reply, every frame checked on the
/// way; events that arrive meanwhile are kept in order in `events`.
async fn call(c: &mut Client, events: &mut Vec<Value>, method: &str, params: Value) -> Value {
    // Frames the common client parsed already (they were shallow enough).
    for f in c.inbox.drain(..) {
        if f["method"] == "event" {
            events.push(f["params"].clone());
        }
    }
    let id = format!("m-{method}-{}", events.len());
    let frame = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    c.send_text(&frame.to_string()).await;
    loop {
        let f = next(c).await;
        if f["method"] == "event" {
            events.push(f["params"].clone());
        } else if f["id"] == id {
            return f;
        }
    }
}

/// `call`, asserting success.
async fn ok(c: &mut Client, events: &mut Vec<Value>, method: &str, params: Value) -> Value {
    let r = call(c, events, method, params).await;
    assert!(r.get("error").is_none(), "{method} failed: {r}");
    r["result"].clone()
}

/// Submits `text` and returns the turn's events through its
/// `message.complete` (every frame checked).
async fn turn(c: &mut Client, id: &str, text: &str) -> Vec<Value> {
    let mut events = Vec::new();
    let r = ok(
        c,
        &mut events,
        "prompt.submit",
        json!({"session_id": id, "text": text}),
    )
    .await;
    let turn_id = r["turn_id"].as_str().unwrap().to_string();
    let mut out: Vec<Value> = events
        .into_iter()
        .filter(|e| e["turn_id"] == turn_id)
        .collect();
    while !out.iter().any(|e| e["type"] == "message.complete") {
        let f = next(c).await;
        if f["method"] == "event" && f["params"]["turn_id"] == turn_id {
            out.push(f["params"].clone());
        }
    }
    out
}

fn complete(events: &[Value]) -> &Value {
    let last = events.last().expect("events");
    assert_eq!(last["type"], "message.complete", "{events:?}");
    &last["payload"]
}

fn of_type<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == kind).collect()
}

/// Waits until the host said hello.
async fn host_up(c: &mut Client) -> Value {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let mut events = Vec::new();
        let s = ok(c, &mut events, "session.events.stats", json!({})).await;
        if s["hosts"][0]["state"] == "up" {
            return s["hosts"][0].clone();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the host never came up"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Every durable event of the session, checked: no deeper than the bound,
/// seqs 1..=n, exactly one `message.complete` per accepted turn, last of
/// its turn.
async fn stored(c: &mut Client, id: &str) -> Vec<Value> {
    let mut events = Vec::new();
    let r = ok(
        c,
        &mut events,
        "session.events.since",
        json!({"session_id": id, "last_seen": 0}),
    )
    .await;
    let evs = r["events"].as_array().unwrap().clone();
    let seqs: Vec<u64> = evs.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=evs.len() as u64).collect::<Vec<_>>());
    for e in evs.iter().filter(|e| e["type"] == "message.user") {
        let turn = &e["turn_id"];
        let ends: Vec<usize> = (0..evs.len())
            .filter(|&i| evs[i]["type"] == "message.complete" && &evs[i]["turn_id"] == turn)
            .collect();
        assert_eq!(ends.len(), 1, "message.complete of {turn}: {evs:?}");
        assert!(
            !evs[ends[0] + 1..].iter().any(|x| &x["turn_id"] == turn),
            "an event of {turn} after its message.complete"
        );
    }
    assert!(
        !serde_json::to_string(&evs).unwrap().contains("INJECTED"),
        "{evs:?}"
    );
    evs
}

/// The transcript a resume shows has one message per stored transcript
/// event, nothing missing (PROTOCOL 1.4, `Message`).
async fn assert_transcript_whole(c: &mut Client, id: &str) {
    let evs = stored(c, id).await;
    let want: BTreeSet<u64> = evs
        .iter()
        .filter(|e| {
            ["message.user", "message.complete", "tool.complete"]
                .contains(&e["type"].as_str().unwrap())
        })
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    let mut events = Vec::new();
    let r = ok(
        c,
        &mut events,
        "session.resume",
        json!({"session_id": id, "attach": false}),
    )
    .await;
    let got: BTreeSet<u64> = r["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(got, want, "the transcript misses stored messages");
    assert_eq!(
        r["session"]["message_count"].as_u64(),
        Some(want.len() as u64),
        "{r}"
    );
}

/// A turn the gateway ended because its host broke the protocol.
fn assert_protocol_error(events: &[Value], says: &str) {
    let done = complete(events);
    assert_eq!(done["status"], "error", "{events:?}");
    assert_eq!(done["failure_reason"], "host_protocol_error", "{done}");
    assert_eq!(done["recoverable"], false, "{done}");
    let errors = of_type(events, "error");
    assert_eq!(errors.len(), 1, "{events:?}");
    let message = errors[0]["payload"]["message"].as_str().unwrap();
    assert!(message.contains(says), "{message}");
}

#[tokio::test]
async fn host_frames_nested_past_64_levels_end_their_turn_and_reach_nobody() {
    let dir = tempdir();
    let gw = gateway(dir.path());
    let mut c = gw.client().await;
    let id = session(&mut c).await;
    host_up(&mut c).await;

    // At the bound: accepted, stored and relayed as the host wrote it.
    for what in ["tool.start", "tool.complete", "status.update"] {
        let events = turn(&mut c, &id, &format!("/deep {MAX_DEPTH} {what}")).await;
        assert_eq!(complete(&events)["status"], "complete", "{events:?}");
        assert_eq!(of_type(&events, what).len(), 1, "{what}: {events:?}");
    }
    // One level past it, or thousands: refused whole, and the turn ends.
    for (levels, what) in [
        (MAX_DEPTH + 1, "tool.start"),
        (5_000, "tool.complete"),
        (200_000, "status.update"),
        (5_000, "turn.end"),
    ] {
        let events = turn(&mut c, &id, &format!("/deep {levels} {what}")).await;
        assert_protocol_error(&events, "nested deeper than 64 levels");
        if what != "turn.end" {
            assert!(of_type(&events, what).is_empty(), "{what}: {events:?}");
        }
    }
    // A compression whose answer is nested too deeply fails (5019).
    let mut events = Vec::new();
    let r = call(
        &mut c,
        &mut events,
        "session.compress",
        json!({"session_id": id, "focus": "deep 5000"}),
    )
    .await;
    assert_eq!(r["error"]["code"], 5019, "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("nested deeper than 64 levels"),
        "{r}"
    );
    // The host keeps its slot and serves the next turn.
    let events = turn(&mut c, &id, "after").await;
    assert_eq!(complete(&events)["text"], "after");
    assert_eq!(host_up(&mut c).await["restarts"], 0);
    assert_transcript_whole(&mut c, &id).await;
}

/// The echo engine's `/tool NAME JSON` with arguments 127 levels deep: its
/// `tool.start` line is past the bound, so the turn fails and nothing of it
/// is stored, and the transcript (which a resume, a branch and the history
/// sent to hosts all come from) still has every message that is stored.
#[tokio::test]
async fn an_echo_tool_call_nested_past_the_bound_fails_and_the_transcript_loses_nothing() {
    let dir = tempdir();
    let gw = Gateway::start(dir.path(), &["--hosts", "1"]);
    let mut c = gw.client().await;
    let id = session(&mut c).await;
    let args = format!("{}1{}", "[".repeat(127), "]".repeat(127));
    let events = turn(&mut c, &id, &format!("/tool deep {args}\nreply")).await;
    assert_protocol_error(&events, "nested deeper than 64 levels");
    let shallow = format!("{}1{}", "[".repeat(20), "]".repeat(20));
    let events = turn(&mut c, &id, &format!("/tool shallow {shallow}\nreply")).await;
    assert_eq!(complete(&events)["text"], "reply", "{events:?}");
    assert_transcript_whole(&mut c, &id).await;
    // A branch of the whole session holds the same transcript.
    let mut events = Vec::new();
    let b = ok(
        &mut c,
        &mut events,
        "session.branch",
        json!({"session_id": id}),
    )
    .await;
    let branch = b["session"]["session_id"].as_str().unwrap().to_string();
    assert_transcript_whole(&mut c, &branch).await;
    // The next turn's history reached the host whole: the echo engine
    // answers it like any other.
    let events = turn(&mut c, &id, "and on").await;
    assert_eq!(complete(&events)["text"], "and on");
}

#[tokio::test]
async fn status_kinds_only_the_gateway_announces_are_refused_from_a_host() {
    let dir = tempdir();
    let gw = gateway(dir.path());
    let mut c = gw.client().await;
    let id = session(&mut c).await;
    let events = turn(
        &mut c,
        &id,
        "/status compacted queued handoff compacting ready thinking",
    )
    .await;
    assert_eq!(complete(&events)["status"], "complete", "{events:?}");
    let kinds: Vec<&str> = of_type(&events, "status.update")
        .iter()
        .map(|e| e["payload"]["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["thinking"], "{events:?}");
    let stored_kinds: Vec<Value> = stored(&mut c, &id)
        .await
        .into_iter()
        .filter(|e| e["type"] == "status.update")
        .map(|e| e["payload"]["kind"].clone())
        .collect();
    assert_eq!(stored_kinds, [json!("thinking")]);
}

#[tokio::test]
async fn a_host_cannot_end_a_turn_interrupted_that_nothing_interrupted() {
    let dir = tempdir();
    let gw = gateway(dir.path());
    let mut c = gw.client().await;
    let id = session(&mut c).await;
    let events = turn(&mut c, &id, "/interrupted").await;
    assert_protocol_error(&events, "interrupted");
    // A real interrupt still ends its turn `interrupted`.
    let mut events = Vec::new();
    let r = ok(
        &mut c,
        &mut events,
        "prompt.submit",
        json!({"session_id": id, "text": "/hang"}),
    )
    .await;
    let t = r["turn_id"].as_str().unwrap().to_string();
    while !events
        .iter()
        .any(|e| e["turn_id"] == t && e["type"] == "message.delta")
    {
        let f = next(&mut c).await;
        if f["method"] == "event" {
            events.push(f["params"].clone());
        }
    }
    ok(
        &mut c,
        &mut events,
        "session.interrupt",
        json!({"session_id": id}),
    )
    .await;
    while !events
        .iter()
        .any(|e| e["turn_id"] == t && e["type"] == "message.complete")
    {
        let f = next(&mut c).await;
        if f["method"] == "event" {
            events.push(f["params"].clone());
        }
    }
    let done = events
        .iter()
        .find(|e| e["turn_id"] == t && e["type"] == "message.complete")
        .unwrap();
    assert_eq!(done["payload"]["status"], "interrupted", "{done}");
    assert!(done["payload"].get("failure_reason").is_none(), "{done}");
    let events = turn(&mut c, &id, "next").await;
    assert_eq!(complete(&events)["text"], "next");
    stored(&mut c, &id).await;
}

/// The gateway's text log, with `RUST_LOG=info`, of a gateway whose host
/// command is `host`; killed when dropped.
struct Logged {
    child: std::process::Child,
    addr: String,
    log: std::path::PathBuf,
}

impl Logged {
    fn start(dir: &Path, host: &str) -> Logged {
        let log = dir.join("gateway.log");
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_tether"))
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir.join("data"))
            .args(["--hosts", "1", "--host-command", host])
            .env("RUST_LOG", "info")
            .stdout(std::process::Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
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
        Logged { child, addr, log }
    }

    async fn client(&self) -> Client {
        Client::connect(&format!("ws://{}/ws", self.addr)).await
    }

    /// The log so far, checked: nothing a host or agent wrote starts a
    /// line of its own or carries a control byte into it.
    fn assert_unforged(&self, marker: &str) {
        let bytes = std::fs::read(&self.log).unwrap();
        let text = String::from_utf8_lossy(&bytes);
        assert!(
            text.contains(marker),
            "the host's text was never logged: {text}"
        );
        for line in text.lines() {
            assert!(
                !line.starts_with("2026-01-01T00:00:00"),
                "a forged log line: {line:?}"
            );
        }
        assert!(!bytes.contains(&0x1b), "a raw ESC in the log: {text:?}");
    }
}

impl Drop for Logged {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn a_hosts_turn_error_cannot_forge_gateway_log_lines() {
    let dir = tempdir();
    let gw = Logged::start(dir.path(), &format!("python3 {HOST}"));
    let mut c = gw.client().await;
    let id = session(&mut c).await;
    let events = turn(&mut c, &id, "/forge").await;
    let done = complete(&events);
    assert_eq!(done["status"], "error", "{done}");
    // The reason is passed through to clients as the host wrote it (JSON
    // escapes it); only the log must not take it as lines.
    assert!(done["failure_reason"].as_str().unwrap().contains("FORGED"));
    gw.assert_unforged("FORGED gateway line");
}

#[tokio::test]
async fn an_agents_stderr_cannot_forge_gateway_log_lines() {
    let dir = tempdir();
    let agent = dir.path().join("agent.py");
    std::fs::write(
        &agent,
        "import sys\n\
         sys.stderr.write('boom\\n2026-01-01T00:00:00.000000Z ERROR tether::serve: FORGED agent line \\x1b[31mred\\n')\n\
         sys.exit(3)\n",
    )
    .unwrap();
    let host = format!(
        "{} host --engine command --command \"python3 {}\"",
        env!("CARGO_BIN_EXE_tether"),
        agent.display()
    );
    let gw = Logged::start(dir.path(), &host);
    let mut c = gw.client().await;
    let id = session(&mut c).await;
    let events = turn(&mut c, &id, "hi").await;
    assert_eq!(complete(&events)["failure_reason"], "engine_error");
    // A failed compression logs the agent's stderr (in its error).
    let mut events = Vec::new();
    let r = call(
        &mut c,
        &mut events,
        "session.compress",
        json!({"session_id": id}),
    )
    .await;
    assert_eq!(r["error"]["code"], 5019, "{r}");
    gw.assert_unforged("FORGED agent line");
}
