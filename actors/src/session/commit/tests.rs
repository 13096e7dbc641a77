//! Unit tests of the commit pipeline, one rule each. A durable event's
//! fan-out item is its own row (so a rebuilt row is just a clone); a
//! transient one is a name; waiters are names.

use ractor::ActorId;
use tether_store::EventRow;

use super::{Append, CommitPipeline, Frame, Rebase};
use crate::store_writer::Barrier;

type Pipeline = CommitPipeline<EventRow, &'static str, &'static str>;

const OLD: ActorId = ActorId::Local(1);
const NEW: ActorId = ActorId::Local(2);

fn row(seq: u64, name: &str) -> EventRow {
    EventRow {
        seq,
        kind: "message.user".into(),
        payload: name.to_string(),
        turn_id: None,
        trace_id: None,
        ts_ms: 0,
    }
}

fn same(r: &EventRow) -> Option<EventRow> {
    Some(r.clone())
}

/// A pipeline whose session has `latest_seq` events on disk, under gen 7.
fn pipeline(latest_seq: u64) -> Pipeline {
    CommitPipeline::new(Barrier { latest_seq, gen: 7 }, 0)
}

fn durable(p: &mut Pipeline, name: &str) -> u64 {
    let count = p.message_count() + 1;
    p.emit_durable(count, |seq| (row(seq, name), row(seq, name)))
}

fn seqs<'a>(rows: impl IntoIterator<Item = &'a EventRow>) -> Vec<u64> {
    rows.into_iter().map(|r| r.seq).collect()
}

/// Released frames as `seq:name` (durable) or `name` (transient).
fn names(frames: &[Frame<EventRow, &'static str>]) -> Vec<String> {
    frames
        .iter()
        .map(|f| match f {
            Frame::Durable { seq, item } => format!("{seq}:{}", item.payload),
            Frame::Transient(t) => t.to_string(),
        })
        .collect()
}

#[test]
fn a_durable_event_goes_out_only_once_committed() {
    let mut p = pipeline(4);
    assert_eq!(durable(&mut p, "a"), 5);
    let append = p.take_append(OLD).expect("an append");
    assert_eq!(append.append_gen, 7);
    assert_eq!(seqs(&append.rows), [5]);
    assert_eq!(p.committed_seq(), 4);
    let released = p.committed(7, 5);
    assert_eq!(names(&released.frames), ["5:a"]);
    assert_eq!(p.committed_seq(), 5);
    assert!(p.is_quiet());
}

#[test]
fn a_transient_frame_waits_behind_a_pending_durable_one_and_only_then() {
    let mut p = pipeline(0);
    assert_eq!(
        p.emit_transient("t0"),
        Some("t0"),
        "nothing pending: at once"
    );
    durable(&mut p, "a");
    assert_eq!(p.emit_transient("t1"), None);
    durable(&mut p, "b");
    assert_eq!(p.emit_transient("t2"), None);
    let _ = p.take_append(OLD);
    // Only `a` is on disk: `t1` follows it, `t2` waits behind `b`.
    let released = p.committed(7, 1);
    assert_eq!(names(&released.frames), ["1:a", "t1"]);
    let released = p.committed(7, 2);
    assert_eq!(names(&released.frames), ["2:b", "t2"]);
    assert_eq!(p.emit_transient("t3"), Some("t3"));
}

#[test]
fn one_append_is_in_flight_and_what_follows_goes_out_as_the_next_one() {
    let mut p = pipeline(0);
    durable(&mut p, "a");
    let first = p.take_append(OLD).expect("first append");
    assert_eq!(seqs(&first.rows), [1]);
    durable(&mut p, "b");
    durable(&mut p, "c");
    assert!(!p.has_append());
    assert_eq!(p.take_append(OLD), None, "one append at a time");
    let _ = p.committed(7, 1);
    let second = p.take_append(OLD).expect("second append");
    assert_eq!(seqs(&second.rows), [2, 3], "coalesced");
}

#[test]
fn an_answer_of_another_generation_changes_nothing() {
    let mut p = pipeline(0);
    durable(&mut p, "a");
    let _ = p.take_append(OLD);
    let released = p.committed(6, 1);
    assert!(released.frames.is_empty() && released.answered.is_empty());
    assert!(p.append_failed(8, 1).is_none());
    assert_eq!(p.committed_seq(), 0);
    assert!(!p.has_append(), "still in flight");
}

#[test]
fn a_failed_append_drops_what_followed_it_rewinds_and_moves_to_the_next_generation() {
    let mut p = pipeline(10);
    durable(&mut p, "a");
    assert_eq!(p.wait_for(11, "submit a"), None);
    assert_eq!(p.wait_settled("flush"), None);
    assert_eq!(p.emit_transient("t"), None);
    let _ = p.take_append(OLD);
    durable(&mut p, "b");
    let dropped = p.append_failed(7, 11).expect("current generation");
    assert_eq!(seqs(dropped.events.iter().map(|(_, r)| r)), [11, 12]);
    assert_eq!(dropped.failed, ["submit a"]);
    assert_eq!(dropped.settled, ["flush"], "nothing pending any more");
    assert!(p.is_quiet());
    assert_eq!(p.emit_transient("t2"), Some("t2"));
    // The seqs are given again, under the next generation.
    assert_eq!(durable(&mut p, "c"), 11);
    let append = p.take_append(OLD).expect("append");
    assert_eq!(
        append,
        Append {
            append_gen: 8,
            rows: vec![row(11, "c")],
        }
    );
}

#[test]
fn message_counts_follow_commits_and_rewind_with_a_failure() {
    let mut p = Pipeline::new(
        Barrier {
            latest_seq: 0,
            gen: 1,
        },
        3,
    );
    p.emit_durable(4, |seq| (row(seq, "a"), row(seq, "a")));
    assert_eq!((p.message_count(), p.committed_message_count()), (4, 3));
    let _ = p.take_append(OLD);
    let _ = p.committed(1, 1);
    assert_eq!(p.committed_message_count(), 4);
    p.emit_durable(5, |seq| (row(seq, "b"), row(seq, "b")));
    let _ = p.take_append(OLD);
    let _ = p.append_failed(1, 2);
    assert_eq!((p.message_count(), p.committed_message_count()), (4, 4));
}

#[test]
fn waiters_of_a_seq_on_disk_and_of_a_settled_pipeline_are_answered_at_once() {
    let mut p = pipeline(3);
    assert_eq!(p.wait_for(3, "w"), Some("w"));
    assert_eq!(p.wait_settled("flush"), Some("flush"));
    durable(&mut p, "a");
    assert_eq!(p.wait_for(4, "submit"), None);
    assert_eq!(p.wait_settled("flush"), None);
    assert!(p.any_waiter(|w| *w == "submit"));
    let _ = p.take_append(OLD);
    let released = p.committed(7, 4);
    assert_eq!(released.answered, ["submit", "flush"], "seq waiters first");
    assert!(!p.any_waiter(|_| true));
}

#[test]
fn a_writer_restart_with_nothing_at_the_old_writer_needs_no_barrier() {
    let mut p = pipeline(0);
    durable(&mut p, "a");
    assert!(!p.writer_restarted(Some(NEW)), "not sent yet");
    let _ = p.take_append(NEW);
    assert!(
        !p.writer_restarted(Some(NEW)),
        "in flight at the new writer"
    );
}

#[test]
fn after_a_writer_restart_what_is_on_disk_is_released_and_the_rest_sent_again() {
    let mut p = pipeline(0);
    durable(&mut p, "a");
    durable(&mut p, "b");
    let _ = p.take_append(OLD);
    durable(&mut p, "c");
    assert_eq!(p.emit_transient("t"), None);
    assert!(p.writer_restarted(Some(NEW)));
    assert!(!p.writer_restarted(Some(NEW)), "one barrier at a time");
    assert!(!p.has_append(), "nothing is sent while the fate is unknown");
    assert!(!p.is_quiet());
    // The old writer committed nothing.
    let barrier = Barrier {
        latest_seq: 0,
        gen: 1,
    };
    let rebase = p.rebased(Some(NEW), Ok(barrier), same);
    let Rebase::Rebased { released, resent } = rebase else {
        panic!("expected a rebase, got {rebase:?}");
    };
    assert!(released.frames.is_empty());
    assert_eq!(resent, 2);
    let append = p.take_append(NEW).expect("append");
    assert_eq!(append.append_gen, 1, "the new writer's generation");
    assert_eq!(seqs(&append.rows), [1, 2, 3], "resent ahead of the unsent");
    let released = p.committed(1, 3);
    assert_eq!(names(&released.frames), ["1:a", "2:b", "3:c", "t"]);
}

#[test]
fn a_barrier_that_finds_the_append_on_disk_releases_it() {
    let mut p = pipeline(0);
    durable(&mut p, "a");
    let _ = p.take_append(OLD);
    durable(&mut p, "b");
    assert!(p.writer_restarted(Some(NEW)));
    let barrier = Barrier {
        latest_seq: 1,
        gen: 1,
    };
    let rebase = p.rebased(Some(NEW), Ok(barrier), same);
    let Rebase::Rebased { released, resent } = rebase else {
        panic!("expected a rebase, got {rebase:?}");
    };
    assert_eq!(names(&released.frames), ["1:a"]);
    assert_eq!(resent, 0);
    assert_eq!(seqs(&p.take_append(NEW).expect("append").rows), [2]);
}

#[test]
fn a_failed_barrier_is_asked_again_and_an_answer_meanwhile_makes_it_unneeded() {
    let mut p = pipeline(0);
    durable(&mut p, "a");
    let _ = p.take_append(OLD);
    assert!(p.writer_restarted(Some(NEW)));
    let rebase = p.rebased(Some(NEW), Err(5072), same);
    assert!(matches!(rebase, Rebase::Retry { code: 5072 }));
    assert!(!p.has_append(), "still unknown");
    assert!(p.writer_restarted(Some(NEW)), "asked again");
    // The old writer's answer arrives before the barrier's: what is
    // emitted meanwhile still waits for the barrier.
    assert_eq!(names(&p.committed(7, 1).frames), ["1:a"]);
    durable(&mut p, "b");
    assert_eq!(p.take_append(NEW), None, "a barrier is out");
    let barrier = Barrier {
        latest_seq: 1,
        gen: 1,
    };
    let rebase = p.rebased(Some(NEW), Ok(barrier), same);
    assert!(matches!(rebase, Rebase::Unneeded));
    let append = p.take_append(NEW).expect("sent once the barrier answered");
    assert_eq!(
        (append.append_gen, seqs(&append.rows)),
        (1, vec![2]),
        "under the generation the barrier handed out"
    );
}

#[test]
fn rows_the_writer_did_not_take_are_held_for_the_next_append() {
    let mut p = pipeline(0);
    durable(&mut p, "a");
    let append = p.take_append(OLD).expect("append");
    p.append_not_sent(append.rows);
    assert!(p.has_append());
    let _lost = p.take_append(NEW).expect("again");
    // Lost with the message: rebuilt from what is pending.
    p.append_lost(same);
    assert_eq!(seqs(&p.take_append(NEW).expect("rebuilt").rows), [1]);
}
