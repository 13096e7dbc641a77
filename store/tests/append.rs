//! Appends: group commit, contiguity, per-op isolation, replay reads.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

use common::Backend;

use tether_protocol::SessionStatus;
use tether_store::{EventRow, SessionPatch, StoreError, WriteOp};

use common::{append, create, ev, evs, sid};

fn seqs(events: &[EventRow]) -> Vec<u64> {
    events.iter().map(|e| e.seq).collect()
}

async fn one_commit_appends_to_several_sessions(b: Backend) {
    let (_db, mut store) = common::fresh(b).await;
    common::commit_ok(
        &mut store,
        &[
            create("s_a", "default", 1, 0),
            create("s_b", "default", 2, 0),
        ],
    )
    .await;
    // Two appends to the same session in one batch, plus one to another.
    common::commit_ok(
        &mut store,
        &[
            append("s_a", 2, 3, 3),
            append("s_b", 2, 1, 1),
            append("s_a", 5, 2, 5),
        ],
    )
    .await;

    let a = store
        .reader
        .get_session("default", &sid("s_a"))
        .await
        .unwrap()
        .unwrap();
    let b = store
        .reader
        .get_session("default", &sid("s_b"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((a.latest_seq, a.message_count), (6, 5));
    assert_eq!((b.latest_seq, b.message_count), (2, 1));
    assert_eq!(store.writer.latest_seq(&sid("s_a")).await.unwrap(), 6);
    assert_eq!(store.writer.latest_seq(&sid("s_b")).await.unwrap(), 2);
    assert_eq!(store.writer.latest_seq(&sid("s_none")).await.unwrap(), 0);

    let all = store
        .reader
        .events_since(&sid("s_a"), 0, 100)
        .await
        .unwrap();
    assert_eq!(seqs(&all), vec![1, 2, 3, 4, 5, 6]);
    assert_eq!(
        all[1..],
        evs(2, 5)[..],
        "events come back exactly as written"
    );
}

async fn events_since_pages_exactly(b: Backend) {
    let (_db, mut store) = common::fresh(b).await;
    // 300 events: more than one INSERT chunk.
    common::commit_ok(
        &mut store,
        &[create("s_1", "default", 1, 0), append("s_1", 2, 299, 0)],
    )
    .await;
    let id = sid("s_1");
    let mut seen = Vec::new();
    let mut after = 0;
    loop {
        let page = store.reader.events_since(&id, after, 7).await.unwrap();
        assert!(page.len() <= 7);
        let Some(last) = page.last() else { break };
        after = last.seq;
        seen.extend(seqs(&page));
    }
    assert_eq!(seen, (1..=300).collect::<Vec<_>>());
    assert_eq!(
        seqs(&store.reader.events_since(&id, 295, 100).await.unwrap()),
        vec![296, 297, 298, 299, 300]
    );
    assert!(store
        .reader
        .events_since(&id, 300, 100)
        .await
        .unwrap()
        .is_empty());
    assert!(store
        .reader
        .events_since(&id, 0, 0)
        .await
        .unwrap()
        .is_empty());
    assert!(store
        .reader
        .events_since(&id, u64::MAX, 10)
        .await
        .unwrap()
        .is_empty());
    assert!(store
        .reader
        .events_since(&sid("s_x"), 0, 10)
        .await
        .unwrap()
        .is_empty());
}

async fn a_bad_op_fails_alone(b: Backend) {
    let (_db, mut store) = common::fresh(b).await;
    common::commit_ok(
        &mut store,
        &[
            create("s_a", "default", 1, 0),
            create("s_b", "default", 2, 0),
        ],
    )
    .await;
    let gap_inside = WriteOp::Append {
        session_id: sid("s_b"),
        events: vec![ev(2, "message.user"), ev(4, "message.user")],
        patch: SessionPatch {
            status: Some(SessionStatus::Running),
            ..SessionPatch::default()
        },
    };
    let results = store
        .writer
        .commit(vec![
            append("s_a", 2, 2, 2),
            gap_inside,
            append("s_b", 3, 1, 1), // gap after latest_seq 1
            append("s_a", 2, 1, 9), // seq 2 already used by the first op
            append("s_404", 1, 1, 1),
            append("s_a", 4, 2, 4),
        ])
        .await;
    assert_eq!(results[0], Ok(()));
    assert!(
        matches!(results[1], Err(StoreError::Invalid(_))),
        "{:?}",
        results[1]
    );
    assert!(
        matches!(results[2], Err(StoreError::Invalid(_))),
        "{:?}",
        results[2]
    );
    assert!(
        matches!(results[3], Err(StoreError::Conflict(_))),
        "{:?}",
        results[3]
    );
    assert!(
        matches!(results[4], Err(StoreError::Invalid(_))),
        "{:?}",
        results[4]
    );
    assert_eq!(results[5], Ok(()));

    let a = store
        .reader
        .get_session("default", &sid("s_a"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((a.latest_seq, a.message_count), (5, 4));
    assert_eq!(
        seqs(
            &store
                .reader
                .events_since(&sid("s_a"), 0, 100)
                .await
                .unwrap()
        ),
        vec![1, 2, 3, 4, 5]
    );
    // Nothing of the failed ops: no events, and the patch of op 1 was not applied either.
    let b = store
        .reader
        .get_session("default", &sid("s_b"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((b.latest_seq, b.status), (1, SessionStatus::Idle));
    assert_eq!(
        seqs(
            &store
                .reader
                .events_since(&sid("s_b"), 0, 100)
                .await
                .unwrap()
        ),
        vec![1]
    );
}

async fn an_append_with_no_events_only_patches(b: Backend) {
    let (_db, mut store) = common::fresh(b).await;
    common::commit_ok(&mut store, &[create("s_1", "default", 1, 0)]).await;
    common::commit_ok(&mut store, &[append("s_1", 2, 0, 4)]).await;
    let row = store
        .reader
        .get_session("default", &sid("s_1"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((row.latest_seq, row.message_count), (1, 4));
}

async fn an_empty_batch_is_fine(b: Backend) {
    let (_db, mut store) = common::fresh(b).await;
    assert!(store.writer.commit(vec![]).await.is_empty());
}

async fn a_cancelled_commit_leaves_the_writer_usable(b: Backend) {
    let (_db, mut store) = common::fresh(b).await;
    common::commit_ok(&mut store, &[create("s_1", "default", 1, 0)]).await;
    let big: Vec<WriteOp> = (0..50)
        .map(|i| append("s_1", 2 + i * 100, 100, 0))
        .collect();
    // Drop the commit future at its first suspension point, half-way through whatever it did.
    {
        let fut = store.writer.commit(big);
        let _ = tokio::time::timeout(std::time::Duration::from_micros(1), fut).await;
    }
    // Either the whole batch made it or none of it; either way the writer goes on.
    let latest = store.writer.latest_seq(&sid("s_1")).await.unwrap();
    assert!(latest == 1 || latest == 5001, "latest_seq {latest}");
    common::commit_ok(&mut store, &[append("s_1", latest + 1, 3, 0)]).await;
    let events = store
        .reader
        .events_since(&sid("s_1"), 0, 10_000)
        .await
        .unwrap();
    assert_eq!(seqs(&events), (1..=latest + 3).collect::<Vec<_>>());
}

/// An op the database itself refuses (PostgreSQL's text cannot hold a NUL byte; SQLite's can)
/// fails alone: the rest of its batch commits, and nothing of it is written.
async fn an_op_the_database_refuses_fails_alone(b: Backend) {
    let (db, mut store) = common::fresh(b).await;
    common::commit_ok(
        &mut store,
        &[
            create("s_a", "default", 1, 0),
            create("s_b", "default", 2, 0),
        ],
    )
    .await;
    let mut bad = evs(2, 2);
    bad[1].payload = "{\"text\":\"nul \u{0}\"}".to_string();
    let results = store
        .writer
        .commit(vec![
            append("s_a", 2, 2, 2),
            WriteOp::Append {
                session_id: sid("s_b"),
                events: bad,
                patch: SessionPatch::default(),
            },
            append("s_a", 4, 1, 3),
            append("s_b", 2, 1, 1),
        ])
        .await;
    assert_eq!(results[0], Ok(()));
    assert_eq!(results[2], Ok(()));
    let b_latest = if db.is_postgres() {
        assert!(
            matches!(results[1], Err(StoreError::Invalid(_))),
            "{:?}",
            results[1]
        );
        // With the NUL append refused, seq 2 of s_b was still free.
        assert_eq!(results[3], Ok(()));
        2
    } else {
        assert_eq!(results[1], Ok(()));
        assert!(matches!(results[3], Err(StoreError::Conflict(_))));
        3
    };
    let a = store.reader.events_since(&sid("s_a"), 0, 10).await.unwrap();
    assert_eq!(seqs(&a), vec![1, 2, 3, 4]);
    let bs = store.reader.events_since(&sid("s_b"), 0, 10).await.unwrap();
    assert_eq!(seqs(&bs), (1..=b_latest).collect::<Vec<_>>());
}

backends!(
    an_op_the_database_refuses_fails_alone,
    one_commit_appends_to_several_sessions,
    events_since_pages_exactly,
    a_bad_op_fails_alone,
    an_append_with_no_events_only_patches,
    an_empty_batch_is_fine,
    a_cancelled_commit_leaves_the_writer_usable,
);
