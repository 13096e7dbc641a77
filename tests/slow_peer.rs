//! A peer that stops reading (PROTOCOL 1.8): it is closed with 1013 "slow
//! consumer" while the other peer of the session gets everything, and it
//! resumes from its watermark with nothing lost or doubled.

mod common;

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
        let addr: SocketAddr = addr.parse().expect("gateway address");
        let socket = TcpSocket::new_v4().expect("socket");
        socket.set_recv_buffer_size(4096).expect("SO_RCVBUF");
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

#[tokio::test]
async fn a_stalled_peer_is_closed_and_resumes_without_loss_while_the_other_gets_everything() {
    let dir = tempdir();
    let gw = Gateway::start(dir.path(), &["--outbox-frames", "64"]);

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
