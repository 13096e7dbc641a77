//! A peer that stops reading (PROTOCOL 1.8): it is closed with 1013 "slow
//! consumer" while the other peer of the session gets everything, and it
//! resumes from its watermark with nothing lost or doubled.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

use common::Backend;

use std::collections::HashMap;
use std::net::SocketAddr;

use common::{tempdir, Client, Gateway, FRAME_WAIT};
use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::net::{TcpSocket, TcpStream};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

/// Bytes of text per turn: many deltas (at most 1024 bytes each) and a
/// `message.complete` that carries all of it, so a stalled socket fills up
/// in a bounded number of turns.
const TURN_BYTES: usize = 64 * 1024;
/// Turns to try before giving up on the stalled peer ever being closed; far
/// more than the kernel's socket buffers can absorb.
const MAX_TURNS: usize = 400;

/// A raw WebSocket client with a small receive buffer, so that once it
/// stops reading, the gateway's writes back up into the peer's outbox after
/// a few kilobytes instead of the megabytes an autotuned socket takes.
struct Stalled {
    ws: WebSocketStream<TcpStream>,
}

impl Stalled {
    async fn connect(addr: &str) -> Stalled {
        Stalled::connect_with(addr, Some(4096)).await
    }

    /// With the kernel's receive buffer (`None`) or one of `rcvbuf` bytes.
    async fn connect_with(addr: &str, rcvbuf: Option<u32>) -> Stalled {
        let addr: SocketAddr = addr.parse().expect("gateway address");
        let socket = TcpSocket::new_v4().expect("socket");
        if let Some(size) = rcvbuf {
            socket.set_recv_buffer_size(size).expect("SO_RCVBUF");
        }
        let stream = socket.connect(addr).await.expect("tcp connect");
        let (ws, _) = tokio_tungstenite::client_async(format!("ws://{addr}/ws"), stream)
            .await
            .expect("websocket handshake");
        let mut c = Stalled { ws };
        let ready = c.next().await.expect("gateway.ready");
        assert_eq!(ready["params"]["type"], "gateway.ready");
        c
    }

    async fn send(&mut self, frame: Value) {
        self.ws
            .send(Message::Text(frame.to_string().into()))
            .await
            .expect("send");
    }

    /// The next text frame, or `Err(code)` once the gateway closed.
    async fn next(&mut self) -> Result<Value, u16> {
        loop {
            let msg = tokio::time::timeout(FRAME_WAIT, self.ws.next())
                .await
                .expect("timed out waiting for a frame");
            match msg {
                Some(Ok(Message::Text(t))) => {
                    return Ok(serde_json::from_str(&t).expect("frame is JSON"))
                }
                Some(Ok(Message::Close(Some(f)))) => return Err(f.code.into()),
                Some(Ok(Message::Close(None))) | None | Some(Err(_)) => return Err(1005),
                Some(Ok(_)) => continue,
            }
        }
    }
}

/// Durable seqs in the order they were seen.
fn durable_seqs(events: &[Value]) -> Vec<u64> {
    events.iter().filter_map(|e| e["seq"].as_u64()).collect()
}

/// Applies every delta by its offset, per turn; panics on a gap or overlap.
fn texts_from_deltas(events: &[Value]) -> HashMap<String, String> {
    let mut texts: HashMap<String, String> = HashMap::new();
    for e in events.iter().filter(|e| e["type"] == "message.delta") {
        let turn = e["turn_id"].as_str().expect("turn_id").to_string();
        let text = texts.entry(turn).or_default();
        let offset = e["payload"]["offset"].as_u64().expect("offset") as usize;
        assert_eq!(offset, text.len(), "delta not contiguous: {e}");
        text.push_str(e["payload"]["text"].as_str().expect("text"));
    }
    texts
}

/// Events of one turn as the reading peer sees them, through its
/// `message.complete`; every event seen meanwhile is kept in `all`.
async fn read_turn(c: &mut Client, turn_id: &str, all: &mut Vec<Value>) {
    loop {
        let e = c.next_event().await;
        let done = e["type"] == "message.complete" && e["turn_id"] == turn_id;
        all.push(e);
        if done {
            return;
        }
    }
}

async fn a_stalled_peer_is_closed_and_resumes_without_loss_while_the_other_gets_everything(
    b: Backend,
) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &["--outbox-frames", "64"]);

    // B creates the session and reads everything.
    let mut b = gw.client().await;
    let r = b.ok("session.create", json!({"title": "slow"})).await;
    let sid = r["session"]["session_id"].as_str().unwrap().to_string();
    let mut b_events = vec![b.next_event().await];
    assert_eq!(b_events[0]["type"], "session.created");

    // A attaches, reads its resume reply, and then stops reading.
    let mut a = Stalled::connect(&gw.addr).await;
    a.send(json!({"jsonrpc":"2.0","id":1,"method":"session.resume",
        "params":{"session_id": sid, "last_seen": 0, "omit_messages": true}}))
        .await;
    let f = a.next().await.expect("A is open");
    assert_eq!(f["id"], 1, "a live frame before the resume reply: {f}");
    let mut a_events: Vec<Value> = f["result"]["events"].as_array().expect("events").clone();

    // Turns until the gateway gives up on A.
    let mut stats = Value::Null;
    for _ in 0..MAX_TURNS {
        let r = b
            .ok(
                "prompt.submit",
                json!({"session_id": sid, "text": format!("/big {TURN_BYTES}")}),
            )
            .await;
        let turn_id = r["turn_id"].as_str().expect("turn_id").to_string();
        read_turn(&mut b, &turn_id, &mut b_events).await;
        stats = b.ok("session.events.stats", json!({})).await;
        if stats["outbox"]["slow_consumer_closes"].as_u64() >= Some(1) {
            break;
        }
    }
    assert!(
        stats["outbox"]["slow_consumer_closes"].as_u64() >= Some(1),
        "A was never closed: {stats}"
    );
    // Deltas were merged on the way to the 1013.
    assert!(stats["outbox"]["coalesced"].as_u64() >= Some(1), "{stats}");

    // B: every durable seq in order, and every turn's whole text.
    let latest = *durable_seqs(&b_events).last().expect("seqs");
    assert_eq!(durable_seqs(&b_events), (1..=latest).collect::<Vec<_>>());
    let texts = texts_from_deltas(&b_events);
    let completes: Vec<&Value> = b_events
        .iter()
        .filter(|e| e["type"] == "message.complete")
        .collect();
    assert!(!completes.is_empty());
    for c in completes {
        let text = c["payload"]["text"].as_str().expect("text");
        assert_eq!(text.len(), TURN_BYTES);
        let turn = c["turn_id"].as_str().expect("turn_id");
        assert_eq!(
            texts.get(turn).map(String::as_str),
            Some(text),
            "turn {turn}"
        );
    }

    // A reads again: what was queued before the close, then the close.
    let code = loop {
        match a.next().await {
            Ok(f) => {
                assert_eq!(f["method"], "event", "{f}");
                a_events.push(f["params"].clone());
            }
            Err(code) => break code,
        }
    };
    assert_eq!(code, 1013);
    let seen = durable_seqs(&a_events);
    let watermark = seen.last().copied().unwrap_or(0);
    assert_eq!(seen, (1..=watermark).collect::<Vec<_>>(), "A's seqs");
    assert!(watermark < latest, "A was closed before it fell behind");

    // A reconnects and resumes from its watermark.
    let mut a2 = gw.client().await;
    let r = a2
        .ok(
            "session.resume",
            json!({"session_id": sid, "last_seen": watermark, "omit_messages": true}),
        )
        .await;
    assert_eq!(r["resync"], false, "{}", r["resync"]);
    assert_eq!(r["latest_seq"], latest);
    let replayed = r["events"].as_array().expect("events");
    let mut held = seen;
    held.extend(durable_seqs(replayed));
    assert_eq!(held, (1..=latest).collect::<Vec<_>>());
}

// ---------------------------------------------------------------------------
// One large frame never makes a peer slow (PROTOCOL 1.8): the outbox bound
// (4 MiB by default) is on what waits behind the frame being written.

/// The events of the next turn as one peer sees them, through its
/// `message.complete`; panics if the peer is closed.
async fn next_turn(mut c: Client) -> (Client, Vec<Value>) {
    let mut events = Vec::new();
    loop {
        let e = c.next_event().await;
        let done = e["type"] == "message.complete";
        events.push(e);
        if done {
            return (c, events);
        }
    }
}

/// Three peers on a new session, each read on its own task while one of
/// them submits `prompt`: every peer's events of that turn.
async fn three_fast_peers(gw: &Gateway, prompt: &str) -> Vec<Vec<Value>> {
    let mut a = gw.client().await;
    let r = a.ok("session.create", json!({"title": "big"})).await;
    let sid = r["session"]["session_id"].as_str().unwrap().to_string();
    assert_eq!(a.next_event().await["type"], "session.created");
    let mut readers = Vec::new();
    for _ in 0..2 {
        let mut c = gw.client().await;
        c.ok(
            "session.resume",
            json!({"session_id": sid, "last_seen": 1, "omit_messages": true}),
        )
        .await;
        readers.push(tokio::spawn(next_turn(c)));
    }
    let turn_id = common::submit(&mut a, &sid, prompt).await;
    readers.push(tokio::spawn(next_turn(a)));
    let mut all = Vec::new();
    for r in readers {
        let (mut c, events) = r.await.expect("a peer was closed or timed out");
        assert!(events.iter().all(|e| e["turn_id"] == turn_id));
        // Still open and served.
        c.ok("gateway.ping", json!({})).await;
        all.push(events);
    }
    all
}

/// The durable events of a turn, by type, in order.
fn durable_types(events: &[Value]) -> Vec<&str> {
    events
        .iter()
        .filter(|e| e["seq"].is_u64())
        .map(|e| e["type"].as_str().expect("type"))
        .collect()
}

async fn a_reply_larger_than_the_outbox_reaches_every_fast_peer_live(b: Backend) {
    const BIG: usize = 4_300_000;
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &[]);
    for events in three_fast_peers(&gw, &format!("/big {BIG}")).await {
        let seqs = durable_seqs(&events);
        assert_eq!(
            seqs,
            (seqs[0]..seqs[0] + seqs.len() as u64).collect::<Vec<_>>()
        );
        let done = events.last().expect("events");
        assert_eq!(
            done["payload"]["status"], "complete",
            "{}",
            done["payload"]["status"]
        );
        assert_eq!(done["payload"]["text"].as_str().map(str::len), Some(BIG));
    }
    let mut c = gw.client().await;
    let stats = c.ok("session.events.stats", json!({})).await;
    assert_eq!(stats["outbox"]["slow_consumer_closes"], 0, "{stats}");
}

async fn tool_events_of_10_mb_reach_every_fast_peer_live(b: Backend) {
    // The prompt itself is 10 MB: raise the client frame limit for it.
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &["--max-frame-bytes", "16000000"]);
    let blob = "y".repeat(10_000_000);
    let prompt = format!("/tool upload {}\ndone", json!({ "blob": blob }));
    for events in three_fast_peers(&gw, &prompt).await {
        assert_eq!(
            durable_types(&events),
            [
                "message.user",
                "message.start",
                "tool.start",
                "tool.complete",
                "message.complete"
            ],
            "every durable event of the turn, live"
        );
        let user = &events[0];
        assert_eq!(
            user["payload"]["text"].as_str().map(str::len),
            Some(prompt.len())
        );
        for e in events
            .iter()
            .filter(|e| e["type"].as_str().is_some_and(|t| t.starts_with("tool.")))
        {
            let blob_of = |v: &Value| v["blob"].as_str().map(str::len);
            let p = &e["payload"];
            let len = blob_of(&p["args"]).or_else(|| blob_of(&p["result"]));
            assert_eq!(len, Some(10_000_000), "{}", e["type"]);
        }
        let done = events.last().expect("events");
        assert_eq!(done["payload"]["text"], "done");
    }
    let mut c = gw.client().await;
    let stats = c.ok("session.events.stats", json!({})).await;
    assert_eq!(stats["outbox"]["slow_consumer_closes"], 0, "{stats}");
}

// ---------------------------------------------------------------------------
// Replies count against the outbox bound (PROTOCOL 1.8, 1.10).

/// Resident and peak resident memory of a process, in bytes.
fn rss_of(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status");
    let kb = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap_or_else(|| panic!("{key} in {status}"))
            * 1024
    };
    (kb("VmRSS:"), kb("VmHWM:"))
}

/// Far above what a bounded outbox takes (a few replies of ~14 MB), far
/// below what holding 150 of them does (2 GB).
const RSS_LIMIT: u64 = 1 << 30;

async fn a_peer_that_asks_for_large_replies_and_never_reads_is_closed_and_memory_stays_bounded(
    b: Backend,
) {
    const TURNS: usize = 7;
    const TURN_TEXT: usize = 2_000_000;
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &[]);
    let pid = gw.pid().expect("pid");

    // A history of ~14 MB (7 completes of 2 MB; under the 16 MiB frame
    // limit of the test client).
    let mut b = gw.client().await;
    let r = b.ok("session.create", json!({"title": "history"})).await;
    let sid = r["session"]["session_id"].as_str().unwrap().to_string();
    for _ in 0..TURNS {
        let turn = common::submit(&mut b, &sid, &format!("/big {TURN_TEXT}")).await;
        common::turn_events(&mut b, &turn).await;
    }

    // One reply larger than the bound still reaches a peer that reads, and
    // live frames follow it.
    let mut c = gw.client().await;
    let r = c
        .ok(
            "session.resume",
            json!({"session_id": sid, "last_seen": 0, "omit_messages": true}),
        )
        .await;
    let replayed = r["events"].as_array().expect("events");
    let latest = r["latest_seq"].as_u64().expect("latest_seq");
    assert_eq!(durable_seqs(replayed), (1..=latest).collect::<Vec<_>>());
    let turn = common::submit(&mut b, &sid, "after the replay").await;
    let live = common::turn_events(&mut c, &turn).await;
    assert_eq!(common::complete(&live)["text"], "after the replay");
    common::turn_events(&mut b, &turn).await;

    // A asks for the whole history 150 times and never reads. (An
    // autotuned socket takes a few MB: less than one reply.)
    let mut a = Stalled::connect_with(&gw.addr, None).await;
    for id in 0..150 {
        a.send(
            json!({"jsonrpc":"2.0","id":id,"method":"session.events.since",
            "params":{"session_id": sid, "last_seen": 0, "limit": 10000}}),
        )
        .await;
    }
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let (rss, _) = rss_of(pid);
        assert!(
            rss < RSS_LIMIT,
            "the gateway holds {rss} bytes for a peer that does not read"
        );
        let stats = b.ok("session.events.stats", json!({})).await;
        if stats["outbox"]["slow_consumer_closes"].as_u64() >= Some(1) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the peer that never reads was never closed: {stats}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }

    // The rest of its requests are not answered into memory either.
    b.ok("gateway.ping", json!({})).await;
    let (_, peak) = rss_of(pid);
    assert!(peak < RSS_LIMIT, "the gateway's peak RSS was {peak} bytes");

    // A reads at last: some replies, then the close.
    let code = loop {
        match a.next().await {
            Ok(f) => assert!(f["result"]["events"].is_array(), "{f}"),
            Err(code) => break code,
        }
    };
    assert_eq!(code, 1013);
    let (_, peak) = rss_of(pid);
    eprintln!("peak RSS of the gateway: {} MiB", peak >> 20);
    assert!(peak < RSS_LIMIT, "the gateway's peak RSS was {peak} bytes");

    // The others are unaffected.
    let turn = common::submit(&mut b, &sid, "still here").await;
    assert_eq!(
        common::complete(&common::turn_events(&mut b, &turn).await)["text"],
        "still here"
    );
}

backends!(
    a_stalled_peer_is_closed_and_resumes_without_loss_while_the_other_gets_everything,
    a_reply_larger_than_the_outbox_reaches_every_fast_peer_live,
    tool_events_of_10_mb_reach_every_fast_peer_live,
    a_peer_that_asks_for_large_replies_and_never_reads_is_closed_and_memory_stays_bounded,
);
