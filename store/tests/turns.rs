//! What turns need from the store: the latest todo snapshot and the
//! sessions whose turn marker says turns were cut short.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

use common::Backend;

use serde_json::json;
use tether_store::{SessionPatch, WriteOp};

use common::{create, ev, sid};

async fn latest_todos_is_the_newest_todo_event(b: Backend) {
    let (_db, mut store) = common::fresh(b).await;
    common::commit_ok(&mut store, &[create("s_1", "default", 1, 0)]).await;
    assert!(store
        .reader
        .latest_todos(&sid("s_1"))
        .await
        .unwrap()
        .is_none());
    common::commit_ok(
        &mut store,
        &[WriteOp::Append {
            session_id: sid("s_1"),
            events: vec![
                ev(2, "todo.updated"),
                ev(3, "message.user"),
                ev(4, "todo.updated"),
                ev(5, "message.complete"),
            ],
            patch: SessionPatch::default(),
        }],
    )
    .await;
    let latest = store
        .reader
        .latest_todos(&sid("s_1"))
        .await
        .unwrap()
        .expect("a todo event");
    assert_eq!(latest.seq, 4);
    assert!(store
        .reader
        .latest_todos(&sid("s_other"))
        .await
        .unwrap()
        .is_none());
}

async fn sessions_with_a_turn_marker_are_found_until_it_is_cleared(b: Backend) {
    let (_db, mut store) = common::fresh(b).await;
    common::commit_ok(
        &mut store,
        &[
            create("s_1", "default", 1, 0),
            create("s_2", "alice", 2, 0),
            create("s_3", "default", 3, 0),
        ],
    )
    .await;
    let mark = |id: &str, marker: Option<serde_json::Value>| WriteOp::Patch {
        session_id: sid(id),
        patch: SessionPatch {
            turn_marker: Some(marker),
            ..SessionPatch::default()
        },
    };
    common::commit_ok(
        &mut store,
        &[
            mark(
                "s_1",
                Some(json!({"running": {"turn_id": "t_1", "trace_id": "abc"}})),
            ),
            mark("s_2", Some(json!({"running": null, "queued": []}))),
        ],
    )
    .await;
    let mut found = store.reader.sessions_with_turn_marker().await.unwrap();
    found.sort();
    assert_eq!(
        found,
        vec![
            ("alice".to_string(), sid("s_2")),
            ("default".to_string(), sid("s_1"))
        ]
    );
    common::commit_ok(&mut store, &[mark("s_1", None)]).await;
    let found = store.reader.sessions_with_turn_marker().await.unwrap();
    assert_eq!(found, vec![("alice".to_string(), sid("s_2"))]);
}

backends!(
    latest_todos_is_the_newest_todo_event,
    sessions_with_a_turn_marker_are_found_until_it_is_cleared,
);
