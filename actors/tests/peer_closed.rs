//! A peer whose outbox is closed (slow consumer, rate limit, a transport
//! close) executes nothing more: the frames its client still sends could
//! only build answers nobody receives, and might change a session the
//! client will never hear about (PROTOCOL.md, "Outbox accounting").
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

use std::time::Duration;

use serde_json::{json, Value};
use tether_actors::{
    spawn_peer, GatewayConfig, Identity, Outbound, OutboxReceiver, PeerMsg, CLOSE_SLOW_CONSUMER,
};

mod common;

async fn next(rx: &mut OutboxReceiver) -> Option<Outbound> {
    tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("the outbox answers")
}

fn json_of(item: Option<Outbound>) -> Value {
    match item {
        Some(Outbound::Frame(b)) => serde_json::from_slice(&b).expect("frame is JSON"),
        other => panic!("expected a frame, got {other:?}"),
    }
}

fn create(id: u64, title: &str) -> PeerMsg {
    let req = json!({"jsonrpc":"2.0","id":id,"method":"session.create",
        "params":{"title": title, "attach": false}});
    PeerMsg::Text {
        text: req.to_string(),
        permit: None,
    }
}

#[tokio::test]
async fn frames_that_arrive_after_the_close_are_not_executed() {
    let dir = tempfile::tempdir().unwrap();
    let gw = common::start(dir.path(), GatewayConfig::default()).await;
    let identity = Identity {
        profile: "default".into(),
        fixed: false,
        can_attach: true,
        transport: tether_protocol::PeerTransport::WebSocket,
        limits: None,
    };
    let (peer, mut rx) = spawn_peer(gw.ctx(), identity).await.expect("peer");
    assert_eq!(
        json_of(next(&mut rx).await)["params"]["type"],
        "gateway.ready"
    );

    peer.cast(create(1, "before")).expect("peer alive");
    assert_eq!(json_of(next(&mut rx).await)["id"], 1);

    peer.cast(PeerMsg::Close {
        code: CLOSE_SLOW_CONSUMER,
        reason: "slow consumer".into(),
    })
    .expect("peer alive");
    peer.cast(create(2, "after")).expect("peer alive");
    // Every message handled, in order, then the actor stops.
    peer.drain_and_wait(Some(Duration::from_secs(10)))
        .await
        .expect("the peer drains");

    // The close is all the client gets after the first answer...
    assert!(matches!(
        next(&mut rx).await,
        Some(Outbound::Close {
            code: CLOSE_SLOW_CONSUMER,
            ..
        })
    ));
    assert_eq!(next(&mut rx).await, None);
    // ...and the second request changed nothing.
    let (rows, _) = gw
        .ctx()
        .reader
        .list_sessions("default", true, None, 100)
        .await
        .expect("list");
    let titles: Vec<&str> = rows.iter().map(|r| r.title.as_str()).collect();
    assert_eq!(titles, ["before"]);
}
