//! The root restarts core actors within their intensity and shuts the
//! gateway down cleanly beyond it.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

use std::time::Duration;

use ractor::ActorCell;
use tether_actors::hooks::{core_actor, Child, LiveSession};
use tether_actors::{GatewayConfig, GatewayHandle};

async fn start(dir: &std::path::Path) -> GatewayHandle {
    common::start(dir, GatewayConfig::default()).await
}

fn writer(gw: &GatewayHandle) -> Option<ActorCell> {
    core_actor(gw.ctx(), Child::StoreWriter)
}

/// Waits until the root has published a writer other than `old`.
async fn next_writer(gw: &GatewayHandle, old: ractor::ActorId) -> ActorCell {
    for _ in 0..200 {
        if let Some(w) = writer(gw) {
            if w.get_id() != old {
                return w;
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the store writer was not restarted");
}

async fn create(gw: &GatewayHandle) -> bool {
    LiveSession::create(gw.ctx()).await.is_ok()
}

#[tokio::test]
async fn a_killed_store_writer_is_restarted_and_serves_again() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start(dir.path()).await;
    let first = writer(&gw).expect("writer up");
    first.kill();
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
    let mut current = writer(&gw).expect("writer up");
    for _ in 0..3 {
        current.kill();
        current = next_writer(&gw, current.get_id()).await;
    }
    current.kill();
    tokio::time::timeout(Duration::from_secs(10), gw.stopped())
        .await
        .expect("the gateway stops after its core actor exceeded its intensity");
    assert!(
        core_actor(gw.ctx(), Child::Registry).is_none(),
        "no registry is published after the stop"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_appending_through_a_writer_restart_is_neither_stuck_nor_gapped() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start(dir.path()).await;
    let (id, session) = common::live_session(&gw).await;
    for i in 0..400 {
        session.emit(common::events(5)).unwrap();
        if i == 200 {
            let w = writer(&gw).expect("writer up");
            w.kill();
            next_writer(&gw, w.get_id()).await;
        }
        tokio::task::yield_now().await;
    }
    // Not stuck: everything emitted settles (committed, or refused while no
    // writer was up), and the session goes on appending.
    let flushed = session.flush(Some(Duration::from_secs(10))).await;
    assert!(flushed.is_ok(), "session stuck after the writer restart");
    session.emit(common::events(3)).unwrap();
    session
        .flush(Some(Duration::from_secs(10)))
        .await
        .expect("session alive");
    let info = session.info().await.expect("info");
    // No gap, no duplicate: the store holds exactly 1..=latest_seq.
    let rows = gw
        .ctx()
        .reader
        .events_since(&id, 0, 100_000)
        .await
        .expect("read events");
    let seqs: Vec<u64> = rows.iter().map(|r| r.seq).collect();
    assert_eq!(seqs, (1..=info.latest_seq).collect::<Vec<_>>());
    assert!(
        info.latest_seq > 1000,
        "most events were committed: {}",
        info.latest_seq
    );
    gw.shutdown(Duration::from_secs(5)).await;
}
