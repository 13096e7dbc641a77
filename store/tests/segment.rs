//! segment_events: the transcript of the history segment as of a seq.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

use common::Backend;

use tether_store::{EventRow, SessionPatch, WriteOp};

use common::{create, ev, sid};

fn kinds(events: &[EventRow]) -> Vec<(u64, &str)> {
    events.iter().map(|e| (e.seq, e.kind.as_str())).collect()
}

fn append(id: &str, events: Vec<EventRow>) -> WriteOp {
    WriteOp::Append {
        session_id: sid(id),
        events,
        patch: SessionPatch::default(),
    }
}

async fn without_compaction_the_whole_transcript(b: Backend) {
    let (_db, mut store) = common::fresh(b).await;
    common::commit_ok(
        &mut store,
        &[
            create("s_1", "default", 1, 1), // 1 session.created, 2 message.user
            append(
                "s_1",
                vec![
                    ev(3, "message.start"),
                    ev(4, "tool.start"),
                    ev(5, "tool.complete"),
                    ev(6, "todo.updated"),
                    ev(7, "message.complete"),
                    ev(8, "message.system"),
                    ev(9, "status.update"),
                    ev(10, "error"),
                    ev(11, "message.complete"),
                ],
            ),
        ],
    )
    .await;
    let segment = store
        .reader
        .segment_events(&sid("s_1"), u64::MAX)
        .await
        .unwrap();
    // An `error` is read with the transcript: a failed turn's entry carries
    // its message.
    assert_eq!(
        kinds(&segment),
        vec![
            (2, "message.user"),
            (5, "tool.complete"),
            (7, "message.complete"),
            (8, "message.system"),
            (10, "error"),
            (11, "message.complete")
        ]
    );
    assert!(store
        .reader
        .segment_events(&sid("s_x"), u64::MAX)
        .await
        .unwrap()
        .is_empty());
}

async fn after_a_compaction_only_it_and_later_transcript_events(b: Backend) {
    let (_db, mut store) = common::fresh(b).await;
    // Another session's compaction must not cut this one's segment.
    common::commit_ok(
        &mut store,
        &[
            create("s_other", "default", 1, 0),
            append("s_other", vec![ev(2, "session.compacted")]),
            create("s_1", "default", 1, 2), // seqs 1..=3
            append(
                "s_1",
                vec![
                    ev(4, "message.complete"),
                    ev(5, "session.compacted"),
                    ev(6, "message.user"),
                    ev(7, "status.update"),
                    ev(8, "message.complete"),
                    ev(9, "session.compacted"),
                    ev(10, "status.update"),
                    ev(11, "message.user"),
                    ev(12, "message.start"),
                    ev(13, "tool.complete"),
                ],
            ),
        ],
    )
    .await;
    let segment = store
        .reader
        .segment_events(&sid("s_1"), u64::MAX)
        .await
        .unwrap();
    assert_eq!(
        kinds(&segment),
        vec![
            (9, "session.compacted"),
            (11, "message.user"),
            (13, "tool.complete")
        ]
    );
    assert_eq!(segment[0], ev(9, "session.compacted"));
    assert_eq!(
        kinds(
            &store
                .reader
                .segment_events(&sid("s_other"), u64::MAX)
                .await
                .unwrap()
        ),
        vec![(2, "session.compacted")]
    );
    // As of a seq before the latest compaction: the segment it ended, cut
    // there (a resume that took its watermark just before the compaction
    // committed reads this).
    let at = |upto| {
        let reader = &store.reader;
        async move {
            let rows = reader.segment_events(&sid("s_1"), upto).await.unwrap();
            rows.iter()
                .map(|e| (e.seq, e.kind.as_str().to_owned()))
                .collect::<Vec<_>>()
        }
    };
    let owned = |v: Vec<(u64, &str)>| -> Vec<(u64, String)> {
        v.into_iter().map(|(s, k)| (s, k.to_owned())).collect()
    };
    assert_eq!(
        at(8).await,
        owned(vec![
            (5, "session.compacted"),
            (6, "message.user"),
            (8, "message.complete")
        ])
    );
    assert_eq!(
        at(6).await,
        owned(vec![(5, "session.compacted"), (6, "message.user")])
    );
    assert_eq!(at(9).await, owned(vec![(9, "session.compacted")]));
    assert_eq!(
        at(12).await,
        owned(vec![(9, "session.compacted"), (11, "message.user")])
    );
}

backends!(
    without_compaction_the_whole_transcript,
    after_a_compaction_only_it_and_later_transcript_events,
);
