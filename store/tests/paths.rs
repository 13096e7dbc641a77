//! The writer has three ways to commit a batch (a lone op, the bulk fast path, savepoint per op);
//! which one runs must never show. The same ops give the same results and the same rows
//! whichever way they are committed.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

use common::Backend;

use serde_json::json;
use tether_protocol::SessionStatus;
use tether_store::{EventRow, Opened, SessionPatch, SessionRow, StoreError, WriteOp};

use common::{create, ev, evs, sid};

fn append(id: &str, events: Vec<EventRow>, patch: SessionPatch) -> WriteOp {
    WriteOp::Append {
        session_id: sid(id),
        events,
        patch,
    }
}

/// A batch mixing good ops, refused ops, and several ops on one session whose effects chain.
fn scenario() -> Vec<WriteOp> {
    let marker = json!({"turn_id": "t_1"});
    vec![
        append(
            "s_a",
            evs(2, 2),
            SessionPatch {
                status: Some(SessionStatus::Running),
                turn_marker: Some(Some(marker)),
                ..Default::default()
            },
        ),
        append(
            "s_b",
            vec![ev(2, "message.user"), ev(4, "message.user")],
            SessionPatch::default(),
        ),
        WriteOp::Patch {
            session_id: sid("s_a"),
            patch: SessionPatch {
                title: Some("T".into()),
                ..Default::default()
            },
        },
        append(
            "s_a",
            evs(4, 1),
            SessionPatch {
                turn_marker: Some(None),
                message_count: Some(3),
                ..Default::default()
            },
        ),
        append("s_a", evs(4, 2), SessionPatch::default()),
        append("s_404", evs(1, 1), SessionPatch::default()),
        WriteOp::Patch {
            session_id: sid("s_b"),
            patch: SessionPatch {
                status: Some(SessionStatus::Parked),
                updated_at_ms: Some(77),
                ..Default::default()
            },
        },
        append(
            "s_b",
            evs(2, 2),
            SessionPatch {
                message_count: Some(2),
                ..Default::default()
            },
        ),
        append("s_b", evs(3, 1), SessionPatch::default()),
        WriteOp::Patch {
            session_id: sid("s_404"),
            patch: SessionPatch::default(),
        },
    ]
}

async fn state(store: &Opened) -> Vec<(SessionRow, Vec<EventRow>)> {
    let mut out = Vec::new();
    for id in ["s_a", "s_b"] {
        let row = store
            .reader
            .get_session("default", &sid(id))
            .await
            .unwrap()
            .unwrap();
        let events = store.reader.events_since(&sid(id), 0, 100).await.unwrap();
        out.push((row, events));
    }
    assert_eq!(
        store
            .reader
            .get_session("default", &sid("s_404"))
            .await
            .unwrap(),
        None
    );
    out
}

/// Runs the scenario with `run` on a fresh store; returns its results and the final state.
async fn with<F>(
    b: &Backend,
    run: F,
) -> (
    Vec<Result<(), StoreError>>,
    Vec<(SessionRow, Vec<EventRow>)>,
)
where
    F: AsyncFnOnce(&mut Opened, Vec<WriteOp>) -> Vec<Result<(), StoreError>>,
{
    let (_db, mut store) = common::fresh(b.clone()).await;
    common::commit_ok(
        &mut store,
        &[
            create("s_a", "default", 1, 0),
            create("s_b", "default", 2, 0),
        ],
    )
    .await;
    let results = run(&mut store, scenario()).await;
    (results, state(&store).await)
}

async fn fast_slow_and_single_op_commits_agree(b: Backend) {
    // Appends and patches only: the fast path.
    let fast = with(&b, async |store: &mut Opened, ops: Vec<WriteOp>| {
        store.writer.commit(ops).await
    })
    .await;
    // A create in the batch sends it down the savepoint path.
    let slow = with(&b, async |store: &mut Opened, ops: Vec<WriteOp>| {
        let mut batch = vec![create("s_c", "default", 3, 0)];
        batch.extend(ops);
        let mut results = store.writer.commit(batch).await;
        assert_eq!(results.remove(0), Ok(()));
        results
    })
    .await;
    // One op per commit.
    let single = with(&b, async |store: &mut Opened, ops: Vec<WriteOp>| {
        let mut results = Vec::new();
        for op in ops {
            results.extend(store.writer.commit(vec![op]).await);
        }
        results
    })
    .await;

    let (results, rows) = &fast;
    let kinds: Vec<&str> = results
        .iter()
        .map(|r| match r {
            Ok(()) => "ok",
            Err(StoreError::Invalid(_)) => "invalid",
            Err(StoreError::Conflict(_)) => "conflict",
            Err(_) => "other",
        })
        .collect();
    assert_eq!(
        kinds,
        ["ok", "invalid", "ok", "ok", "conflict", "invalid", "ok", "ok", "conflict", "invalid"]
    );
    let (a, a_events) = &rows[0];
    assert_eq!(a.latest_seq, 4);
    assert_eq!(a_events.len(), 4);
    assert_eq!(
        (a.status, a.title.as_str(), &a.turn_marker, a.message_count),
        (SessionStatus::Running, "T", &None, 3)
    );
    let (b, b_events) = &rows[1];
    assert_eq!(
        (b.latest_seq, b.status, b.updated_at_ms, b.message_count),
        (3, SessionStatus::Parked, 77, 2)
    );
    assert_eq!(b_events.len(), 3);

    assert_eq!(slow, fast, "slow path differs from fast path");
    assert_eq!(single, fast, "single-op commits differ from fast path");
}

backends!(fast_slow_and_single_op_commits_agree,);
