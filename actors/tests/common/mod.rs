//! Shared by the actor-level tests: a gateway on a temporary store (no
//! compute hosts) and a live session to drive.
#![allow(dead_code)]

use tether_actors::hooks::{EventRecord, LiveSession};
use tether_actors::{GatewayArgs, GatewayConfig, GatewayHandle};
use tether_protocol::{now_ms, EventType, SessionId, TextPayload};
use tether_store::StoreConfig;

/// A gateway on `dir/tether.db`; a restarted writer opens a new connection.
pub async fn start(dir: &std::path::Path, config: GatewayConfig) -> GatewayHandle {
    let cfg = StoreConfig::new(dir.join("tether.db"));
    let store = tether_store::open(&cfg).await.expect("open store");
    GatewayHandle::start(GatewayArgs {
        config,
        hosts: None,
        reader: store.reader,
        handoffs: store.handoffs,
        eraser: store.eraser,
        epoch: store.epoch,
        writer_factory: store.writers,
        cluster: None,
    })
    .await
    .expect("start gateway")
}

/// Creates a session in the default profile and returns it live.
pub async fn live_session(gw: &GatewayHandle) -> (SessionId, LiveSession) {
    let session = LiveSession::create(gw.ctx()).await.expect("create");
    (session.id().clone(), session)
}

/// `n` small durable events, to inject with `LiveSession::emit`.
pub fn events(n: usize) -> Vec<EventRecord> {
    (0..n)
        .map(|_| {
            EventRecord::new(
                EventType::MessageSystem,
                &TextPayload { text: "x".into() },
                None,
                now_ms(),
            )
        })
        .collect()
}
