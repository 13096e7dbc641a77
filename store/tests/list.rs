//! session.list: newest first, keyset cursor, include_closed.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

use common::Backend;

use std::collections::HashSet;

use tether_protocol::SessionStatus;
use tether_store::{SessionPatch, StoreError, WriteOp};

use common::{create, sid};

/// Seeds 23 sessions in profile `p` (with created_at ties) plus noise in profile `q`, and closes
/// every fifth one. Returns the ids of `p` newest first.
async fn seed(store: &mut tether_store::Opened) -> Vec<String> {
    let mut ops = Vec::new();
    let mut expected = Vec::new();
    for i in 0..23u32 {
        // Three sessions per millisecond: ties are broken by id, descending.
        let id = format!("s_{i:02}");
        ops.push(create(&id, "p", i64::from(i / 3), 0));
        expected.push((i / 3, id));
    }
    for i in 0..5 {
        ops.push(create(&format!("q_{i}"), "q", 100, 0));
    }
    common::commit_ok(store, &ops).await;
    let closes: Vec<WriteOp> = (0..23)
        .step_by(5)
        .map(|i| WriteOp::Patch {
            session_id: sid(&format!("s_{i:02}")),
            patch: SessionPatch {
                status: Some(SessionStatus::Closed),
                ..Default::default()
            },
        })
        .collect();
    common::commit_ok(store, &closes).await;
    expected.sort_by(|a, b| b.cmp(a));
    expected.into_iter().map(|(_, id)| id).collect()
}

async fn walk(store: &tether_store::Opened, include_closed: bool, limit: u32) -> Vec<String> {
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let (page, next) = store
            .reader
            .list_sessions("p", include_closed, cursor.as_deref(), limit)
            .await
            .unwrap();
        assert!(page.len() <= limit as usize);
        assert!(page.iter().all(|s| s.profile == "p"));
        seen.extend(page.iter().map(|s| s.id.as_str().to_owned()));
        match next {
            Some(c) => {
                assert_eq!(
                    page.len(),
                    limit as usize,
                    "a cursor only when the page is full"
                );
                cursor = Some(c);
            }
            None => break,
        }
    }
    seen
}

async fn pages_visit_every_session_once_newest_first(b: Backend) {
    let (_db, mut store) = common::fresh(b).await;
    let all = seed(&mut store).await;
    let open: Vec<String> = all
        .iter()
        .filter(|id| id[2..].parse::<u32>().unwrap() % 5 != 0)
        .cloned()
        .collect();
    for limit in [1, 2, 4, 5, 22, 23, 24, 500] {
        let with_closed = walk(&store, true, limit).await;
        assert_eq!(with_closed, all, "limit {limit}");
        assert_eq!(with_closed.iter().collect::<HashSet<_>>().len(), all.len());
        assert_eq!(walk(&store, false, limit).await, open, "limit {limit}");
    }
}

async fn exact_fit_has_no_next_cursor(b: Backend) {
    let (_db, mut store) = common::fresh(b).await;
    let all = seed(&mut store).await;
    let (page, next) = store
        .reader
        .list_sessions("p", true, None, all.len() as u32)
        .await
        .unwrap();
    assert_eq!(page.len(), all.len());
    assert_eq!(next, None);
    let (page, next) = store
        .reader
        .list_sessions("nobody", true, None, 10)
        .await
        .unwrap();
    assert!(page.is_empty());
    assert_eq!(next, None);
}

/// Pages bounded in bytes end after the row that passes the bound (so each
/// holds at least one), and their cursors walk every session once.
async fn byte_bounded_pages_end_after_the_row_that_passes_and_go_on_exactly(b: Backend) {
    let (_db, mut store) = common::fresh(b).await;
    let all = seed(&mut store).await;
    // Every row counts its title ("title of s_NN") and id ("s_NN"): 17 bytes.
    for (max, per_page) in [
        (0usize, 1usize),
        (16, 1),
        (17, 2),
        (33, 2),
        (34, 3),
        (10_000, 23),
    ] {
        let mut seen = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let (page, next) = store
                .reader
                .list_sessions_within("p", true, cursor.as_deref(), 500, max)
                .await
                .unwrap();
            assert!(!page.is_empty());
            assert!(page.len() <= per_page, "max {max}: {} rows", page.len());
            seen.extend(page.iter().map(|s| s.id.as_str().to_owned()));
            match next {
                Some(c) => {
                    assert_eq!(
                        page.len(),
                        per_page,
                        "max {max}: a short page with a cursor"
                    );
                    assert_eq!(c, tether_store::list_cursor_after(page.last().unwrap()));
                    cursor = Some(c);
                }
                None => break,
            }
        }
        assert_eq!(seen, all, "max {max}");
    }
}

async fn bad_cursor_and_zero_limit_are_invalid(b: Backend) {
    let (_db, store) = common::fresh(b).await;
    let err = store
        .reader
        .list_sessions("p", false, Some("not a cursor"), 10)
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Invalid(_)), "{err:?}");
    let err = store
        .reader
        .list_sessions("p", false, None, 0)
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Invalid(_)), "{err:?}");
}

async fn open_sessions_are_counted_across_profiles(b: Backend) {
    let (_db, mut store) = common::fresh(b).await;
    assert_eq!(store.reader.count_open_sessions().await.unwrap(), 0);
    seed(&mut store).await;
    // 23 in `p` of which 5 closed (0, 5, 10, 15, 20), 5 in `q`.
    assert_eq!(store.reader.count_open_sessions().await.unwrap(), 18 + 5);
}

backends!(
    pages_visit_every_session_once_newest_first,
    exact_fit_has_no_next_cursor,
    byte_bounded_pages_end_after_the_row_that_passes_and_go_on_exactly,
    bad_cursor_and_zero_limit_are_invalid,
    open_sessions_are_counted_across_profiles,
);
