//! The handoff queue: its compare-and-set transitions, profile scoping, and claims that race.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

use common::Backend;

use std::collections::HashSet;
use std::sync::Arc;

use tether_protocol::{HandoffId, HandoffState, SessionStatus};
use tether_store::{
    CompleteOutcome, FailOutcome, HandoffRow, HandoffStore, Opened, RequestOutcome, SessionPatch,
    WriteOp, MAX_HANDOFF_ERROR_BYTES,
};

use common::{create, sid};

/// A store with the sessions `ids` in `profile`.
async fn store_with(b: Backend, profile: &str, ids: &[&str]) -> (common::Db, Opened) {
    let (db, mut store) = common::fresh(b).await;
    let ops: Vec<_> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| create(id, profile, 1_000 + i as i64, 0))
        .collect();
    common::commit_ok(&mut store, &ops).await;
    (db, store)
}

async fn requested(h: &dyn HandoffStore, profile: &str, session: &str, target: &str) -> HandoffRow {
    match h.request(profile, &sid(session), target).await.unwrap() {
        RequestOutcome::Requested(row) => row,
        other => panic!("request of {session} refused: {other:?}"),
    }
}

async fn a_handoff_walks_pending_running_completed_and_then_a_new_one_may_start(b: Backend) {
    let (_db, store) = store_with(b, "default", &["s_1"]).await;
    let h = store.handoffs.as_ref();
    assert_eq!(h.latest("default", &sid("s_1")).await.unwrap(), None);

    let first = requested(h, "default", "s_1", "phone").await;
    assert!(first.id.as_str().starts_with("h_"), "{:?}", first.id);
    assert_eq!(first.state, HandoffState::Pending);
    assert_eq!(first.target, "phone");
    assert_eq!(
        h.latest("default", &sid("s_1")).await.unwrap(),
        Some(first.clone())
    );

    // One in flight per session: refused while pending...
    match h.request("default", &sid("s_1"), "laptop").await.unwrap() {
        RequestOutcome::InFlight(Some(active)) => assert_eq!(active.id, first.id),
        other => panic!("second request while pending: {other:?}"),
    }
    // ...and completing a pending one is refused without changing it.
    assert_eq!(
        h.complete("default", &first.id).await.unwrap(),
        CompleteOutcome::NotRunning(HandoffState::Pending)
    );

    let claimed = h.claim("default", "phone").await.unwrap().expect("claimed");
    assert_eq!(claimed.id, first.id);
    assert_eq!(claimed.state, HandoffState::Running);
    assert_eq!(h.claim("default", "phone").await.unwrap(), None);
    // ...and while running.
    assert!(matches!(
        h.request("default", &sid("s_1"), "phone").await.unwrap(),
        RequestOutcome::InFlight(Some(_))
    ));

    match h.complete("default", &first.id).await.unwrap() {
        CompleteOutcome::Completed(row) => assert_eq!(row.state, HandoffState::Completed),
        other => panic!("complete: {other:?}"),
    }
    // Completing twice is refused: the compare-and-set sees `completed`.
    assert_eq!(
        h.complete("default", &first.id).await.unwrap(),
        CompleteOutcome::NotRunning(HandoffState::Completed)
    );

    // Finished: a new request is allowed and becomes the latest.
    let second = requested(h, "default", "s_1", "laptop").await;
    assert_ne!(second.id, first.id);
    let latest = h.latest("default", &sid("s_1")).await.unwrap().unwrap();
    assert_eq!(latest.id, second.id);
    assert_eq!(latest.state, HandoffState::Pending);
}

async fn fail_honours_only_if_pending_and_keeps_at_most_500_bytes_of_error(b: Backend) {
    let (_db, store) = store_with(b, "default", &["s_1", "s_2", "s_3"]).await;
    let h = store.handoffs.as_ref();

    // only_if_pending never fails a running handoff.
    let running = requested(h, "default", "s_1", "phone").await;
    h.claim("default", "phone").await.unwrap().expect("claimed");
    assert_eq!(
        h.fail("default", &running.id, "nope", true).await.unwrap(),
        FailOutcome::Unchanged(HandoffState::Running)
    );
    assert_eq!(
        h.latest("default", &sid("s_1"))
            .await
            .unwrap()
            .unwrap()
            .state,
        HandoffState::Running
    );
    // Without it, a running one fails; the error is cut on a character boundary: 499 ASCII
    // bytes and then a 2-byte character that would end at byte 501.
    let long = format!("{}é{}", "x".repeat(499), "y".repeat(200));
    match h.fail("default", &running.id, &long, false).await.unwrap() {
        FailOutcome::Failed(row) => {
            assert_eq!(row.state, HandoffState::Failed);
            assert_eq!(row.error.as_deref(), Some("x".repeat(499).as_str()));
        }
        other => panic!("fail running: {other:?}"),
    }
    // A finished handoff is reported, not changed.
    assert_eq!(
        h.fail("default", &running.id, "again", false)
            .await
            .unwrap(),
        FailOutcome::Unchanged(HandoffState::Failed)
    );
    let stored = h.latest("default", &sid("s_1")).await.unwrap().unwrap();
    assert_eq!(stored.error.as_deref().map(str::len), Some(499));

    // only_if_pending fails a pending one; an error of exactly the limit is kept whole.
    let pending = requested(h, "default", "s_2", "phone").await;
    let exact = "é".repeat(MAX_HANDOFF_ERROR_BYTES / 2);
    match h.fail("default", &pending.id, &exact, true).await.unwrap() {
        FailOutcome::Failed(row) => assert_eq!(row.error.as_deref(), Some(exact.as_str())),
        other => panic!("fail pending: {other:?}"),
    }
    // A failed handoff is never claimed.
    assert_eq!(h.claim("default", "phone").await.unwrap(), None);

    // Completed handoffs cannot be failed.
    let done = requested(h, "default", "s_3", "phone").await;
    h.claim("default", "phone").await.unwrap().expect("claimed");
    assert!(matches!(
        h.complete("default", &done.id).await.unwrap(),
        CompleteOutcome::Completed(_)
    ));
    assert_eq!(
        h.fail("default", &done.id, "late", false).await.unwrap(),
        FailOutcome::Unchanged(HandoffState::Completed)
    );

    let unknown = HandoffId::from("h_unknown");
    assert_eq!(
        h.fail("default", &unknown, "x", false).await.unwrap(),
        FailOutcome::NotFound
    );
    assert_eq!(
        h.complete("default", &unknown).await.unwrap(),
        CompleteOutcome::NotFound
    );
}

async fn every_call_is_scoped_by_profile(b: Backend) {
    let (_db, store) = store_with(b, "alice", &["s_a"]).await;
    let h = store.handoffs.as_ref();

    assert_eq!(
        h.request("bob", &sid("s_a"), "phone").await.unwrap(),
        RequestOutcome::NoSession
    );
    assert_eq!(
        h.request("alice", &sid("s_missing"), "phone")
            .await
            .unwrap(),
        RequestOutcome::NoSession
    );
    let row = requested(h, "alice", "s_a", "phone").await;
    assert_eq!(row.profile, "alice");

    // Bob sees none of it, and his calls change nothing.
    assert_eq!(h.claim("bob", "phone").await.unwrap(), None);
    assert_eq!(h.latest("bob", &sid("s_a")).await.unwrap(), None);
    assert_eq!(
        h.fail("bob", &row.id, "x", false).await.unwrap(),
        FailOutcome::NotFound
    );
    assert_eq!(
        h.complete("bob", &row.id).await.unwrap(),
        CompleteOutcome::NotFound
    );
    assert_eq!(
        h.latest("alice", &sid("s_a")).await.unwrap().unwrap().state,
        HandoffState::Pending
    );

    let claimed = h
        .claim("alice", "phone")
        .await
        .unwrap()
        .expect("alice claims");
    assert_eq!(claimed.id, row.id);
    assert_eq!(
        h.complete("bob", &row.id).await.unwrap(),
        CompleteOutcome::NotFound
    );
}

async fn a_closed_session_cannot_be_handed_off(b: Backend) {
    let (_db, mut store) = store_with(b, "default", &["s_1"]).await;
    let closing = WriteOp::Append {
        session_id: sid("s_1"),
        events: common::evs(2, 1),
        patch: SessionPatch {
            status: Some(SessionStatus::Closed),
            ..SessionPatch::default()
        },
    };
    common::commit_ok(&mut store, &[closing]).await;
    assert_eq!(
        store
            .handoffs
            .request("default", &sid("s_1"), "phone")
            .await
            .unwrap(),
        RequestOutcome::SessionClosed
    );
    assert_eq!(
        store.handoffs.latest("default", &sid("s_1")).await.unwrap(),
        None
    );
}

async fn claims_take_the_oldest_pending_handoff_of_their_target(b: Backend) {
    let (_db, store) = store_with(b, "default", &["s_1", "s_2", "s_3", "s_4"]).await;
    let h = store.handoffs.as_ref();
    let a = requested(h, "default", "s_1", "phone").await;
    let other = requested(h, "default", "s_2", "laptop").await;
    let b = requested(h, "default", "s_3", "phone").await;
    let c = requested(h, "default", "s_4", "phone").await;

    let order: Vec<_> = [
        h.claim("default", "phone").await.unwrap(),
        h.claim("default", "phone").await.unwrap(),
        h.claim("default", "phone").await.unwrap(),
    ]
    .into_iter()
    .map(|r| r.expect("claimed").id)
    .collect();
    assert_eq!(order, vec![a.id, b.id, c.id]);
    assert_eq!(h.claim("default", "phone").await.unwrap(), None);
    assert_eq!(
        h.claim("default", "laptop").await.unwrap().map(|r| r.id),
        Some(other.id)
    );
}

async fn handoffs_survive_reopening_the_store(b: Backend) {
    let (db, store) = store_with(b, "default", &["s_1"]).await;
    let row = requested(store.handoffs.as_ref(), "default", "s_1", "phone").await;
    drop(store);
    let reopened = db.open().await;
    assert_eq!(
        reopened
            .handoffs
            .latest("default", &sid("s_1"))
            .await
            .unwrap(),
        Some(row.clone())
    );
    let claimed = reopened.handoffs.claim("default", "phone").await.unwrap();
    assert_eq!(claimed.map(|r| r.id), Some(row.id));
}

/// Claims from two independently opened stores on one file (two connections, as two gateways
/// would have), many at once, while the event writer commits: every handoff is claimed
/// exactly once and nothing fails.
async fn concurrent_claims_from_two_connections_never_share_a_handoff(b: Backend) {
    const SESSIONS: usize = 60;
    let ids: Vec<String> = (0..SESSIONS).map(|i| format!("s_{i:03}")).collect();
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    let (db, mut store) = store_with(b, "default", &refs).await;
    let other = db.other_handoffs().await;
    let mut expected = HashSet::new();
    for id in &ids {
        expected.insert(
            requested(store.handoffs.as_ref(), "default", id, "worker")
                .await
                .id,
        );
    }

    let stores: [Arc<dyn HandoffStore>; 2] = [store.handoffs.clone(), other];
    let mut claimers = Vec::new();
    for k in 0..8 {
        let h = stores[k % 2].clone();
        claimers.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            while let Some(row) = h.claim("default", "worker").await.expect("claim") {
                assert_eq!(row.state, HandoffState::Running);
                mine.push(row.id);
            }
            mine
        }));
    }
    // The event writer keeps committing meanwhile: both sides take turns on the write lock.
    for id in ids.iter().take(20) {
        common::commit_ok(&mut store, &[common::append(id, 2, 5, 0)]).await;
    }
    let mut seen = Vec::new();
    for c in claimers {
        seen.extend(c.await.unwrap());
    }
    let unique: HashSet<_> = seen.iter().cloned().collect();
    assert_eq!(seen.len(), SESSIONS, "a handoff was claimed twice");
    assert_eq!(unique, expected);
}

/// Requests for one session racing from two connections: exactly one is accepted.
async fn concurrent_requests_for_one_session_admit_exactly_one(b: Backend) {
    let (db, store) = store_with(b, "default", &["s_1"]).await;
    let other = db.other_handoffs().await;
    let stores: [Arc<dyn HandoffStore>; 2] = [store.handoffs.clone(), other];
    let mut tasks = Vec::new();
    for k in 0..10 {
        let h = stores[k % 2].clone();
        tasks.push(tokio::spawn(async move {
            h.request("default", &sid("s_1"), "phone")
                .await
                .expect("request")
        }));
    }
    let mut accepted = 0;
    for t in tasks {
        match t.await.unwrap() {
            RequestOutcome::Requested(_) => accepted += 1,
            RequestOutcome::InFlight(_) => {}
            other => panic!("the session exists and is open: {other:?}"),
        }
    }
    assert_eq!(accepted, 1);
}

backends!(
    a_handoff_walks_pending_running_completed_and_then_a_new_one_may_start,
    fail_honours_only_if_pending_and_keeps_at_most_500_bytes_of_error,
    every_call_is_scoped_by_profile,
    a_closed_session_cannot_be_handed_off,
    claims_take_the_oldest_pending_handoff_of_their_target,
    handoffs_survive_reopening_the_store,
    concurrent_claims_from_two_connections_never_share_a_handoff,
    concurrent_requests_for_one_session_admit_exactly_one,
);
