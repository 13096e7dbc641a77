//! Helpers shared by the integration tests: a fresh store on either backend, the macro that
//! runs a test on both, and terse builders.
//!
//! Each test is written once, as `async fn name(b: Backend)`, and listed in its file's
//! `backends!(...)`: that makes `sqlite::name` and `postgres::name`. The PostgreSQL one runs in a
//! throwaway database of the server `TETHER_TEST_POSTGRES` names, and is skipped (loudly) without
//! one unless `TETHER_REQUIRE_POSTGRES=1` (`tether_store::testing`).
#![allow(dead_code)]

use std::path::Path;

use serde_json::json;
use tether_protocol::SessionId;
use tether_store::testing::{postgres_server, TestDatabase};
use tether_store::{
    open_postgres, open_postgres_writer, open_sqlite, open_sqlite_writer, EventRow, NewSession,
    Opened, PostgresConfig, SessionPatch, StoreConfig, StoreWrite, WriteOp,
};

/// Which implementation a test runs on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    /// The server to create the test's database in.
    Postgres(String),
}

impl Backend {
    /// PostgreSQL, if a server is configured (see the module doc).
    pub fn postgres() -> Option<Backend> {
        postgres_server().map(Backend::Postgres)
    }
}

/// Runs each named `async fn(Backend)` as a test on SQLite and on PostgreSQL.
#[macro_export]
macro_rules! backends {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::common::Backend::Sqlite).await
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    if let Some(b) = $crate::common::Backend::postgres() {
                        super::$name(b).await
                    }
                }
            )*
        }
    };
}

/// Where a test's store lives: a temp dir (SQLite) or a database of its own (PostgreSQL). Both
/// go when this is dropped.
pub struct Db {
    pub backend: Backend,
    /// The SQLite store's settings (`<dir>/data/tether.db`; unused on PostgreSQL).
    pub sqlite: StoreConfig,
    /// The PostgreSQL store's settings (`None` on SQLite).
    pub postgres: Option<PostgresConfig>,
    dir: tempfile::TempDir,
    database: Option<TestDatabase>,
}

impl Db {
    /// A place for a store that does not exist yet.
    pub async fn new(backend: Backend) -> Db {
        let dir = tempfile::tempdir().expect("tempdir");
        let sqlite = config(dir.path());
        let (database, postgres) = match &backend {
            Backend::Sqlite => (None, None),
            Backend::Postgres(server) => {
                let db = TestDatabase::create(server).await;
                let cfg = PostgresConfig::new(db.url.clone());
                (Some(db), Some(cfg))
            }
        };
        Db {
            backend,
            sqlite,
            postgres,
            dir,
            database,
        }
    }

    /// Opens (creating and migrating) the store.
    pub async fn open(&self) -> Opened {
        match &self.postgres {
            None => open_sqlite(&self.sqlite).await.expect("open"),
            Some(cfg) => open_postgres(cfg).await.expect("open"),
        }
    }

    /// A new writer on the opened store (what a restarted StoreWriter actor gets).
    pub async fn writer(&self) -> Box<dyn StoreWrite> {
        match &self.postgres {
            None => open_sqlite_writer(&self.sqlite).await.expect("writer"),
            Some(cfg) => open_postgres_writer(cfg).await.expect("writer"),
        }
    }

    /// A second handoff queue on the opened store, with connections of its own.
    pub async fn other_handoffs(&self) -> std::sync::Arc<dyn tether_store::HandoffStore> {
        match &self.postgres {
            None => open_sqlite(&self.sqlite).await.expect("open").handoffs,
            Some(cfg) => tether_store::testing::open_postgres_handoffs(cfg)
                .await
                .expect("handoffs"),
        }
    }

    pub fn is_postgres(&self) -> bool {
        self.postgres.is_some()
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

/// A config for `<dir>/data/tether.db` (the `data` dir does not exist yet).
pub fn config(dir: &Path) -> StoreConfig {
    StoreConfig::new(dir.join("data").join("tether.db"))
}

/// A fresh store on `backend` (kept alive by the returned guard).
pub async fn fresh(backend: Backend) -> (Db, Opened) {
    let db = Db::new(backend).await;
    let opened = db.open().await;
    (db, opened)
}

/// A fresh SQLite store in a new temp dir, for the tests of SQLite's own hooks.
pub async fn fresh_sqlite() -> (tempfile::TempDir, StoreConfig, Opened) {
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
