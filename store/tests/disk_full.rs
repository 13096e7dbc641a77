//! Disk full (SQLITE_FULL, provoked with `PRAGMA max_page_count`): the op fails with 5070 and
//! nothing of it is visible; the other ops of its batch are unaffected.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

use tether_store::testing::open_sqlite_writer_with_page_headroom;
use tether_store::{EventRow, SessionPatch, StoreError, WriteOp};

use common::{append, create, new_session, sid};

/// `n` events with ~2 KiB payloads each, from seq `first`: a few hundred of them need far more
/// pages than the headroom the tests allow.
fn fat_events(first: u64, n: u64) -> Vec<EventRow> {
    (first..first + n)
        .map(|seq| EventRow {
            payload: serde_json::json!({ "text": "x".repeat(2048) }).to_string(),
            ..common::ev(seq, "message.user")
        })
        .collect()
}

fn assert_full(result: &Result<(), StoreError>) {
    match result {
        Err(e @ StoreError::Full(_)) => assert_eq!(e.code(), 5070),
        other => panic!("expected Full, got {other:?}"),
    }
}

#[tokio::test]
async fn a_seeded_create_that_does_not_fit_leaves_nothing() {
    let (_dir, cfg, store) = common::fresh_sqlite().await;
    let mut writer = open_sqlite_writer_with_page_headroom(&cfg, 4)
        .await
        .unwrap();
    let mut events = vec![common::ev(1, "session.created")];
    events.extend(fat_events(2, 300));
    let results = writer
        .commit(vec![WriteOp::CreateSession {
            session: new_session("s_big", "default", 1),
            events,
        }])
        .await;
    assert_full(&results[0]);
    assert_eq!(
        store
            .reader
            .get_session("default", &sid("s_big"))
            .await
            .unwrap(),
        None
    );
    assert!(store
        .reader
        .events_since(&sid("s_big"), 0, 1000)
        .await
        .unwrap()
        .is_empty());
    let (listed, _) = store
        .reader
        .list_sessions("default", true, None, 10)
        .await
        .unwrap();
    assert!(listed.is_empty());
}

#[tokio::test]
async fn a_full_append_fails_alone_and_the_rest_of_the_batch_commits() {
    let (_dir, cfg, mut store) = common::fresh_sqlite().await;
    common::commit_ok(
        &mut store,
        &[
            create("s_a", "default", 1, 0),
            create("s_b", "default", 2, 0),
        ],
    )
    .await;
    let mut writer = open_sqlite_writer_with_page_headroom(&cfg, 4)
        .await
        .unwrap();
    let fat = WriteOp::Append {
        session_id: sid("s_b"),
        events: fat_events(2, 300),
        patch: Default::default(),
    };
    let results = writer
        .commit(vec![append("s_a", 2, 1, 1), fat, append("s_a", 3, 1, 2)])
        .await;
    assert_eq!(results[0], Ok(()));
    assert_full(&results[1]);
    assert_eq!(results[2], Ok(()));

    let b = store
        .reader
        .get_session("default", &sid("s_b"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(b.latest_seq, 1);
    assert_eq!(
        store
            .reader
            .events_since(&sid("s_b"), 0, 1000)
            .await
            .unwrap()
            .len(),
        1
    );
    let a = store
        .reader
        .get_session("default", &sid("s_a"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((a.latest_seq, a.message_count), (3, 2));

    // The full writer keeps working for what fits, and the seq it refused is still free.
    assert_eq!(writer.latest_seq(&sid("s_b")).await.unwrap(), 1);
    assert_eq!(
        writer.commit(vec![append("s_b", 2, 1, 1)]).await,
        vec![Ok(())]
    );
}

/// A single-row statement that hits SQLITE_FULL makes SQLite roll back the whole transaction, not
/// just the statement, taking the batch's earlier ops with it: the writer must notice and commit
/// them anyway.
#[tokio::test]
async fn when_sqlite_drops_the_whole_transaction_the_good_ops_still_commit() {
    let (_dir, cfg, mut store) = common::fresh_sqlite().await;
    common::commit_ok(
        &mut store,
        &[
            create("s_a", "default", 1, 0),
            create("s_b", "default", 2, 0),
        ],
    )
    .await;
    let mut writer = open_sqlite_writer_with_page_headroom(&cfg, 4)
        .await
        .unwrap();
    let mut one = fat_events(2, 1);
    one[0].payload = format!("\"{}\"", "y".repeat(200_000));
    let fat_event = WriteOp::Append {
        session_id: sid("s_b"),
        events: one,
        patch: Default::default(),
    };
    let fat_title = WriteOp::Patch {
        session_id: sid("s_b"),
        patch: SessionPatch {
            title: Some("z".repeat(200_000)),
            ..Default::default()
        },
    };
    let results = writer
        .commit(vec![
            append("s_a", 2, 1, 1),
            fat_event,
            fat_title,
            append("s_a", 3, 1, 2),
        ])
        .await;
    assert_eq!(results[0], Ok(()));
    assert_full(&results[1]);
    assert_full(&results[2]);
    assert_eq!(results[3], Ok(()));

    let a = store
        .reader
        .get_session("default", &sid("s_a"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((a.latest_seq, a.message_count), (3, 2));
    assert_eq!(
        store
            .reader
            .events_since(&sid("s_a"), 0, 10)
            .await
            .unwrap()
            .len(),
        3
    );
    let b = store
        .reader
        .get_session("default", &sid("s_b"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((b.latest_seq, b.title.as_str()), (1, "title of s_b"));
    assert_eq!(
        store
            .reader
            .events_since(&sid("s_b"), 0, 10)
            .await
            .unwrap()
            .len(),
        1
    );
}
