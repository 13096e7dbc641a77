//! The retention lease on PostgreSQL: of several processes erasing in one
//! database (the nodes of a cluster), one holds the lease at a time, and a
//! lease released (or whose connection ended) is free for the next.
//! SQLite has one gateway, whose lease is always its own.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

use tether_store::testing::{open_postgres_eraser, postgres_server, TestDatabase};
use tether_store::{open_postgres, PostgresConfig};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_process_sweeps_at_a_time() {
    let Some(server) = postgres_server() else {
        return;
    };
    let db = TestDatabase::create(&server).await;
    let cfg = PostgresConfig::new(&db.url);
    let opened = open_postgres(&cfg).await.expect("open");
    let first = opened.eraser.clone();
    let second = open_postgres_eraser(&cfg).await.expect("second eraser");

    assert!(
        first.try_lead().await.expect("lead"),
        "a free lease is taken"
    );
    assert!(first.try_lead().await.expect("lead"), "its holder keeps it");
    assert!(
        !second.try_lead().await.expect("lead"),
        "another process does not get a held lease"
    );
    first.release_lead().await.expect("release");
    assert!(
        second.try_lead().await.expect("lead"),
        "a released lease is free"
    );
    assert!(!first.try_lead().await.expect("lead"));
    // A process that ends (its connections with it) frees the lease.
    drop(second);
    let mut taken = false;
    for _ in 0..50 {
        if first.try_lead().await.expect("lead") {
            taken = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(taken, "the lease of a process that ended is free again");
}

/// An erase that a crash cut short after its first step (the row gone, the
/// session recorded in `erasing`, its events still there) is finished by
/// the next `finish_erasing`, in bounded steps, and leaves the other
/// sessions alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_erase_cut_short_is_finished_later() {
    use common::{commit_ok, create, fresh_sqlite, sid};
    use sqlx::{ConnectOptions, Connection};

    let (_dir, cfg, mut opened) = fresh_sqlite().await;
    commit_ok(
        &mut opened,
        &[create("s_gone", "p", 1, 25), create("s_kept", "p", 2, 3)],
    )
    .await;
    // The first step alone, as it commits before a crash.
    let mut conn = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(&cfg.db_path)
        .connect()
        .await
        .expect("connect");
    sqlx::query("DELETE FROM sessions WHERE id = 's_gone'")
        .execute(&mut conn)
        .await
        .expect("delete row");
    sqlx::query("INSERT INTO erasing (session_id, since_ms) VALUES ('s_gone', 0)")
        .execute(&mut conn)
        .await
        .expect("record");

    let mut steps = 0;
    while opened.eraser.finish_erasing(10).await.expect("finish") > 0 {
        steps += 1;
        assert!(steps < 100, "finishing never ends");
    }
    let left: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM events WHERE session_id = 's_gone'")
        .fetch_one(&mut conn)
        .await
        .expect("count");
    assert_eq!(left, 0);
    let erasing: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM erasing")
        .fetch_one(&mut conn)
        .await
        .expect("count");
    assert_eq!(erasing, 0);
    conn.close().await.expect("close");
    let kept = opened
        .reader
        .events_since(&sid("s_kept"), 0, 100)
        .await
        .expect("read");
    assert_eq!(kept.len(), 4);
    // Deleting what is already gone changes nothing.
    let again = opened
        .eraser
        .delete_session("p", &sid("s_gone"), None, 10)
        .await
        .expect("delete");
    assert_eq!(again, None);
    assert_eq!(
        opened
            .eraser
            .delete_session("other", &sid("s_kept"), None, 10)
            .await
            .expect("delete"),
        None,
        "another profile's session is not erased"
    );
}

/// A store created before incremental vacuum existed is converted when it
/// is opened (a small one), and erasing then gives its pages back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_store_is_converted_and_erasing_shrinks_it() {
    use common::{commit_ok, config, create, sid};
    use sqlx::{ConnectOptions, Connection};

    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = config(dir.path());
    // A file made without incremental vacuum, as every store was before.
    if let Some(parent) = cfg.db_path.parent() {
        std::fs::create_dir_all(parent).expect("dir");
    }
    let mut conn = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(&cfg.db_path)
        .create_if_missing(true)
        .connect()
        .await
        .expect("create");
    sqlx::query("CREATE TABLE older (a)")
        .execute(&mut conn)
        .await
        .expect("table");
    let mode: i64 = sqlx::query_scalar("PRAGMA auto_vacuum")
        .fetch_one(&mut conn)
        .await
        .expect("mode");
    assert_eq!(mode, 0, "made without it");
    conn.close().await.expect("close");

    let mut opened = tether_store::open_sqlite(&cfg).await.expect("open");
    let mut conn = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(&cfg.db_path)
        .connect()
        .await
        .expect("connect");
    let mode: i64 = sqlx::query_scalar("PRAGMA auto_vacuum")
        .fetch_one(&mut conn)
        .await
        .expect("mode");
    assert_eq!(mode, 2, "incremental after the open");

    let ops: Vec<_> = (0..40)
        .map(|i| create(&format!("s_{i}"), "p", i, 200))
        .collect();
    commit_ok(&mut opened, &ops).await;
    let full = page_count(&mut conn).await;
    for i in 0..40 {
        let erased = opened
            .eraser
            .delete_session("p", &sid(&format!("s_{i}")), None, 500)
            .await
            .expect("delete");
        assert!(erased.is_some());
    }
    let given = opened.eraser.reclaim(u32::MAX).await.expect("reclaim");
    assert!(given > 0, "pages given back");
    let after = page_count(&mut conn).await;
    assert!(after < full, "the file shrank: {full} pages, then {after}");
    conn.close().await.expect("close");
}

async fn page_count(c: &mut sqlx::SqliteConnection) -> i64 {
    sqlx::query_scalar("PRAGMA page_count")
        .fetch_one(c)
        .await
        .expect("pages")
}
