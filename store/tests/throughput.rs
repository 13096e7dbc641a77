//! Writer throughput, for the record (not an assertion on time: machines differ).
//!
//! `cargo test -p tether-store --release --test throughput -- --ignored --nocapture` (the
//! PostgreSQL run needs `TETHER_TEST_POSTGRES`, see `common`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

use std::time::Instant;

use tether_store::{EventRow, SessionPatch, WriteOp};

use common::{create, sid, Backend};

const SESSIONS: u64 = 20;

/// A typical streamed-turn event: ~100 bytes of JSON payload with a turn and trace id.
fn event(seq: u64) -> EventRow {
    EventRow {
        seq,
        kind: "tool.complete".into(),
        payload: format!(
            r#"{{"tool_id":"c_{seq}","name":"read_file","result":"ok {seq}","is_error":false}}"#
        ),
        turn_id: Some("t_01JABCDEFGHJKMNPQRSTVWXYZ0".into()),
        trace_id: Some("r_01JABCDEFGHJKMNPQRSTVWXYZ0".into()),
        ts_ms: 1_700_000_000_000 + seq as i64,
    }
}

/// Appends `ops` × `events_per_op` events round-robin over the sessions, `ops_per_commit` appends
/// per `commit` call, and prints the rate.
async fn run(b: &Backend, ops: u64, events_per_op: u64, ops_per_commit: u64) {
    let (n_ops, per_op) = (ops, events_per_op);
    let (_db, mut store) = common::fresh(b.clone()).await;
    let creates: Vec<WriteOp> = (0..SESSIONS)
        .map(|s| create(&format!("s_{s}"), "default", 1, 0))
        .collect();
    common::commit_ok(&mut store, &creates).await;

    // Round-robin over the sessions, as concurrent turns would produce.
    let mut next_seq = vec![2u64; SESSIONS as usize];
    let ops: Vec<WriteOp> = (0..n_ops)
        .map(|i| {
            let s = (i % SESSIONS) as usize;
            let first = next_seq[s];
            next_seq[s] += per_op;
            WriteOp::Append {
                session_id: sid(&format!("s_{s}")),
                events: (first..first + per_op).map(event).collect(),
                patch: SessionPatch {
                    message_count: Some(first + per_op),
                    updated_at_ms: Some(1_700_000_000_000 + i as i64),
                    ..SessionPatch::default()
                },
            }
        })
        .collect();

    // Batched before the clock starts: the writer takes each batch by value.
    let batches: Vec<Vec<WriteOp>> = ops
        .chunks(ops_per_commit as usize)
        .map(<[WriteOp]>::to_vec)
        .collect();
    let start = Instant::now();
    for batch in batches {
        let results = store.writer.commit(batch).await;
        assert!(results.iter().all(Result::is_ok), "{results:?}");
    }
    let elapsed = start.elapsed();
    let events = n_ops * per_op;
    println!(
        "store throughput ({b:?}): {events} events in {n_ops} appends of {per_op}, {ops_per_commit} appends/commit: \
         {:.1} ms, {:.0} events/s",
        elapsed.as_secs_f64() * 1e3,
        events as f64 / elapsed.as_secs_f64()
    );
    let total: usize = {
        let mut n = 0;
        for s in 0..SESSIONS {
            n += store
                .reader
                .events_since(&sid(&format!("s_{s}")), 0, 100_000)
                .await
                .unwrap()
                .len();
        }
        n
    };
    assert_eq!(total as u64, events + SESSIONS);
}

#[tokio::test]
#[ignore = "benchmark: run with --release -- --ignored --nocapture"]
async fn writer_throughput() {
    let mut backends = vec![Backend::Sqlite];
    backends.extend(Backend::postgres());
    for b in &backends {
        shapes(b).await;
    }
}

async fn shapes(b: &Backend) {
    // The issue's target shape: 200 appends × 250 events.
    for ops_per_commit in [1, 10, 50] {
        run(b, 200, 250, ops_per_commit).await;
    }
    // Closer to live traffic: many small appends gathered into group commits.
    for ops_per_commit in [1, 50] {
        run(b, 5_000, 5, ops_per_commit).await;
    }
}
