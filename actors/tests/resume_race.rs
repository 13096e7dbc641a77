//! Attach + replay under a live stream: every peer that resumes while the
//! session keeps emitting gets each durable event after its watermark
//! exactly once, in order, and the reply before any live frame.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

use std::time::Duration;

use serde_json::Value;
use tether_actors::{spawn_peer, GatewayConfig, Identity, Outbound, OutboxReceiver, PeerMsg};

mod common;

const TOTAL: u64 = 1500;

async fn next_json(rx: &mut OutboxReceiver) -> Value {
    match tokio::time::timeout(Duration::from_secs(10), rx.recv()).await {
        Ok(Some(Outbound::Frame(b))) => serde_json::from_slice(&b).expect("frame is JSON"),
        other => panic!("expected a frame, got {other:?}"),
    }
}

/// Resumes with `last_seen` and returns the seqs received, reply first.
async fn resume_and_collect(
    ctx: tether_actors::Ctx,
    session_id: String,
    last_seen: u64,
) -> (Vec<u64>, Vec<u64>) {
    let identity = Identity {
        profile: "default".into(),
        fixed: false,
        can_attach: true,
        transport: tether_protocol::PeerTransport::WebSocket,
        limits: None,
    };
    let (peer, mut rx) = spawn_peer(&ctx, identity).await.expect("peer");
    let ready = next_json(&mut rx).await;
    assert_eq!(ready["params"]["type"], "gateway.ready");
    let req = serde_json::json!({"jsonrpc":"2.0","id":1,"method":"session.resume",
        "params":{"session_id": session_id, "last_seen": last_seen, "omit_messages": true}});
    peer.cast(PeerMsg::Text {
        text: req.to_string(),
        permit: None,
    })
    .expect("peer alive");
    let reply = next_json(&mut rx).await;
    assert_eq!(
        reply["id"], 1,
        "the reply comes before any live frame: {reply}"
    );
    let replayed: Vec<u64> = reply["result"]["events"]
        .as_array()
        .unwrap_or_else(|| panic!("resume failed: {reply}"))
        .iter()
        .map(|e| e["seq"].as_u64().expect("seq"))
        .collect();
    let mut live = Vec::new();
    let mut last = replayed.last().copied().unwrap_or(last_seen);
    while last < TOTAL + 1 {
        let f = next_json(&mut rx).await;
        let seq = f["params"]["seq"].as_u64().expect("live durable frame");
        live.push(seq);
        last = seq;
    }
    peer.stop(None);
    (replayed, live)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resumes_racing_a_live_stream_see_every_event_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    // A small ring so that early watermarks are served from the store.
    let gw = common::start(
        dir.path(),
        GatewayConfig {
            ring_events: 16,
            ..GatewayConfig::default()
        },
    )
    .await;
    let (id, session) = common::live_session(&gw).await;

    let emitter = {
        let session = session.clone();
        tokio::spawn(async move {
            for _ in 0..TOTAL / 5 {
                session.emit(common::events(5)).unwrap();
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
    };

    let mut joins = Vec::new();
    for i in 0..24u64 {
        tokio::time::sleep(Duration::from_millis(3)).await;
        let info = session.info().await.expect("info");
        // Watermarks behind the ring, inside it, and at the head.
        let last_seen = match i % 3 {
            0 => 0,
            1 => info.latest_seq.saturating_sub(5),
            _ => info.latest_seq,
        };
        let ctx = gw.ctx().clone();
        let sid = id.to_string();
        // Spawned at once, so each resume races the emitter for real.
        joins.push(tokio::spawn(async move {
            (last_seen, resume_and_collect(ctx, sid, last_seen).await)
        }));
    }
    assert!(
        !emitter.is_finished(),
        "the resumes must overlap the stream"
    );
    let results = futures::future::join_all(joins).await;
    emitter.await.unwrap();
    for r in results {
        let (last_seen, (replayed, live)) = r.expect("resume task");
        let all: Vec<u64> = replayed.iter().chain(live.iter()).copied().collect();
        let expected: Vec<u64> = (last_seen + 1..=TOTAL + 1).collect();
        assert_eq!(
            all,
            expected,
            "watermark {last_seen}: replay {} + live {}",
            replayed.len(),
            live.len()
        );
    }
    gw.shutdown(Duration::from_secs(5)).await;
}
