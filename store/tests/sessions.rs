//! Creating sessions and reading them back, profile-scoped.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

use common::Backend;

use serde_json::json;
use tether_protocol::SessionStatus;
use tether_store::{SessionPatch, StoreError, WriteOp};

use common::{create, ev, new_session, sid};

async fn created_session_is_visible_in_its_profile_only(b: Backend) {
    let (_db, mut store) = common::fresh(b).await;
    let mut session = new_session("s_1", "alice", 1_000);
    session.parent_session_id = Some(sid("s_0"));
    session.close_on_disconnect = true;
    session.engine_pin = Some(json!({"engine": "echo", "delay_ms": 5}));
    session.follow_profile_config = true;
    session.message_count = 2;
    let events = vec![
        ev(1, "session.created"),
        ev(2, "message.user"),
        ev(3, "message.complete"),
    ];
    common::commit_ok(
        &mut store,
        &[WriteOp::CreateSession {
            session,
            events: events.clone(),
        }],
    )
    .await;

    let row = store
        .reader
        .get_session("alice", &sid("s_1"))
        .await
        .unwrap()
        .expect("visible to its profile");
    assert_eq!(row.id, sid("s_1"));
    assert_eq!(row.profile, "alice");
    assert_eq!(row.title, "title of s_1");
    assert_eq!(row.status, SessionStatus::Idle);
    assert_eq!(row.parent_session_id, Some(sid("s_0")));
    assert_eq!(row.kind, "chat");
    assert_eq!(row.history_version, 0);
    assert!(row.close_on_disconnect);
    assert_eq!(
        row.engine_pin,
        Some(json!({"engine": "echo", "delay_ms": 5}))
    );
    assert!(row.follow_profile_config);
    assert_eq!(row.turn_marker, None);
    assert_eq!(row.created_at_ms, 1_000);
    assert_eq!(row.updated_at_ms, 1_000);
    assert_eq!(row.latest_seq, 3);
    assert_eq!(row.message_count, 2);
    assert_eq!(row.retained_from_seq, 1);

    assert_eq!(
        store.reader.events_since(&sid("s_1"), 0, 10).await.unwrap(),
        events
    );
    assert_eq!(
        store.reader.get_session("bob", &sid("s_1")).await.unwrap(),
        None,
        "another profile's session must look unknown"
    );
    assert_eq!(
        store
            .reader
            .get_session("alice", &sid("s_9"))
            .await
            .unwrap(),
        None
    );
}

async fn a_duplicate_session_id_is_a_conflict_and_changes_nothing(b: Backend) {
    let (_db, mut store) = common::fresh(b).await;
    common::commit_ok(&mut store, &[create("s_1", "alice", 1, 1)]).await;
    let results = store.writer.commit(vec![create("s_1", "bob", 2, 5)]).await;
    assert!(
        matches!(results[0], Err(StoreError::Conflict(_))),
        "{results:?}"
    );
    assert_eq!(results[0].as_ref().unwrap_err().code(), 5071);
    let row = store
        .reader
        .get_session("alice", &sid("s_1"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row.latest_seq, 2);
    assert_eq!(
        store.reader.get_session("bob", &sid("s_1")).await.unwrap(),
        None
    );
}

async fn seed_events_must_start_at_one_and_be_contiguous(b: Backend) {
    let (_db, mut store) = common::fresh(b).await;
    let bad_start = WriteOp::CreateSession {
        session: new_session("s_1", "default", 1),
        events: vec![ev(2, "session.created")],
    };
    let gap = WriteOp::CreateSession {
        session: new_session("s_2", "default", 1),
        events: vec![ev(1, "session.created"), ev(3, "message.user")],
    };
    let results = store.writer.commit(vec![bad_start, gap]).await;
    assert!(
        matches!(results[0], Err(StoreError::Invalid(_))),
        "{results:?}"
    );
    assert!(
        matches!(results[1], Err(StoreError::Invalid(_))),
        "{results:?}"
    );
    for id in ["s_1", "s_2"] {
        assert_eq!(
            store.reader.get_session("default", &sid(id)).await.unwrap(),
            None
        );
        assert!(store
            .reader
            .events_since(&sid(id), 0, 10)
            .await
            .unwrap()
            .is_empty());
    }
}

async fn patches_set_and_clear_fields(b: Backend) {
    let (_db, mut store) = common::fresh(b).await;
    common::commit_ok(&mut store, &[create("s_1", "default", 1, 0)]).await;
    let marker = json!({"turn_id": "t_1", "trace_id": "r_1"});
    common::commit_ok(
        &mut store,
        &[WriteOp::Patch {
            session_id: sid("s_1"),
            patch: SessionPatch {
                status: Some(SessionStatus::Running),
                title: Some("renamed".into()),
                message_count: Some(7),
                history_version: Some(2),
                turn_marker: Some(Some(marker.clone())),
                updated_at_ms: Some(99),
            },
        }],
    )
    .await;
    let row = store
        .reader
        .get_session("default", &sid("s_1"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row.status, SessionStatus::Running);
    assert_eq!(row.title, "renamed");
    assert_eq!(row.message_count, 7);
    assert_eq!(row.history_version, 2);
    assert_eq!(row.turn_marker, Some(marker.clone()));
    assert_eq!(row.updated_at_ms, 99);
    assert_eq!(row.latest_seq, 1, "a patch does not move latest_seq");

    // An empty patch changes nothing; `Some(None)` clears the marker and nothing else.
    common::commit_ok(
        &mut store,
        &[WriteOp::Patch {
            session_id: sid("s_1"),
            patch: SessionPatch::default(),
        }],
    )
    .await;
    let unchanged = store
        .reader
        .get_session("default", &sid("s_1"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(unchanged, row);
    common::commit_ok(
        &mut store,
        &[WriteOp::Patch {
            session_id: sid("s_1"),
            patch: SessionPatch {
                turn_marker: Some(None),
                ..SessionPatch::default()
            },
        }],
    )
    .await;
    let cleared = store
        .reader
        .get_session("default", &sid("s_1"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(cleared.turn_marker, None);
    assert_eq!(cleared.status, SessionStatus::Running);
    assert_eq!(cleared.title, "renamed");
}

async fn patching_an_unknown_session_fails(b: Backend) {
    let (_db, mut store) = common::fresh(b).await;
    let results = store
        .writer
        .commit(vec![WriteOp::Patch {
            session_id: sid("s_404"),
            patch: SessionPatch {
                title: Some("x".into()),
                ..SessionPatch::default()
            },
        }])
        .await;
    assert!(
        matches!(results[0], Err(StoreError::Invalid(_))),
        "{results:?}"
    );
}

backends!(
    created_session_is_visible_in_its_profile_only,
    a_duplicate_session_id_is_a_conflict_and_changes_nothing,
    seed_events_must_start_at_one_and_be_contiguous,
    patches_set_and_clear_fields,
    patching_an_unknown_session_fails,
);
