//! The outbox through its public surface: push, close, recv.

use super::*;
use crate::event::{frame_of, EventRecord, TurnTag};
use serde_json::Value;
use tether_protocol::{DeltaPayload, EventType, SessionId, TraceId, TurnId};

fn frame(n: usize) -> Bytes {
    Bytes::from(vec![b'x'; n])
}

fn with_metrics(
    max_frames: usize,
    max_bytes: usize,
) -> (Outbox, OutboxReceiver, Arc<OutboxMetrics>) {
    let metrics = Arc::new(OutboxMetrics::default());
    let (tx, rx) = outbox(max_frames, max_bytes, metrics.clone());
    (tx, rx, metrics)
}

fn plain(max_frames: usize, max_bytes: usize) -> (Outbox, OutboxReceiver) {
    let (tx, rx, _) = with_metrics(max_frames, max_bytes);
    (tx, rx)
}

fn record(kind: EventType, turn: &str, text: &str, offset: u64) -> EventRecord {
    EventRecord::new(
        kind,
        &DeltaPayload {
            text: text.into(),
            offset,
        },
        Some(TurnTag {
            turn_id: TurnId::from(turn),
            trace_id: TraceId::from("tr"),
        }),
        1_764_470_000_000,
    )
}

/// A delta's frame and class, as a session pushes it.
fn delta_of(kind: EventType, turn: &str, text: &str, offset: u64) -> (Bytes, FrameClass) {
    let sid = SessionId::from("s_1");
    let rec = record(kind, turn, text, offset);
    let frame = frame_of(&rec.params_of(&sid));
    let meta = rec.delta_meta(&sid, &frame).expect("a delta");
    (frame, FrameClass::Delta(Arc::new(meta)))
}

fn delta(text: &str, offset: u64) -> (Bytes, FrameClass) {
    delta_of(EventType::MessageDelta, "t_1", text, offset)
}

fn push_delta(tx: &Outbox, (frame, class): (Bytes, FrameClass)) -> Pushed {
    tx.push(frame, class)
}

fn drain(rx: &mut OutboxReceiver) -> Vec<Outbound> {
    std::iter::from_fn(|| rx.try_recv()).collect()
}

/// `(type, text, offset)` of a delta frame, or `(type, "", 0)`.
fn summary(item: &Outbound) -> (String, String, u64) {
    let Outbound::Frame(bytes) = item else {
        return ("close".into(), String::new(), 0);
    };
    let Ok(v) = serde_json::from_slice::<Value>(bytes) else {
        return ("raw".into(), String::new(), 0);
    };
    let p = &v["params"];
    (
        p["type"].as_str().unwrap_or_default().to_string(),
        p["payload"]["text"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        p["payload"]["offset"].as_u64().unwrap_or_default(),
    )
}

/// Fills an outbox of bound 4 to half with durable frames: the head and
/// two behind it.
fn pressured() -> (Outbox, OutboxReceiver, Arc<OutboxMetrics>) {
    let (tx, rx, metrics) = with_metrics(4, 100_000);
    for _ in 0..3 {
        assert_eq!(tx.push(frame(1), FrameClass::Durable), Pushed::Queued);
    }
    (tx, rx, metrics)
}

#[tokio::test]
async fn frames_arrive_in_push_order() {
    let (tx, mut rx) = plain(10, 1000);
    for i in 0..3u8 {
        assert_eq!(
            tx.push(Bytes::from(vec![i]), FrameClass::Durable),
            Pushed::Queued
        );
    }
    for i in 0..3u8 {
        assert_eq!(rx.recv().await, Some(Outbound::Frame(Bytes::from(vec![i]))));
    }
    assert_eq!(tx.backlog(), 0);
}

#[tokio::test]
async fn transient_frames_are_dropped_and_durable_overflow_closes() {
    let (tx, mut rx, metrics) = with_metrics(2, 1000);
    // The head, then two frames behind it: full.
    assert_eq!(tx.push(frame(1), FrameClass::Durable), Pushed::Queued);
    assert_eq!(tx.push(frame(1), FrameClass::Transient), Pushed::Queued);
    // Replies count like any frame.
    assert_eq!(tx.push(frame(1), FrameClass::Reply), Pushed::Queued);
    assert_eq!(tx.push(frame(1), FrameClass::Transient), Pushed::Dropped);
    assert_eq!(tx.dropped(), 1);
    assert_eq!(tx.push(frame(1), FrameClass::Reply), Pushed::Closed);
    assert!(tx.is_closed());
    assert_eq!(tx.push(frame(1), FrameClass::Durable), Pushed::Closed);
    let got = drain(&mut rx);
    assert_eq!(got.len(), 4);
    assert_eq!(
        got[3],
        Outbound::Close {
            code: CLOSE_SLOW_CONSUMER,
            reason: "slow consumer".into()
        }
    );
    let m = metrics.snapshot();
    assert_eq!((m.dropped, m.slow_consumer_closes, m.coalesced), (1, 1, 0));
    // Closed and drained: nothing more can come.
    assert_eq!(rx.recv().await, None);
}

#[tokio::test]
async fn byte_bound_counts_too() {
    let (tx, mut rx) = plain(100, 10);
    assert_eq!(tx.push(frame(6), FrameClass::Durable), Pushed::Queued);
    assert_eq!(tx.push(frame(6), FrameClass::Transient), Pushed::Queued);
    assert_eq!(tx.push(frame(6), FrameClass::Transient), Pushed::Dropped);
    // The writer takes the head: the frame behind it is the head now.
    assert!(rx.recv().await.is_some());
    assert_eq!(tx.push(frame(6), FrameClass::Transient), Pushed::Queued);
    // Durable frames join a backlog under the bound whatever their size,
    // and close the peer once it is at the bound.
    assert_eq!(tx.push(frame(4), FrameClass::Durable), Pushed::Queued);
    assert_eq!(tx.push(frame(1), FrameClass::Durable), Pushed::Closed);
}

#[tokio::test]
async fn one_frame_larger_than_the_bound_reaches_a_peer_that_reads() {
    let (tx, mut rx, metrics) = with_metrics(4, 100);
    // Into an empty outbox, a reply then an event, each 10× the bound...
    assert_eq!(tx.push(frame(1_000), FrameClass::Reply), Pushed::Queued);
    assert_eq!(rx.recv().await, Some(Outbound::Frame(frame(1_000))));
    assert_eq!(tx.push(frame(1_000), FrameClass::Durable), Pushed::Queued);
    // ...and frames behind the one at the head are judged on their own.
    assert_eq!(tx.push(frame(60), FrameClass::Durable), Pushed::Queued);
    assert_eq!(tx.push(frame(30), FrameClass::Transient), Pushed::Queued);
    // A large one joins a backlog under the bound...
    assert_eq!(tx.push(frame(1_000), FrameClass::Durable), Pushed::Queued);
    // ...and the next transient frame no longer fits.
    assert_eq!(tx.push(frame(1), FrameClass::Transient), Pushed::Dropped);
    let got = drain(&mut rx);
    let lens: Vec<_> = got
        .iter()
        .map(|o| match o {
            Outbound::Frame(f) => f.len(),
            Outbound::Close { .. } => 0,
        })
        .collect();
    assert_eq!(lens, [1_000, 60, 30, 1_000]);
    assert_eq!(metrics.snapshot().slow_consumer_closes, 0);
    assert!(!tx.is_closed());
}

#[tokio::test]
async fn a_peer_that_never_reads_its_replies_is_closed() {
    let (tx, mut rx, metrics) = with_metrics(1024, 100);
    // The writer took the first and is stuck writing it.
    assert_eq!(tx.push(frame(1_000), FrameClass::Reply), Pushed::Queued);
    assert!(rx.try_recv().is_some());
    assert_eq!(tx.push(frame(1_000), FrameClass::Reply), Pushed::Queued);
    assert_eq!(tx.push(frame(1_000), FrameClass::Reply), Pushed::Queued);
    assert_eq!(tx.push(frame(1_000), FrameClass::Reply), Pushed::Closed);
    assert_eq!(metrics.snapshot().slow_consumer_closes, 1);
    // What was queued, then the close; replies are not event deliveries.
    let got = drain(&mut rx);
    assert_eq!(got.len(), 3);
    assert!(matches!(got[2], Outbound::Close { code: 1013, .. }));
    assert_eq!(metrics.deliveries(), 0);
}

#[tokio::test]
async fn a_gone_receiver_reads_as_closed() {
    let (tx, mut rx) = plain(10, 100);
    rx.close();
    assert!(tx.is_closed());
    assert_eq!(tx.push(frame(1), FrameClass::Durable), Pushed::Closed);
    drop(rx);
    let (tx, rx) = plain(10, 100);
    drop(rx);
    assert_eq!(tx.push(frame(1), FrameClass::Durable), Pushed::Closed);
}

#[tokio::test]
async fn recv_wakes_on_a_push_and_ends_with_the_last_producer() {
    let (tx, mut rx) = plain(10, 100);
    let other = tx.clone();
    let reader = tokio::spawn(async move {
        let mut got = Vec::new();
        while let Some(item) = rx.recv().await {
            got.push(item);
        }
        got
    });
    tokio::task::yield_now().await;
    assert_eq!(tx.push(frame(1), FrameClass::Durable), Pushed::Queued);
    drop(tx);
    assert_eq!(other.push(frame(2), FrameClass::Transient), Pushed::Queued);
    drop(other);
    let got = tokio::time::timeout(std::time::Duration::from_secs(10), reader)
        .await
        .expect("the reader ends once every producer is gone")
        .expect("reader task");
    assert_eq!(got, [Outbound::Frame(frame(1)), Outbound::Frame(frame(2))]);
}

#[tokio::test]
async fn contiguous_deltas_that_wait_are_merged_and_keep_all_text() {
    let (tx, mut rx, metrics) = pressured();
    assert_eq!(push_delta(&tx, delta("hé", 0)), Pushed::Queued);
    assert_eq!(push_delta(&tx, delta("llo \"w", 3)), Pushed::Coalesced);
    assert_eq!(push_delta(&tx, delta("orld\"\n", 9)), Pushed::Coalesced);
    assert_eq!(tx.backlog(), 4);
    let got = drain(&mut rx);
    assert_eq!(got.len(), 4);
    assert_eq!(
        summary(&got[3]),
        ("message.delta".into(), "héllo \"world\"\n".into(), 0)
    );
    // The merged frame is exactly the frame of one delta with the
    // joined text: same shape, ids and ts as a live event frame.
    let whole = delta("héllo \"world\"\n", 0).0;
    assert_eq!(got[3], Outbound::Frame(whole));
    assert_eq!(metrics.snapshot().coalesced, 2);
    assert_eq!(tx.backlog(), 0);
}

#[tokio::test]
async fn a_delta_is_merged_only_while_it_waits() {
    let (tx, mut rx, metrics) = with_metrics(4, 100_000);
    // Queued, not taken yet: even the head is extended (budget 0 merges
    // what is already queued).
    assert_eq!(push_delta(&tx, delta("a", 0)), Pushed::Queued);
    assert_eq!(push_delta(&tx, delta("b", 1)), Pushed::Coalesced);
    assert_eq!(summary(&rx.try_recv().expect("the merged delta")).1, "ab");
    // The writer took it: the next delta is a frame of its own.
    assert_eq!(push_delta(&tx, delta("c", 2)), Pushed::Queued);
    let got: Vec<_> = drain(&mut rx).iter().map(summary).collect();
    assert_eq!(got, [("message.delta".into(), "c".into(), 2)]);
    assert_eq!(metrics.snapshot().coalesced, 1);
}

#[tokio::test]
async fn a_merged_frame_stays_within_64_kib() {
    let (tx, mut rx) = plain(1024, 4 << 20);
    let word = "x".repeat(1000);
    let mut offset = 0;
    for _ in 0..200 {
        tx.push(delta(&word, offset).0, delta(&word, offset).1);
        offset += word.len() as u64;
    }
    let got = drain(&mut rx);
    assert!(got.len() > 1, "200 KB of text cannot be one frame");
    let mut text = String::new();
    for item in &got {
        let Outbound::Frame(f) = item else {
            panic!("a frame")
        };
        assert!(f.len() <= 64 * 1024, "{} bytes", f.len());
        let (_, t, o) = summary(item);
        assert_eq!(
            o,
            text.len() as u64,
            "each frame starts where the last ended"
        );
        text.push_str(&t);
    }
    assert_eq!(text, word.repeat(200));
}

#[tokio::test]
async fn recv_batch_takes_everything_ready_at_once() {
    let (tx, mut rx) = plain(100, 1 << 20);
    for i in 0..5u8 {
        tx.push(Bytes::from(vec![i]), FrameClass::Durable);
    }
    let mut batch = Vec::new();
    assert!(rx.recv_batch(&mut batch).await);
    assert_eq!(batch.len(), 5);
    // One batch is at most WRITE_BATCH_BYTES (and at least one frame).
    for _ in 0..3 {
        tx.push(frame(WRITE_BATCH_BYTES / 2 + 1), FrameClass::Durable);
    }
    batch.clear();
    assert!(rx.recv_batch(&mut batch).await);
    assert_eq!(batch.len(), 2);
    batch.clear();
    assert!(rx.recv_batch(&mut batch).await);
    assert_eq!(batch.len(), 1);
}

/// A budget long enough that no test ever reaches it unless time is
/// advanced on purpose.
const LONG: std::time::Duration = std::time::Duration::from_secs(3600);

#[tokio::test]
async fn a_held_delta_waits_for_its_continuations_and_goes_out_with_the_next_frame() {
    let (tx, mut rx, metrics) = with_metrics(100, 1 << 20);
    let (f, c) = delta("a", 0);
    assert_eq!(tx.push_within(f, c, LONG), Pushed::Queued);
    assert_eq!(rx.try_recv(), None, "held by its budget");
    let (f, c) = delta("b", 1);
    assert_eq!(tx.push_within(f, c, LONG), Pushed::Coalesced);
    assert_eq!(rx.try_recv(), None, "still held");
    // A durable frame behind it: the delta goes out first, at once.
    assert_eq!(tx.push(frame(3), FrameClass::Durable), Pushed::Queued);
    let mut batch = Vec::new();
    assert!(rx.recv_batch(&mut batch).await);
    assert_eq!(batch.len(), 2);
    assert_eq!(summary(&batch[0]).1, "ab");
    assert_eq!(batch[1], Outbound::Frame(frame(3)));
    assert_eq!(metrics.snapshot().coalesced, 1);
}

#[tokio::test]
async fn a_delta_that_cannot_join_releases_the_held_one() {
    let (tx, mut rx) = plain(100, 1 << 20);
    let (f, c) = delta("a", 0);
    tx.push_within(f, c, LONG);
    // Another stream: queued behind, so the first is released, and the
    // new one is held in its turn.
    let (f, c) = delta_of(EventType::ReasoningDelta, "t_1", "r", 0);
    assert_eq!(tx.push_within(f, c, LONG), Pushed::Queued);
    let got: Vec<_> = drain(&mut rx).iter().map(summary).collect();
    assert_eq!(got, [("message.delta".into(), "a".into(), 0)]);
    assert_eq!(rx.try_recv(), None, "the reasoning delta is held now");
    tx.push(frame(1), FrameClass::Reply);
    let got: Vec<_> = drain(&mut rx).iter().map(summary).collect();
    assert_eq!(got[0], ("reasoning.delta".into(), "r".into(), 0));
    assert_eq!(got.len(), 2);
}

#[tokio::test]
async fn a_held_delta_goes_out_when_its_budget_is_spent() {
    let (tx, mut rx) = plain(100, 1 << 20);
    let (f, c) = delta("a", 0);
    tx.push_within(f, c, std::time::Duration::from_millis(5));
    // Nothing else is pushed: only the deadline can wake the writer (this
    // checks that it does, not how long it took).
    let mut batch = Vec::new();
    assert!(rx.recv_batch(&mut batch).await);
    assert_eq!(
        batch.iter().map(summary).collect::<Vec<_>>(),
        [("message.delta".into(), "a".into(), 0)]
    );
}

#[tokio::test]
async fn nothing_is_held_once_nothing_more_can_come() {
    let (tx, mut rx) = plain(100, 1 << 20);
    let (f, c) = delta("a", 0);
    tx.push_within(f, c, LONG);
    drop(tx);
    assert_eq!(summary(&rx.recv().await.expect("released")).1, "a");
    assert_eq!(rx.recv().await, None);
    let (tx, mut rx) = plain(100, 1 << 20);
    let (f, c) = delta("a", 0);
    tx.push_within(f, c, LONG);
    tx.close(CLOSE_GOING_AWAY, "bye");
    let got = drain(&mut rx);
    assert_eq!(summary(&got[0]).1, "a");
    assert!(matches!(got[1], Outbound::Close { code: 1001, .. }));
}

#[tokio::test]
async fn only_the_continuation_of_the_same_stream_is_merged() {
    let (tx, mut rx, metrics) = with_metrics(100, 100_000);
    for _ in 0..50 {
        assert_eq!(tx.push(frame(1), FrameClass::Durable), Pushed::Queued);
    }
    assert_eq!(push_delta(&tx, delta("ab", 0)), Pushed::Queued);
    // A gap, then an overlap: not contiguous.
    assert_eq!(push_delta(&tx, delta("x", 5)), Pushed::Queued);
    assert_eq!(push_delta(&tx, delta("y", 5)), Pushed::Queued);
    // Another turn, and the reasoning stream of the same turn.
    assert_eq!(
        push_delta(&tx, delta_of(EventType::MessageDelta, "t_2", "z", 7)),
        Pushed::Queued
    );
    assert_eq!(
        push_delta(&tx, delta_of(EventType::ReasoningDelta, "t_2", "r", 8)),
        Pushed::Queued
    );
    assert_eq!(metrics.snapshot().coalesced, 0);
    let got: Vec<_> = drain(&mut rx)[50..].iter().map(summary).collect();
    let texts: Vec<_> = got.iter().map(|(_, t, o)| (t.as_str(), *o)).collect();
    assert_eq!(texts, [("ab", 0), ("x", 5), ("y", 5), ("z", 7), ("r", 8)]);
}

#[tokio::test]
async fn a_frame_queued_after_a_delta_keeps_the_next_delta_apart() {
    let (tx, mut rx, metrics) = pressured();
    assert_eq!(push_delta(&tx, delta("a", 0)), Pushed::Queued);
    assert_eq!(tx.push(frame(1), FrameClass::Durable), Pushed::Queued);
    assert_eq!(push_delta(&tx, delta("b", 1)), Pushed::Dropped);
    // Room again: the delta is queued behind the durable frame, never
    // merged across it.
    let (tx, mut rx2, _) = with_metrics(10, 100_000);
    for _ in 0..5 {
        tx.push(frame(1), FrameClass::Durable);
    }
    assert_eq!(push_delta(&tx, delta("a", 0)), Pushed::Queued);
    assert_eq!(tx.push(frame(9), FrameClass::Durable), Pushed::Queued);
    assert_eq!(tx.push(frame(1), FrameClass::Reply), Pushed::Queued);
    assert_eq!(push_delta(&tx, delta("b", 1)), Pushed::Queued);
    let got: Vec<_> = drain(&mut rx2)[5..].to_vec();
    assert_eq!(summary(&got[0]).1, "a");
    assert_eq!(got[1], Outbound::Frame(frame(9)));
    assert_eq!(got[2], Outbound::Frame(frame(1)));
    assert_eq!(summary(&got[3]).1, "b");
    assert_eq!(metrics.snapshot().coalesced, 0);
    assert_eq!(drain(&mut rx).len(), 5);
}

#[tokio::test]
async fn a_full_outbox_still_coalesces_and_drops_what_it_cannot_merge() {
    let (tx, mut rx, metrics) = with_metrics(3, 100_000);
    for _ in 0..3 {
        tx.push(frame(1), FrameClass::Durable);
    }
    assert_eq!(push_delta(&tx, delta("a", 0)), Pushed::Queued);
    // Full now: a continuation is still merged (it takes no new slot)...
    assert_eq!(push_delta(&tx, delta("b", 1)), Pushed::Coalesced);
    // ...anything else transient is dropped.
    assert_eq!(push_delta(&tx, delta("d", 3)), Pushed::Dropped);
    assert_eq!(
        push_delta(&tx, delta_of(EventType::MessageDelta, "t_2", "x", 0)),
        Pushed::Dropped
    );
    assert_eq!(tx.push(frame(1), FrameClass::Transient), Pushed::Dropped);
    let m = metrics.snapshot();
    assert_eq!((m.coalesced, m.dropped, m.slow_consumer_closes), (1, 3, 0));
    assert_eq!(tx.dropped(), 3);
    let got = drain(&mut rx);
    assert_eq!(got.len(), 4);
    assert_eq!(summary(&got[3]).1, "ab");
}

#[tokio::test]
async fn merging_respects_the_byte_bound() {
    let first = delta("abcd", 0);
    let bound = first.0.len() + 2;
    let (tx, mut rx, metrics) = with_metrics(100, bound);
    // Behind a head, a merge must fit the bound.
    assert_eq!(tx.push(frame(1), FrameClass::Durable), Pushed::Queued);
    assert_eq!(push_delta(&tx, first), Pushed::Queued);
    assert_eq!(push_delta(&tx, delta("ef", 4)), Pushed::Coalesced);
    assert_eq!(push_delta(&tx, delta("g", 6)), Pushed::Dropped);
    let m = metrics.snapshot();
    assert_eq!((m.coalesced, m.dropped), (1, 1));
    let got = drain(&mut rx);
    assert_eq!(summary(&got[1]).1, "abcdef");
    // Everything counted was released by the take.
    assert_eq!(push_delta(&tx, delta("g", 6)), Pushed::Queued);
}

#[tokio::test]
async fn slow_consumer_closes_are_counted_once() {
    let (tx, mut rx, metrics) = pressured();
    tx.push(frame(1), FrameClass::Durable);
    tx.push(frame(1), FrameClass::Durable);
    assert_eq!(tx.push(frame(1), FrameClass::Durable), Pushed::Closed);
    assert_eq!(tx.push(frame(1), FrameClass::Durable), Pushed::Closed);
    tx.close(CLOSE_SLOW_CONSUMER, "slow consumer");
    assert_eq!(metrics.snapshot().slow_consumer_closes, 1);
    let got = drain(&mut rx);
    assert_eq!(got.len(), 6);
    assert_eq!(
        got[5],
        Outbound::Close {
            code: 1013,
            reason: "slow consumer".into()
        }
    );
    // Other closes are not slow consumers.
    let (tx, _rx, metrics) = with_metrics(4, 100);
    tx.close(CLOSE_GOING_AWAY, "bye");
    assert_eq!(metrics.snapshot().slow_consumer_closes, 0);
}

/// A writer idle long enough gives its buffers back; what is pushed after
/// that, while it waits, is still delivered whole and in order.
#[tokio::test]
async fn an_idle_writer_gives_its_buffers_back_and_loses_nothing() {
    let (tx, mut rx) = plain(100, 1 << 20);
    for i in 0..20u8 {
        assert_eq!(
            tx.push(Bytes::from(vec![i]), FrameClass::Durable),
            Pushed::Queued
        );
    }
    let mut batch = Vec::new();
    assert!(rx.recv_batch(&mut batch).await);
    assert_eq!(batch.len(), 20);
    batch.clear();
    assert!(batch.capacity() > 0);
    let pusher = tokio::spawn(async move {
        // Well past the release, so it has happened before these come.
        tokio::time::sleep(IDLE_RELEASE * 4).await;
        for i in 20..23u8 {
            tx.push(Bytes::from(vec![i]), FrameClass::Durable);
        }
        tx
    });
    assert!(rx.recv_batch(&mut batch).await);
    let got = std::mem::take(&mut batch);
    let want: Vec<Outbound> = (20..23u8)
        .map(|i| Outbound::Frame(Bytes::from(vec![i])))
        .collect();
    assert_eq!(got, want);
    // It held 20 before; given back, it grew again only to fit 3.
    assert!(
        rx.scratch.capacity() < 20,
        "the scratch batch was given back"
    );
    drop(pusher.await);
}
