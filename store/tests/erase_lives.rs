//! An id lives one life at a time, on both stores: while an erase of its
//! old life is under way (its row gone, its events still there), a new
//! session under the id is refused and writes nothing; once the erase is
//! done the id is free; and an erase that names the life it decided on
//! never takes a later one.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

use common::{commit_ok, create, fresh, sid, Backend, Db};
use sqlx::Connection;
use tether_store::StoreError;

/// Runs `sql` on a connection of its own, as another process would.
async fn raw(db: &Db, sql: &str) {
    match &db.postgres {
        None => {
            let url = format!("sqlite://{}", db.sqlite.db_path.display());
            let mut c = sqlx::SqliteConnection::connect(&url)
                .await
                .expect("connect");
            sqlx::query(sql).execute(&mut c).await.expect("raw sql");
            c.close().await.expect("close");
        }
        Some(cfg) => {
            let mut c = sqlx::PgConnection::connect(&cfg.url)
                .await
                .expect("connect");
            sqlx::query(sql).execute(&mut c).await.expect("raw sql");
            c.close().await.expect("close");
        }
    }
}

async fn an_id_lives_one_life_at_a_time(backend: Backend) {
    let (db, mut opened) = fresh(backend).await;
    commit_ok(&mut opened, &[create("s_id", "p", 1, 5)]).await;
    // Known to the writer, as a session it created is.
    assert_eq!(opened.writer.latest_seq(&sid("s_id")).await.ok(), Some(6));

    // The first step of an erase, as it stands while its events go in batches.
    raw(&db, "DELETE FROM sessions WHERE id = 's_id'").await;
    raw(
        &db,
        "INSERT INTO erasing (session_id, since_ms) VALUES ('s_id', 0)",
    )
    .await;
    let refused = opened.writer.commit(vec![create("s_id", "p", 2, 1)]).await;
    assert!(
        matches!(refused.as_slice(), [Err(StoreError::Erasing(_))]),
        "a new life while the old one is erased: {refused:?}"
    );
    assert_eq!(
        opened
            .reader
            .get_session("p", &sid("s_id"))
            .await
            .expect("read"),
        None,
        "nothing of the refused life is written"
    );

    let mut steps = 0;
    while opened.eraser.finish_erasing(2).await.expect("finish") > 0 {
        steps += 1;
        assert!(steps < 100, "finishing never ends");
    }
    // Free now, also for a writer that remembers the old life.
    commit_ok(&mut opened, &[create("s_id", "p", 2, 1)]).await;
    let new_life = opened
        .reader
        .events_since(&sid("s_id"), 0, 100)
        .await
        .expect("read");
    assert_eq!(new_life.len(), 2);

    // An erase decided on the old life (created at 1) leaves the new one.
    let stale = opened
        .eraser
        .delete_session("p", &sid("s_id"), Some(1), 10)
        .await
        .expect("delete");
    assert_eq!(stale, None);
    assert_eq!(
        opened
            .reader
            .events_since(&sid("s_id"), 0, 100)
            .await
            .expect("read")
            .len(),
        2
    );
    let erased = opened
        .eraser
        .delete_session("p", &sid("s_id"), Some(2), 10)
        .await
        .expect("delete");
    assert!(erased.is_some(), "the life it names is erased");
}

backends!(an_id_lives_one_life_at_a_time);
