//! The root restarts core actors within their intensity and shuts the
//! gateway down cleanly beyond it.

use std::sync::Arc;
use std::time::Duration;

use ractor::rpc::CallResult;
use tether_actors::registry::RegistryMsg;
use tether_actors::store_writer::WriterFactory;
use tether_actors::{GatewayArgs, GatewayConfig, GatewayHandle};
use tether_protocol::CreateParams;
use tether_store::{open_sqlite, open_sqlite_writer, StoreConfig};

async fn start(dir: &std::path::Path) -> GatewayHandle {
    let cfg = StoreConfig::new(dir.join("tether.db"));
    let opened = open_sqlite(&cfg).await.expect("open store");
    let factory: WriterFactory = Arc::new(move || {
        let cfg = cfg.clone();
        Box::pin(async move { open_sqlite_writer(&cfg).await })
    });
    GatewayHandle::start(GatewayArgs {
        config: GatewayConfig::default(),
        hosts: None,
        reader: opened.reader,
        epoch: opened.epoch,
        writer_factory: factory,
    })
    .await
    .expect("start gateway")
}

/// Waits until the root has published a writer other than `old`.
async fn next_writer(
    gw: &GatewayHandle,
    old: ractor::ActorId,
) -> ractor::ActorRef<tether_actors::store_writer::StoreWriterMsg> {
    for _ in 0..200 {
        if let Some(w) = gw.ctx().writer() {
            if w.get_id() != old {
                return w;
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the store writer was not restarted");
}

async fn create(gw: &GatewayHandle) -> bool {
    let registry = gw.ctx().registry().expect("registry up");
    let r = registry
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
            Some(Duration::from_secs(5)),
        )
        .await
        .expect("registry answers");
    matches!(r, CallResult::Success(Ok(_)))
}

#[tokio::test]
async fn a_killed_store_writer_is_restarted_and_serves_again() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start(dir.path()).await;
    let first = gw.ctx().writer().expect("writer up");
    first.get_cell().kill();
    let second = next_writer(&gw, first.get_id()).await;
    assert_ne!(first.get_id(), second.get_id());
    assert!(
        create(&gw).await,
        "a session can be created after the restart"
    );
    gw.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn exceeding_the_intensity_stops_the_gateway_instead_of_hanging() {
    let dir = tempfile::tempdir().unwrap();
    let mut gw = start(dir.path()).await;
    // The core policy allows 3 restarts per 10 s; the 4th stop escalates.
    let mut current = gw.ctx().writer().expect("writer up");
    for _ in 0..3 {
        current.get_cell().kill();
        current = next_writer(&gw, current.get_id()).await;
    }
    current.get_cell().kill();
    tokio::time::timeout(Duration::from_secs(10), gw.stopped())
        .await
        .expect("the gateway stops after its core actor exceeded its intensity");
    assert!(
        gw.ctx().registry().is_err(),
        "no registry is published after the stop"
    );
}
