//! Opening the store: directory creation, migrations, the epoch, a restarted writer; on
//! PostgreSQL also the writer's lock, a newer schema and connection errors.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

use std::time::Duration;

use common::Backend;
use tether_store::testing::{sqlite_page_size as page_size, TestDatabase};
use tether_store::{
    open_postgres, open_postgres_writer, open_sqlite, open_sqlite_writer, OpenError, PageSize,
    PostgresConfig, StoreError, Synchronous,
};

fn is_epoch(s: &str) -> bool {
    s.len() == 16
        && s.chars()
            .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
}

async fn first_open_creates_the_store_and_its_epoch(b: Backend) {
    let db = common::Db::new(b).await;
    if !db.is_postgres() {
        assert!(!db.sqlite.db_path.parent().unwrap().exists());
    }
    let opened = db.open().await;
    assert!(is_epoch(&opened.epoch), "{:?}", opened.epoch);
    assert_eq!(opened.reader.epoch(), opened.epoch);
    if !db.is_postgres() {
        assert!(db.sqlite.db_path.exists());
    }
}

async fn reopening_keeps_the_epoch_and_the_data(b: Backend) {
    let db = common::Db::new(b).await;
    let mut first = db.open().await;
    common::commit_ok(&mut first, &[common::create("s_1", "default", 10, 2)]).await;
    let epoch = first.epoch.clone();
    drop(first);

    let second = db.open().await;
    assert_eq!(second.epoch, epoch);
    let row = second
        .reader
        .get_session("default", &common::sid("s_1"))
        .await
        .unwrap()
        .expect("session survives a reopen");
    assert_eq!(row.latest_seq, 3);
}

async fn a_new_store_gets_a_new_epoch(b: Backend) {
    let (_a, one) = common::fresh(b.clone()).await;
    let (_b, two) = common::fresh(b).await;
    assert!(is_epoch(&two.epoch));
    assert_ne!(one.epoch, two.epoch);
}

async fn a_restarted_writer_continues_where_the_old_one_stopped(b: Backend) {
    let (db, mut opened) = common::fresh(b).await;
    common::commit_ok(&mut opened, &[common::create("s_1", "default", 10, 1)]).await;
    // The StoreWriter actor died: its connection goes, a new one is opened.
    let tether_store::Opened { writer, reader, .. } = opened;
    drop(writer);
    let mut writer = db.writer().await;
    assert_eq!(writer.latest_seq(&common::sid("s_1")).await.unwrap(), 2);
    let results = writer.commit(vec![common::append("s_1", 3, 2, 3)]).await;
    assert_eq!(results, vec![Ok(())]);
    let events = reader
        .events_since(&common::sid("s_1"), 0, 100)
        .await
        .unwrap();
    assert_eq!(
        events.iter().map(|e| e.seq).collect::<Vec<_>>(),
        vec![1, 2, 3, 4]
    );
}

/// A writer replaced while the old one is still alive (a StoreWriter actor killed mid-batch):
/// the new one takes over, and the old one writes nothing more.
async fn a_new_writer_takes_over_from_one_that_was_abandoned(b: Backend) {
    let (db, mut opened) = common::fresh(b).await;
    common::commit_ok(&mut opened, &[common::create("s_1", "default", 10, 0)]).await;
    let mut old = std::mem::replace(&mut opened.writer, db.writer().await);
    assert_eq!(
        opened.writer.latest_seq(&common::sid("s_1")).await.unwrap(),
        1
    );
    common::commit_ok(&mut opened, &[common::append("s_1", 2, 1, 1)]).await;
    // What the old writer believes comes next is taken already; on PostgreSQL the new writer
    // also holds the database's lock, so the old one cannot even try.
    let late = old.commit(vec![common::append("s_1", 2, 1, 2)]).await;
    if db.is_postgres() {
        assert!(
            matches!(late[0], Err(StoreError::Unavailable(_))),
            "{late:?}"
        );
    } else {
        assert!(matches!(late[0], Err(StoreError::Conflict(_))), "{late:?}");
    }
    let latest = opened.writer.latest_seq(&common::sid("s_1")).await.unwrap();
    let events = opened
        .reader
        .events_since(&common::sid("s_1"), 0, 100)
        .await
        .unwrap();
    assert_eq!(
        events.iter().map(|e| e.seq).collect::<Vec<_>>(),
        (1..=latest).collect::<Vec<_>>()
    );
}

backends!(
    first_open_creates_the_store_and_its_epoch,
    reopening_keeps_the_epoch_and_the_data,
    a_new_store_gets_a_new_epoch,
    a_restarted_writer_continues_where_the_old_one_stopped,
    a_new_writer_takes_over_from_one_that_was_abandoned,
);

#[tokio::test]
async fn sqlite_synchronous_full_opens_and_writes() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = common::config(dir.path());
    cfg.synchronous = Synchronous::Full;
    let mut opened = open_sqlite(&cfg).await.unwrap();
    common::commit_ok(&mut opened, &[common::create("s_1", "default", 10, 0)]).await;
}

#[tokio::test]
async fn sqlite_writer_alone_needs_an_existing_store() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = common::config(dir.path());
    std::fs::create_dir_all(cfg.db_path.parent().unwrap()).unwrap();
    let err = open_sqlite_writer(&cfg).await.err().expect("no store yet");
    assert!(matches!(err, StoreError::Unavailable(_)), "{err:?}");
    assert_eq!(err.code(), 5072);
    assert!(!cfg.db_path.exists(), "must not create an empty store");
}

/// A new store gets the configured page size (2048 unless told), which only a new file
/// takes: a store made with another size keeps its pages, and its data, and takes appends as
/// before.
#[tokio::test]
async fn sqlite_a_new_store_takes_the_configured_page_size_and_an_older_one_keeps_its_own() {
    use sqlx::{ConnectOptions, Connection};

    let dir = tempfile::tempdir().unwrap();
    let cfg = common::config(dir.path());
    let mut opened = open_sqlite(&cfg).await.unwrap();
    common::commit_ok(&mut opened, &[common::create("s_1", "default", 10, 3)]).await;
    assert_eq!(page_size(&cfg.db_path).await, 2048);
    drop(opened);

    let large = tempfile::tempdir().unwrap();
    let mut cfg = common::config(large.path());
    cfg.page_size = "4096".parse::<PageSize>().unwrap();
    let mut opened = open_sqlite(&cfg).await.unwrap();
    common::commit_ok(&mut opened, &[common::create("s_1", "default", 10, 3)]).await;
    drop(opened);
    assert_eq!(page_size(&cfg.db_path).await, 4096);

    // Made elsewhere with 8192-byte pages, opened with the default.
    let older = tempfile::tempdir().unwrap();
    let cfg = common::config(older.path());
    std::fs::create_dir_all(cfg.db_path.parent().unwrap()).unwrap();
    let mut conn = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(&cfg.db_path)
        .create_if_missing(true)
        .page_size(8192)
        .connect()
        .await
        .expect("create");
    sqlx::query("CREATE TABLE older (a)")
        .execute(&mut conn)
        .await
        .expect("table");
    conn.close().await.expect("close");
    let mut opened = open_sqlite(&cfg).await.unwrap();
    common::commit_ok(&mut opened, &[common::create("s_1", "default", 10, 3)]).await;
    common::commit_ok(&mut opened, &[common::append("s_1", 5, 40, 43)]).await;
    drop(opened);
    assert_eq!(page_size(&cfg.db_path).await, 8192);
    let opened = open_sqlite(&cfg).await.unwrap();
    let events = opened
        .reader
        .events_since(&common::sid("s_1"), 0, 100)
        .await
        .unwrap();
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=44).collect::<Vec<_>>());
}

/// The PostgreSQL tests below need a server; `None` when there is none (skipped loudly).
async fn server() -> Option<(String, TestDatabase)> {
    let Some(Backend::Postgres(server)) = Backend::postgres() else {
        return None;
    };
    let db = TestDatabase::create(&server).await;
    Some((server, db))
}

#[tokio::test]
async fn postgres_writer_alone_creates_nothing() {
    let Some((_server, db)) = server().await else {
        return;
    };
    let cfg = PostgresConfig::new(db.url.clone());
    let mut writer = open_postgres_writer(&cfg).await.expect("a writer");
    let results = writer
        .commit(vec![common::create("s_1", "default", 1, 0)])
        .await;
    assert!(results[0].is_err(), "no tables yet: {results:?}");
    drop(writer);
    // The database is still unmigrated: opening it now is a first open.
    let opened = open_postgres(&cfg).await.expect("open");
    assert!(is_epoch(&opened.epoch));
}

#[tokio::test]
async fn postgres_a_second_gateway_on_the_database_is_refused() {
    let Some((_server, db)) = server().await else {
        return;
    };
    let cfg = PostgresConfig::new(db.url.clone());
    // Within one process a newer writer takes over from an older one (the test above), so the
    // other gateway is faked: a plain connection holding the same advisory lock.
    let mut foreign = <sqlx::postgres::PgConnection as sqlx::Connection>::connect(&db.url)
        .await
        .unwrap();
    let taken: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock(8387237872774807553)")
        .fetch_one(&mut foreign)
        .await
        .unwrap();
    assert!(taken);
    match open_postgres(&cfg).await {
        Err(e @ OpenError::Held { .. }) => {
            assert!(e.is_usage());
            let text = e.to_string();
            assert!(text.contains("in use by another tether gateway"), "{text}");
            assert!(text.contains("server backend"), "{text}");
        }
        other => panic!("expected Held, got {other:?}"),
    }
}

#[tokio::test]
async fn postgres_a_newer_schema_is_refused_before_anything_is_written() {
    let Some((_server, db)) = server().await else {
        return;
    };
    let cfg = PostgresConfig::new(db.url.clone());
    let opened = open_postgres(&cfg).await.expect("open");
    let epoch = opened.epoch.clone();
    drop(opened);
    let mut c = <sqlx::postgres::PgConnection as sqlx::Connection>::connect(&db.url)
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         VALUES (9999, 'from the future', true, '\\x00', 0)",
    )
    .execute(&mut c)
    .await
    .unwrap();
    match open_postgres(&cfg).await {
        Err(e @ OpenError::NewerSchema { .. }) => {
            assert!(e.is_usage());
            assert!(e.to_string().contains("9999"), "{e}");
        }
        other => panic!("expected NewerSchema, got {other:?}"),
    }
    let still: String = sqlx::query_scalar("SELECT value FROM meta WHERE key = 'epoch'")
        .fetch_one(&mut c)
        .await
        .unwrap();
    assert_eq!(still, epoch);
}

#[tokio::test]
async fn postgres_bad_credentials_and_urls_are_usage_errors_with_the_password_masked() {
    let Some((_server, db)) = server().await else {
        return;
    };
    let wrong = db.url.replacen("://", "://nobody_at_all:hunter2@", 1);
    // Drop the original user-info, keep host and database.
    let wrong = match db.url.split_once('@') {
        Some((_, rest)) => format!("postgres://nobody_at_all:hunter2@{rest}"),
        None => wrong,
    };
    let e = open_postgres(&PostgresConfig::new(wrong))
        .await
        .unwrap_err();
    assert!(matches!(e, OpenError::Refused { .. }), "{e:?}");
    assert!(e.is_usage());
    assert!(!e.to_string().contains("hunter2"), "{e}");
    assert!(e.to_string().contains("nobody_at_all:***@"), "{e}");

    let e = open_postgres(&PostgresConfig::new("postgres://u:hunter2@[::1"))
        .await
        .unwrap_err();
    assert!(matches!(e, OpenError::BadUrl { .. }), "{e:?}");
    assert!(!e.to_string().contains("hunter2"), "{e}");
}

#[tokio::test]
async fn postgres_an_unreachable_server_is_retried_then_reported() {
    if Backend::postgres().is_none() {
        return;
    }
    // A port nothing listens on.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let mut cfg = PostgresConfig::new(format!("postgres://u:hunter2@127.0.0.1:{port}/d"));
    cfg.connect_timeout = Duration::from_secs(1);
    let e = open_postgres(&cfg).await.unwrap_err();
    assert!(e.is_unreachable(), "{e:?}");
    assert!(!e.to_string().contains("hunter2"), "{e}");
}
