//! `tether host --engine echo`: the compute-host side of PROTOCOL Part 2 and
//! the echo engine of Part 3, tested black-box through the real binary's
//! stdin/stdout.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tether_protocol::{parse_host_line, FromHost};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// How long a test waits for any one frame or for the process to exit.
const WAIT: Duration = Duration::from_secs(5);

/// A running `tether host` and a line-oriented client for it.
struct Host {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Lines<BufReader<ChildStdout>>,
    hello: Value,
}

impl Host {
    /// Starts `tether host --engine echo ARGS` with heartbeats out of the
    /// way (one an hour) and reads its `hello`.
    async fn start(args: &[&str]) -> Host {
        Host::start_env(args, &[("TETHER_HEARTBEAT_S", "3600")]).await
    }

    async fn start_env(args: &[&str], env: &[(&str, &str)]) -> Host {
        let mut all = vec!["--engine", "echo"];
        all.extend_from_slice(args);
        Host::spawn(&all, env).await
    }

    /// Starts `tether host ARGS`.
    async fn spawn(args: &[&str], env: &[(&str, &str)]) -> Host {
        let mut child = Command::new(env!("CARGO_BIN_EXE_tether"))
            .arg("host")
            .args(args)
            .envs(env.iter().copied())
            .env("RUST_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("start tether host");
        let stdin = child.stdin.take();
        let lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let mut host = Host {
            child,
            stdin,
            lines,
            hello: Value::Null,
        };
        host.hello = host.recv_raw().await;
        assert_eq!(host.hello["type"], "hello", "the first line is hello");
        host
    }

    async fn send(&mut self, frame: Value) {
        self.send_line(frame.to_string().as_bytes()).await;
    }

    async fn send_line(&mut self, line: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        stdin.write_all(line).await.expect("write");
        stdin.write_all(b"\n").await.expect("write");
        stdin.flush().await.expect("flush");
    }

    async fn turn(&mut self, turn_id: &str, prompt: &str) {
        self.send(json!({
            "type": "turn.start", "turn_id": turn_id, "session_id": format!("s_{turn_id}"),
            "trace_id": "0123456789ab", "history": [], "prompt": prompt, "config": {}
        }))
        .await;
    }

    /// The next line, which must be a valid host frame.
    async fn recv_raw(&mut self) -> Value {
        let line = tokio::time::timeout(WAIT, self.lines.next_line())
            .await
            .expect("timed out waiting for a frame")
            .expect("read stdout")
            .expect("stdout ended");
        if let Err(e) = parse_host_line::<FromHost>(&line) {
            panic!("not a host frame ({e}): {line}");
        }
        serde_json::from_str(&line).expect("JSON")
    }

    /// The next frame other than a heartbeat.
    async fn recv(&mut self) -> Value {
        loop {
            let frame = self.recv_raw().await;
            if frame["type"] != "hb" {
                return frame;
            }
        }
    }

    /// The next heartbeat, skipping anything else.
    async fn recv_hb(&mut self) -> Value {
        loop {
            let frame = self.recv_raw().await;
            if frame["type"] == "hb" {
                return frame;
            }
        }
    }

    /// Reads one turn to its end: its `event` payloads (with their types)
    /// and the `turn.end` / `turn.error` frame.
    async fn finish(&mut self, turn_id: &str) -> (Vec<Value>, Value) {
        let mut events = Vec::new();
        loop {
            let frame = self.recv().await;
            assert_eq!(frame["turn_id"], turn_id, "a frame of this turn: {frame}");
            match frame["type"].as_str() {
                Some("event") => events.push(frame["event"].clone()),
                Some("turn.end" | "turn.error") => return (events, frame),
                _ => panic!("unexpected frame {frame}"),
            }
        }
    }

    /// Runs a turn alone: its deltas and its end frame.
    async fn echo(&mut self, turn_id: &str, prompt: &str) -> (Vec<String>, Value) {
        self.turn(turn_id, prompt).await;
        let (events, end) = self.finish(turn_id).await;
        (deltas(&events), end)
    }

    async fn ping(&mut self, nonce: u64) {
        self.send(json!({"type": "ping", "nonce": nonce})).await;
        assert_eq!(self.recv().await, json!({"type": "pong", "nonce": nonce}));
    }

    fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Waits for the process to exit and checks that stdout is at its end.
    async fn exit(&mut self) -> ExitStatus {
        let status = tokio::time::timeout(WAIT, self.child.wait())
            .await
            .expect("the host did not exit")
            .expect("wait");
        loop {
            match self.lines.next_line().await.expect("read") {
                None => break,
                Some(line) if line.contains(r#""type":"hb""#) => {}
                Some(line) => panic!("a frame after the end: {line}"),
            }
        }
        status
    }
}

/// The texts of the `message.delta` events, checking their payload shape.
fn deltas(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .filter(|e| e["type"] == "message.delta")
        .map(|e| {
            e["payload"]["text"]
                .as_str()
                .unwrap_or_else(|| panic!("a delta has a text: {e}"))
                .to_owned()
        })
        .collect()
}

fn end(status: &str, turn_id: &str, text: &str) -> Value {
    json!({"type": "turn.end", "turn_id": turn_id, "status": status, "text": text})
}

fn history(n: u64) -> Value {
    (1..=n)
        .map(|seq| json!({"seq": seq, "role": "user", "text": format!("m{seq}"), "ts": "2025-01-01T00:00:00Z"}))
        .collect()
}

#[tokio::test]
async fn hello_comes_first_with_pid_engine_and_version() {
    let host = Host::start(&[]).await;
    let pid = host.child.id().expect("running");
    assert_eq!(
        host.hello,
        json!({"type": "hello", "protocol": 1, "pid": pid, "engine": "echo",
               "version": env!("CARGO_PKG_VERSION"), "history_cache_bytes": 64 << 20})
    );
    // A host told to keep none says nothing of it.
    let host = Host::start(&["--history-cache-kb", "0"]).await;
    assert_eq!(
        host.hello.get("history_cache_bytes"),
        None,
        "{}",
        host.hello
    );
}

/// A message of a history, `m{seq}`.
fn message(seq: u64) -> Value {
    json!({"seq": seq, "role": "user", "text": format!("m{seq}"), "ts": "2025-01-01T00:00:00Z"})
}

/// A host that keeps histories holds what each `turn.start` says: a base
/// extends what it holds, no base replaces it for that turn only, and
/// `history.drop` forgets it. A base it does not hold fails the turn with
/// `history_mismatch`. Its engine (an agent printing the texts of the
/// history it was handed) always sees the whole segment.
#[tokio::test]
async fn a_host_that_keeps_histories_hands_its_engine_the_whole_segment() {
    let agent = r#"python3 -c 'import json,sys; print(",".join(m["text"] for m in json.load(sys.stdin)["history"]))'"#;
    let mut host = Host::spawn(
        &[
            "--engine",
            "command",
            "--command",
            agent,
            "--history-cache-kb",
            "1",
        ],
        &[("TETHER_HEARTBEAT_S", "3600")],
    )
    .await;
    assert_eq!(host.hello["history_cache_bytes"], 1024);
    let turn = async |host: &mut Host, t: &str, s: &str, base: Option<u64>, history: Value| {
        let mut frame = json!({
            "type": "turn.start", "turn_id": t, "session_id": s, "trace_id": "0123456789ab",
            "history": history, "prompt": "p", "config": {}
        });
        if let Some(base) = base {
            frame["history_base"] = base.into();
        }
        host.send(frame).await;
        host.finish(t).await.1
    };
    let said = |end: &Value| end["text"].as_str().unwrap_or_default().trim().to_owned();

    let end = turn(
        &mut host,
        "t1",
        "s_a",
        Some(0),
        json!([message(1), message(2)]),
    )
    .await;
    assert_eq!(said(&end), "m1,m2", "{end}");
    let end = turn(&mut host, "t2", "s_a", Some(2), json!([message(3)])).await;
    assert_eq!(said(&end), "m1,m2,m3", "{end}");
    let end = turn(&mut host, "t3", "s_b", Some(0), json!([message(9)])).await;
    assert_eq!(said(&end), "m9", "{end}");
    let end = turn(&mut host, "t4", "s_a", Some(3), json!([])).await;
    assert_eq!(
        said(&end),
        "m1,m2,m3",
        "another session's turn left it alone: {end}"
    );

    // A whole history is used and not held.
    let end = turn(&mut host, "t5", "s_a", None, json!([message(1)])).await;
    assert_eq!(said(&end), "m1", "{end}");
    let end = turn(&mut host, "t6", "s_a", Some(1), json!([message(2)])).await;
    assert_eq!(end["type"], "turn.error", "{end}");
    assert_eq!(end["reason"], "history_mismatch", "{end}");

    // A mismatch forgets everything; base 0 starts again.
    let end = turn(&mut host, "t7", "s_b", Some(1), json!([])).await;
    assert_eq!(end["reason"], "history_mismatch", "s_b is gone too: {end}");
    let end = turn(&mut host, "t8", "s_b", Some(0), json!([message(5)])).await;
    assert_eq!(said(&end), "m5", "{end}");
    host.send(json!({"type": "history.drop", "session_id": "s_b"}))
        .await;
    let end = turn(&mut host, "t9", "s_b", Some(1), json!([message(6)])).await;
    assert_eq!(end["reason"], "history_mismatch", "dropped: {end}");
}

#[tokio::test]
async fn ping_is_answered_with_the_same_nonce() {
    let mut host = Host::start(&[]).await;
    host.ping(7).await;
    host.ping(u64::MAX).await;
}

#[tokio::test]
async fn echo_streams_one_delta_per_word_and_ends_with_the_whole_text() {
    let mut host = Host::start(&[]).await;
    let (d, end_frame) = host.echo("t_1", "hello brave new world").await;
    assert_eq!(d, ["hello ", "brave ", "new ", "world"]);
    assert_eq!(end_frame, end("complete", "t_1", "hello brave new world"));

    // Split after each space, spaces kept: double, leading and trailing
    // spaces each stay in a delta; a newline is not a split point.
    for (i, (prompt, want)) in [
        ("a  b ", vec!["a ", " ", "b "]),
        ("  lead", vec![" ", " ", "lead"]),
        ("one\ntwo three", vec!["one\ntwo ", "three"]),
        ("/usr/bin is a path", vec!["/usr/bin ", "is ", "a ", "path"]),
    ]
    .into_iter()
    .enumerate()
    {
        let turn_id = format!("t_split{i}");
        let (d, end_frame) = host.echo(&turn_id, prompt).await;
        assert_eq!(d, want, "{prompt:?}");
        assert_eq!(d.concat(), prompt);
        assert_eq!(end_frame, end("complete", &turn_id, prompt));
    }
}

#[tokio::test]
async fn an_empty_prompt_completes_with_no_delta() {
    let mut host = Host::start(&[]).await;
    let (d, end_frame) = host.echo("t_1", "").await;
    assert!(d.is_empty(), "{d:?}");
    assert_eq!(end_frame, end("complete", "t_1", ""));
}

#[tokio::test]
async fn delay_ms_spaces_the_deltas() {
    let mut host = Host::start(&["--delay-ms", "100"]).await;
    let started = Instant::now();
    let (d, _) = host.echo("t_1", "a b c").await;
    assert_eq!(d, ["a ", "b ", "c"]);
    assert!(
        started.elapsed() >= Duration::from_millis(200),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn sleep_waits_before_the_first_delta_then_replies_with_the_rest() {
    let mut host = Host::start(&[]).await;
    let started = Instant::now();
    host.turn("t_1", "/sleep 300\nwoke up").await;
    let first = host.recv().await;
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        first["event"],
        json!({"type": "message.delta", "payload": {"text": "woke "}})
    );
    let (events, end_frame) = host.finish("t_1").await;
    assert_eq!(deltas(&events), ["up"]);
    assert_eq!(end_frame, end("complete", "t_1", "woke up"));
}

#[tokio::test]
async fn bad_directive_args_fail_the_turn_with_engine_error() {
    let mut host = Host::start(&[]).await;
    for (i, prompt) in [
        "/sleep x\nhi",
        "/hang now",
        "/tool",
        "/tool t {bad",
        "/big -1",
    ]
    .into_iter()
    .enumerate()
    {
        let turn_id = format!("t_{i}");
        let (d, end_frame) = host.echo(&turn_id, prompt).await;
        assert!(d.is_empty(), "{prompt:?}: {d:?}");
        assert_eq!(end_frame["type"], "turn.error", "{prompt:?}");
        assert_eq!(end_frame["reason"], "engine_error");
        let word = prompt.split_whitespace().next().unwrap_or_default();
        let message = end_frame["message"].as_str().unwrap_or_default();
        assert!(message.contains(word), "{prompt:?}: {message}");
    }
}

#[tokio::test]
async fn hang_streams_an_ellipsis_until_interrupted() {
    let mut host = Host::start(&[]).await;
    host.turn("t_1", "/hang\nnever said").await;
    let first = host.recv().await;
    assert_eq!(first["event"]["payload"]["text"], "…");
    // Still running: the next frame is the pong, not an end.
    tokio::time::sleep(Duration::from_millis(200)).await;
    host.ping(1).await;

    host.send(json!({"type": "interrupt", "turn_id": "t_1"}))
        .await;
    assert_eq!(host.recv().await, end("interrupted", "t_1", "…"));

    // Interrupting an ended or unknown turn is ignored.
    host.send(json!({"type": "interrupt", "turn_id": "t_1"}))
        .await;
    host.send(json!({"type": "interrupt", "turn_id": "t_nope"}))
        .await;
    host.ping(2).await;
}

#[tokio::test]
async fn an_interrupt_mid_stream_ends_with_the_text_so_far() {
    let mut host = Host::start(&["--delay-ms", "100"]).await;
    host.turn("t_1", "a b c d e f g h i j").await;
    let mut sent = String::new();
    for _ in 0..2 {
        let frame = host.recv().await;
        sent.push_str(frame["event"]["payload"]["text"].as_str().expect("delta"));
    }
    host.send(json!({"type": "interrupt", "turn_id": "t_1"}))
        .await;
    let (events, end_frame) = host.finish("t_1").await;
    sent.push_str(&deltas(&events).concat());
    assert_eq!(end_frame, end("interrupted", "t_1", &sent));
    assert!(sent.len() < "a b c d e f g h i j".len(), "{sent:?}");
}

#[tokio::test]
async fn crash_sends_one_delta_then_exits_101() {
    let mut host = Host::start(&[]).await;
    host.turn("t_1", "/crash\nboom goes the host").await;
    let first = host.recv().await;
    assert_eq!(
        first,
        json!({"type": "event", "turn_id": "t_1",
               "event": {"type": "message.delta", "payload": {"text": "boom "}}})
    );
    assert_eq!(host.exit().await.code(), Some(101));
}

#[tokio::test]
async fn error_directive_is_a_turn_error() {
    let mut host = Host::start(&[]).await;
    let (d, end_frame) = host.echo("t_1", "/error the model is down\nignored").await;
    assert!(d.is_empty());
    assert_eq!(
        end_frame,
        json!({"type": "turn.error", "turn_id": "t_1", "reason": "engine_error",
               "message": "the model is down"})
    );
}

#[tokio::test]
async fn tool_directive_reports_a_tool_call_before_the_reply() {
    let mut host = Host::start(&[]).await;
    host.turn("t_1", "/tool search {\"q\": \"rust\", \"n\": 2}\nfound it")
        .await;
    let (events, end_frame) = host.finish("t_1").await;
    let args = json!({"q": "rust", "n": 2});
    assert_eq!(events.len(), 4, "{events:?}");
    assert_eq!(events[0]["type"], "tool.start");
    let tool_id = events[0]["payload"]["tool_id"].clone();
    assert!(tool_id.is_string());
    assert_eq!(
        events[0]["payload"],
        json!({"tool_id": tool_id, "name": "search", "args": args})
    );
    assert_eq!(events[1]["type"], "tool.complete");
    assert_eq!(
        events[1]["payload"],
        json!({"tool_id": tool_id, "name": "search", "result": args, "is_error": false})
    );
    assert_eq!(deltas(&events[2..]), ["found ", "it"]);
    assert_eq!(end_frame, end("complete", "t_1", "found it"));
}

#[tokio::test]
async fn todo_directive_sends_the_list_before_the_reply() {
    let mut host = Host::start(&[]).await;
    host.turn("t_1", "/todo write code; test it ;; ship\non it")
        .await;
    let (events, end_frame) = host.finish("t_1").await;
    assert_eq!(events[0]["type"], "todo.updated");
    let payload = &events[0]["payload"];
    assert_eq!(payload["revision"], 1);
    let items = payload["items"].as_array().expect("items");
    let texts: Vec<&str> = items.iter().filter_map(|i| i["text"].as_str()).collect();
    assert_eq!(texts, ["write code", "test it", "ship"]);
    assert!(items.iter().all(|i| i["status"] == "pending"), "{items:?}");
    let mut ids: Vec<&str> = items.iter().filter_map(|i| i["id"].as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 3, "distinct string ids: {items:?}");
    assert_eq!(deltas(&events[1..]), ["on ", "it"]);
    assert_eq!(end_frame, end("complete", "t_1", "on it"));
}

#[tokio::test]
async fn big_replies_in_deltas_of_at_most_1024_bytes() {
    let mut host = Host::start(&[]).await;
    let (d, end_frame) = host.echo("t_1", "/big 3000").await;
    assert!(d.len() >= 3, "{}", d.len());
    assert!(d
        .iter()
        .all(|t| t.len() <= 1024 && t.bytes().all(|b| b == b'x')));
    assert_eq!(d.iter().map(String::len).sum::<usize>(), 3000);
    assert_eq!(end_frame, end("complete", "t_1", &"x".repeat(3000)));
}

#[tokio::test]
async fn concurrent_turns_interleave_and_both_finish() {
    let mut host = Host::start(&["--delay-ms", "40"]).await;
    host.turn("t_a", "a1 a2 a3 a4 a5 a6").await;
    host.turn("t_b", "b1 b2 b3 b4 b5 b6").await;
    let mut order = Vec::new();
    let mut text = [String::new(), String::new()];
    let mut ends = Vec::new();
    while ends.len() < 2 {
        let frame = host.recv().await;
        let slot = match frame["turn_id"].as_str() {
            Some("t_a") => 0,
            Some("t_b") => 1,
            _ => panic!("unexpected frame {frame}"),
        };
        match frame["type"].as_str() {
            Some("event") => {
                order.push(slot);
                text[slot].push_str(frame["event"]["payload"]["text"].as_str().expect("delta"));
            }
            Some("turn.end") => ends.push(frame),
            _ => panic!("unexpected frame {frame}"),
        }
    }
    assert_eq!(text, ["a1 a2 a3 a4 a5 a6", "b1 b2 b3 b4 b5 b6"]);
    assert!(ends.contains(&end("complete", "t_a", "a1 a2 a3 a4 a5 a6")));
    assert!(ends.contains(&end("complete", "t_b", "b1 b2 b3 b4 b5 b6")));
    // Interleaved: each turn streams before the other has finished.
    let last = |slot| order.iter().rposition(|s| *s == slot).expect("deltas");
    let first = |slot| order.iter().position(|s| *s == slot).expect("deltas");
    assert!(first(1) < last(0) && first(0) < last(1), "{order:?}");
}

#[tokio::test]
async fn a_second_start_of_a_running_turn_is_rejected_and_the_turn_goes_on() {
    let mut host = Host::start(&[]).await;
    host.turn("t_1", "/hang").await;
    assert_eq!(host.recv().await["event"]["payload"]["text"], "…");
    host.turn("t_1", "again").await;
    let frame = host.recv().await;
    assert_eq!(frame["type"], "error", "{frame}");
    host.send(json!({"type": "interrupt", "turn_id": "t_1"}))
        .await;
    assert_eq!(host.recv().await, end("interrupted", "t_1", "…"));
}

#[tokio::test]
async fn bad_lines_get_an_error_frame_and_the_host_keeps_working() {
    let mut host = Host::start(&[]).await;
    let bad: [&[u8]; 5] = [
        b"this is not json",
        br#"{"type":"bogus"}"#,
        br#"{"type":"ping"}"#,
        br#"["ping"]"#,
        b"\xff\xfe not utf-8",
    ];
    for line in bad {
        host.send_line(line).await;
        let frame = host.recv().await;
        assert_eq!(frame["type"], "error", "{}", String::from_utf8_lossy(line));
        assert!(frame["message"].as_str().is_some_and(|m| !m.is_empty()));
    }
    // Blank lines are skipped silently.
    host.send_line(b"").await;
    host.ping(3).await;
    let (d, end_frame) = host.echo("t_1", "still here").await;
    assert_eq!(d, ["still ", "here"]);
    assert_eq!(end_frame, end("complete", "t_1", "still here"));
}

#[tokio::test]
async fn compress_summarizes_the_history_and_unknown_ops_fail() {
    let mut host = Host::start(&[]).await;
    host.send(
        json!({"type": "control", "request_id": "r1", "op": "compress",
                     "session_id": "s_1", "history": history(3), "args": {"focus": null}}),
    )
    .await;
    assert_eq!(
        host.recv().await,
        json!({"type": "control.ack", "request_id": "r1",
               "result": {"summary": "Summary of 3 messages.", "removed": 3}})
    );
    host.send(
        json!({"type": "control", "request_id": "r2", "op": "compress",
                     "session_id": "s_1", "history": [], "args": {}}),
    )
    .await;
    assert_eq!(
        host.recv().await["result"],
        json!({"summary": "Summary of 0 messages.", "removed": 0})
    );
    host.send(
        json!({"type": "control", "request_id": "r3", "op": "defragment",
                     "session_id": "s_1", "history": [], "args": {}}),
    )
    .await;
    let frame = host.recv().await;
    assert_eq!(frame["type"], "control.error");
    assert_eq!(frame["request_id"], "r3");
    assert!(frame["message"]
        .as_str()
        .is_some_and(|m| m.contains("defragment")));
}

#[tokio::test]
async fn compress_delay_holds_the_ack_but_not_the_host() {
    let mut host = Host::start(&["--compress-delay-ms", "400"]).await;
    let started = Instant::now();
    host.send(
        json!({"type": "control", "request_id": "r1", "op": "compress",
                     "session_id": "s_1", "history": history(2), "args": {}}),
    )
    .await;
    // The host answers other frames and runs turns while it compresses.
    host.ping(1).await;
    let (d, _) = host.echo("t_1", "meanwhile").await;
    assert_eq!(d, ["meanwhile"]);
    let ack = host.recv().await;
    assert!(
        started.elapsed() >= Duration::from_millis(400),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        ack,
        json!({"type": "control.ack", "request_id": "r1",
               "result": {"summary": "Summary of 2 messages.", "removed": 2}})
    );
}

#[tokio::test]
async fn heartbeats_report_active_turns_and_rss() {
    let mut host = Host::start_env(&[], &[("TETHER_HEARTBEAT_S", "1")]).await;
    host.turn("t_1", "/hang").await;
    let hb = host.recv_hb().await;
    assert_eq!(hb["active_turns"], 1, "{hb}");
    assert!(hb["rss_kb"].as_u64().is_some_and(|kb| kb > 0), "{hb}");
    host.send(json!({"type": "interrupt", "turn_id": "t_1"}))
        .await;
    let hb = loop {
        let hb = host.recv_hb().await;
        if hb["active_turns"] == 0 {
            break hb;
        }
    };
    assert_eq!(hb["type"], "hb");
}

#[tokio::test]
async fn shutdown_interrupts_what_runs_acks_and_exits_0() {
    let mut host = Host::start(&["--compress-delay-ms", "60000"]).await;
    host.turn("t_1", "/hang").await;
    assert_eq!(host.recv().await["event"]["payload"]["text"], "…");
    host.send(
        json!({"type": "control", "request_id": "r1", "op": "compress",
                     "session_id": "s_1", "history": [], "args": {}}),
    )
    .await;
    host.send(json!({"type": "shutdown"})).await;
    let mut before_ack = Vec::new();
    loop {
        let frame = host.recv().await;
        if frame["type"] == "shutdown.ack" {
            break;
        }
        before_ack.push(frame);
    }
    assert!(
        before_ack.contains(&end("interrupted", "t_1", "…")),
        "{before_ack:?}"
    );
    assert!(
        before_ack
            .iter()
            .any(|f| f["type"] == "control.error" && f["request_id"] == "r1"),
        "{before_ack:?}"
    );
    assert_eq!(before_ack.len(), 2, "{before_ack:?}");
    // Exits by itself although its stdin is still open.
    assert_eq!(host.exit().await.code(), Some(0));
}

#[tokio::test]
async fn the_end_of_stdin_makes_the_host_exit_even_mid_turn() {
    let mut host = Host::start(&[]).await;
    host.turn("t_1", "/hang").await;
    assert_eq!(host.recv().await["event"]["payload"]["text"], "…");
    let started = Instant::now();
    host.close_stdin();
    let status = host.exit().await;
    assert!(status.success(), "{status:?}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
}
