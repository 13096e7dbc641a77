//! Helpers shared by the integration tests: a store in a temp dir, and terse builders.
#![allow(dead_code)]

use std::path::Path;

use serde_json::json;
use tether_protocol::SessionId;
use tether_store::{open_sqlite, EventRow, NewSession, Opened, SessionPatch, StoreConfig, WriteOp};

/// A config for `<dir>/data/tether.db` (the `data` dir does not exist yet).
pub fn config(dir: &Path) -> StoreConfig {
    StoreConfig::new(dir.join("data").join("tether.db"))
}

/// A fresh store in a new temp dir (kept alive by the returned guard).
pub async fn fresh() -> (tempfile::TempDir, StoreConfig, Opened) {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = config(dir.path());
    let opened = open_sqlite(&cfg).await.expect("open");
    (dir, cfg, opened)
}

pub fn sid(s: &str) -> SessionId {
    SessionId::from(s.to_owned())
}

/// An event with a small JSON payload that names its seq.
pub fn ev(seq: u64, kind: &str) -> EventRow {
    EventRow {
        seq,
        kind: kind.to_owned(),
        payload: json!({ "text": format!("event {seq}") }).to_string(),
        turn_id: Some(format!("t_{seq}")),
        trace_id: None,
        ts_ms: 1_000 + seq as i64,
    }
}

/// `n` `message.user` events from `first`.
pub fn evs(first: u64, n: u64) -> Vec<EventRow> {
    (first..first + n).map(|s| ev(s, "message.user")).collect()
}

pub fn new_session(id: &str, profile: &str, created_at_ms: i64) -> NewSession {
    NewSession {
        id: sid(id),
        profile: profile.to_owned(),
        title: format!("title of {id}"),
        parent_session_id: None,
        kind: "chat".to_owned(),
        close_on_disconnect: false,
        engine_pin: None,
        follow_profile_config: false,
        created_at_ms,
        message_count: 0,
    }
}

/// A CreateSession op: `session.created` (seq 1) then `seeds` `message.user` events.
pub fn create(id: &str, profile: &str, created_at_ms: i64, seeds: u64) -> WriteOp {
    let mut events = vec![ev(1, "session.created")];
    events.extend(evs(2, seeds));
    let mut session = new_session(id, profile, created_at_ms);
    session.message_count = seeds;
    WriteOp::CreateSession { session, events }
}

/// An Append op of `n` events from `first`, patching message_count to `count`.
pub fn append(id: &str, first: u64, n: u64, count: u64) -> WriteOp {
    WriteOp::Append {
        session_id: sid(id),
        events: evs(first, n),
        patch: SessionPatch {
            message_count: Some(count),
            ..SessionPatch::default()
        },
    }
}

/// Commits `ops` and asserts every one succeeded.
pub async fn commit_ok(opened: &mut Opened, ops: &[WriteOp]) {
    let results = opened.writer.commit(ops.to_vec()).await;
    assert_eq!(results.len(), ops.len());
    for (i, r) in results.iter().enumerate() {
        assert!(r.is_ok(), "op {i} failed: {r:?}");
    }
}
