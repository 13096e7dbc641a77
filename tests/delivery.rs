//! The delivery budget (PROTOCOL Part 4, "Delivery budget"): deltas merged
//! into fewer frames, under a latency budget a peer asks for per session,
//! without ever delaying, merging or reordering anything else.
//!
//! No assertion here is about time: a budget is checked by what arrives
//! and in which order. The budgets used are the largest allowed (1000 ms),
//! so a held delta can only come out early because something was queued
//! behind it, which is the rule under test.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

use common::{submit, tempdir, turn_events, Client, Gateway, FRAME_WAIT};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

fn budget(ms: u64) -> Value {
    json!({ "max_delay_ms": ms })
}

/// The text the deltas of `events` carry once each is placed at its
/// offset, checking that every offset continues the text before it.
fn reassembled(events: &[Value]) -> (String, usize) {
    let mut text = String::new();
    let mut frames = 0;
    for e in events.iter().filter(|e| e["type"] == "message.delta") {
        let offset = e["payload"]["offset"].as_u64().expect("offset") as usize;
        assert_eq!(offset, text.len(), "a delta starts where the text ends");
        text.push_str(e["payload"]["text"].as_str().expect("text"));
        frames += 1;
    }
    (text, frames)
}

/// A session created by `c`, which stays attached to nothing.
async fn session(c: &mut Client) -> String {
    let r = c.ok("session.create", json!({"attach": false})).await;
    r["session"]["session_id"]
        .as_str()
        .expect("session_id")
        .to_string()
}

#[tokio::test]
async fn a_budget_over_1000_ms_or_not_an_integer_is_refused_with_its_field() {
    let dir = tempdir();
    let gw = Gateway::start(dir.path(), &[]);
    let mut c = gw.client().await;
    let id = session(&mut c).await;
    for bad in [
        json!({"max_delay_ms": 1001}),
        json!({"max_delay_ms": -1}),
        json!({"max_delay_ms": "50"}),
    ] {
        let e = c
            .err("session.resume", json!({"session_id": id, "delivery": bad}))
            .await;
        assert_eq!(e["code"], -32602, "{e}");
        assert_eq!(e["data"]["field"], "delivery.max_delay_ms", "{e}");
        let e = c.err("session.create", json!({"delivery": bad})).await;
        assert_eq!(e["data"]["field"], "delivery.max_delay_ms", "{e}");
    }
    // Nothing was attached by the refused resumes.
    let info = c
        .ok(
            "session.resume",
            json!({"session_id": id, "attach": false, "omit_messages": true}),
        )
        .await;
    assert_eq!(info["session"]["peers"], 0);
    for ok in [
        json!({"max_delay_ms": 1000}),
        json!({"max_delay_ms": 0}),
        json!({}),
        Value::Null,
    ] {
        c.ok(
            "session.resume",
            json!({"session_id": id, "delivery": ok, "attach": false}),
        )
        .await;
    }
    // SSE: the same bound, as a 400.
    for q in ["1001", "x", "-1"] {
        let (status, _) = sse_open(
            &gw.addr,
            &format!("/v1/sessions/{id}/events?max_delay_ms={q}"),
        )
        .await;
        assert_eq!(status, 400, "max_delay_ms={q}");
    }
}

#[tokio::test]
async fn merged_deltas_reassemble_exactly_and_arrive_before_the_durable_event_behind_them() {
    let dir = tempdir();
    let gw = Gateway::start(dir.path(), &[]);
    let mut ctl = gw.client().await;
    let id = session(&mut ctl).await;
    // Three peers of one session, each with its own budget.
    let mut peers = Vec::new();
    for ms in [1000, 0, 50] {
        let mut p = gw.client().await;
        p.ok(
            "session.resume",
            json!({"session_id": id, "omit_messages": true, "delivery": budget(ms)}),
        )
        .await;
        peers.push((ms, p));
    }
    let words: Vec<String> = (0..40).map(|i| format!("w{i} \"é\"\n ")).collect();
    let prompt = words.concat();
    let turn = submit(&mut ctl, &id, &format!("/tool t {{\"k\":1}}\n{prompt}")).await;
    for (ms, p) in &mut peers {
        let events = turn_events(p, &turn).await;
        let kinds: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
        // Durable events keep their order and none is merged or lost.
        let durable: Vec<&str> = kinds
            .iter()
            .copied()
            .filter(|k| *k != "message.delta")
            .collect();
        assert_eq!(
            durable,
            [
                "message.user",
                "message.start",
                "tool.start",
                "tool.complete",
                "message.complete"
            ],
            "budget {ms}"
        );
        // Every delta came before the `message.complete` behind it.
        let (text, frames) = reassembled(&events);
        assert_eq!(text, prompt, "budget {ms}: text by offset");
        assert_eq!(common::complete(&events)["text"], prompt.as_str());
        assert!(
            frames >= 1 && frames <= words.len(),
            "budget {ms}: {frames} frames"
        );
        if *ms == 1000 {
            // A second of budget: every delta of this burst joined the held
            // one until the `message.complete` queued behind it.
            assert!(
                frames < words.len(),
                "budget {ms}: {frames} frames, nothing merged"
            );
        }
    }
}

#[tokio::test]
async fn a_reply_behind_a_held_delta_releases_it_first() {
    let dir = tempdir();
    let gw = Gateway::start(dir.path(), &[]);
    let mut ctl = gw.client().await;
    let id = session(&mut ctl).await;
    let mut p = gw.client().await;
    p.ok(
        "session.resume",
        json!({"session_id": id, "omit_messages": true, "delivery": budget(1000)}),
    )
    .await;
    // A peer without a budget sees the delta as soon as the session pushed
    // it to every peer: from then on it waits in `p`'s outbox.
    let mut observer = gw.client().await;
    observer
        .ok(
            "session.resume",
            json!({"session_id": id, "omit_messages": true}),
        )
        .await;
    // `/hang` streams one delta and then nothing: under a 1 s budget it
    // is held, alone in the outbox.
    let turn = submit(&mut ctl, &id, "/hang").await;
    loop {
        if observer.next_event().await["type"] == "message.delta" {
            break;
        }
    }
    loop {
        let e = p.next_event().await;
        if e["type"] == "message.start" {
            break;
        }
    }
    // A reply queued behind it: the delta goes out first, then the reply.
    p.send_text(r#"{"jsonrpc":"2.0","id":"ping","method":"gateway.ping"}"#)
        .await;
    let delta = p.next_frame().await;
    assert_eq!(delta["params"]["type"], "message.delta", "{delta}");
    assert_eq!(
        delta["params"]["payload"],
        json!({"text": "…", "offset": 0})
    );
    let pong = p.next_frame().await;
    assert_eq!(pong["id"], "ping", "{pong}");
    ctl.ok("session.interrupt", json!({"session_id": id})).await;
    let events = turn_events(&mut p, &turn).await;
    assert_eq!(common::complete(&events)["status"], "interrupted");
}

#[tokio::test]
async fn an_sse_stream_that_joins_mid_turn_gets_the_text_so_far_at_offset_0() {
    let dir = tempdir();
    let gw = Gateway::start(dir.path(), &[]);
    let mut ctl = gw.client().await;
    let id = session(&mut ctl).await;
    let mut watcher = gw.client().await;
    watcher
        .ok(
            "session.resume",
            json!({"session_id": id, "omit_messages": true}),
        )
        .await;
    let turn = submit(&mut ctl, &id, "/hang").await;
    loop {
        if watcher.next_event().await["type"] == "message.delta" {
            break;
        }
    }
    let path = format!("/v1/sessions/{id}/events?last_seen=0&max_delay_ms=20");
    let (status, s) = sse_open(&gw.addr, &path).await;
    assert_eq!(status, 200);
    let mut s = s.expect("a stream");
    // The replay, in order, then the text so far.
    let mut replayed = Vec::new();
    let delta = loop {
        let (kind, data) = s.event().await;
        if kind == "message.delta" {
            break data;
        }
        replayed.push(kind);
    };
    assert_eq!(
        replayed,
        ["session.created", "message.user", "message.start"]
    );
    assert_eq!(delta["turn_id"], turn.as_str());
    assert_eq!(delta["payload"], json!({"text": "…", "offset": 0}));
    assert!(delta.get("seq").is_none());
    // Live from there on.
    ctl.ok("session.interrupt", json!({"session_id": id})).await;
    loop {
        let (kind, data) = s.event().await;
        if kind == "message.complete" {
            assert_eq!(data["payload"]["text"], "…");
            break;
        }
    }
}

/// An SSE stream on a plain socket: status, and the stream when it is 200.
async fn sse_open(addr: &str, path: &str) -> (u16, Option<Sse>) {
    let mut tcp = TcpStream::connect(addr).await.expect("connect");
    let head = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    tcp.write_all(head.as_bytes()).await.expect("write");
    let mut r = BufReader::new(tcp);
    let mut line = String::new();
    tokio::time::timeout(FRAME_WAIT, r.read_line(&mut line))
        .await
        .expect("status line in time")
        .expect("status line");
    let status = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status");
    let mut chunked = false;
    loop {
        line.clear();
        r.read_line(&mut line).await.expect("header");
        if line.trim().is_empty() {
            break;
        }
        let l = line.to_ascii_lowercase();
        chunked |= l.starts_with("transfer-encoding") && l.contains("chunked");
    }
    let s = (status == 200).then(|| Sse {
        r,
        chunked,
        buf: String::new(),
    });
    (status, s)
}

struct Sse {
    r: BufReader<TcpStream>,
    chunked: bool,
    buf: String,
}

impl Sse {
    /// The next event's type and params (comments skipped).
    async fn event(&mut self) -> (String, Value) {
        let fut = async {
            let (mut kind, mut data) = (None, None);
            loop {
                let line = self.line().await;
                if line.is_empty() {
                    if let (Some(k), Some(d)) = (kind.take(), data.take()) {
                        return (k, d);
                    }
                } else if let Some(k) = line.strip_prefix("event: ") {
                    kind = Some(k.to_string());
                } else if let Some(d) = line.strip_prefix("data: ") {
                    data = Some(serde_json::from_str(d).expect("data is JSON"));
                }
            }
        };
        tokio::time::timeout(FRAME_WAIT, fut)
            .await
            .expect("an SSE event in time")
    }

    async fn line(&mut self) -> String {
        loop {
            if let Some(pos) = self.buf.find('\n') {
                let line: String = self.buf.drain(..=pos).collect();
                return line.trim_end_matches(['\n', '\r']).to_string();
            }
            let more = if self.chunked {
                let mut size = String::new();
                self.r.read_line(&mut size).await.expect("chunk size");
                let n = usize::from_str_radix(size.trim(), 16).expect("hex size");
                assert!(n > 0, "the stream ended");
                let mut b = vec![0; n + 2];
                self.r.read_exact(&mut b).await.expect("chunk");
                b.truncate(n);
                b
            } else {
                let mut b = vec![0; 4096];
                let n = self.r.read(&mut b).await.expect("read");
                assert!(n > 0, "the stream ended");
                b.truncate(n);
                b
            };
            self.buf
                .push_str(std::str::from_utf8(&more).expect("UTF-8"));
        }
    }
}
