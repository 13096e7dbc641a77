//! Shared by the actor-level tests: a gateway on a temporary store (no
//! compute hosts) and a live session to drive.
#![allow(dead_code)]

use ractor::rpc::CallResult;
use ractor::ActorRef;
use tether_actors::event::EventRecord;
use tether_actors::registry::{RegistryMsg, Resolved};
use tether_actors::session::SessionMsg;
use tether_actors::{GatewayArgs, GatewayConfig, GatewayHandle};
use tether_protocol::{now_ms, CreateParams, EventType, SessionId, TextPayload};
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
        epoch: store.epoch,
        writer_factory: store.writers,
    })
    .await
    .expect("start gateway")
}

/// Creates a session in the default profile and returns it live.
pub async fn live_session(gw: &GatewayHandle) -> (SessionId, ActorRef<SessionMsg>) {
    let registry = gw.ctx().registry().expect("registry up");
    let created = match registry
        .call(
            |reply| RegistryMsg::Create {
                profile: "default".into(),
                params: CreateParams {
                    attach: false,
                    ..CreateParams::default()
                },
                attach: None,
                reply,
            },
            None,
        )
        .await
        .expect("registry answers")
    {
        CallResult::Success(Ok(c)) => c,
        other => panic!("create failed: {other:?}"),
    };
    let id = created.result.session.session_id.clone();
    let key = ("default".to_string(), id.clone());
    let actor = match registry
        .call(
            |reply| RegistryMsg::Resolve {
                key,
                load: true,
                reply,
            },
            None,
        )
        .await
        .expect("registry answers")
    {
        CallResult::Success(Ok(Resolved::Live(live))) => live.actor,
        other => panic!("not live: {other:?}"),
    };
    (id, actor)
}

/// An `Emit` of `n` small durable events.
pub fn emit(n: usize) -> SessionMsg {
    let events = (0..n)
        .map(|_| {
            EventRecord::new(
                EventType::MessageSystem,
                &TextPayload { text: "x".into() },
                None,
                now_ms(),
            )
        })
        .collect();
    SessionMsg::Emit { events }
}
