//! Property tests of the commit pipeline: random interleavings of emits
//! (durable, some with a waiter, and transient), flushes, the writer's
//! answers (commits and failures, barriers that fail), writer crashes
//! (with or without committing the append it held) and restarts, and the
//! delivery of those answers, run against a model of the writer and the
//! store that follows the StoreWriter's rules (FIFO, one generation floor
//! per session, a barrier hands out a new generation). Checked on every
//! step and once everything has settled:
//!
//! - frames reach the peers in emission order;
//! - every durable event is fanned out exactly once if it is on disk, and
//!   never if it is not;
//! - no durable frame, nor a transient one emitted after it, goes out
//!   before that durable event is on disk;
//! - the store's seqs are gap-free, each written once, and the seqs fanned
//!   out are 1, 2, 3, ... (a rewound seq is never reused for a different
//!   event once one went out under it);
//! - every waiter is answered exactly once: success only once its event is
//!   on disk, failure only when it was dropped, a flush only when nothing
//!   is pending;
//! - and afterwards, once the store takes writes again, the next event is
//!   written (a failure or a restart never leaves the session unable to).

use std::collections::{HashMap, HashSet, VecDeque};

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use ractor::ActorId;
use tether_store::EventRow;

use super::{Append, CommitPipeline, Frame, Rebase, Released};
use crate::store_writer::Barrier;

/// Durable events carry their row (payload: the emission id), transient
/// ones their emission id; a waiter is its id.
type Pipeline = CommitPipeline<EventRow, u64, u64>;

const UNAVAILABLE: i64 = tether_protocol::codes::STORAGE_UNAVAILABLE;

#[derive(Debug, Clone)]
enum Op {
    Durable {
        wait: bool,
    },
    Transient,
    Flush,
    /// The writer handles its oldest job; `fail` fails it.
    WriterStep {
        fail: bool,
    },
    /// The session handles its oldest message.
    Deliver,
    /// The writer dies, after committing the append it held if `commit`.
    Crash {
        commit: bool,
    },
    /// A new writer is published and announced.
    Up,
}

/// Ops with appends failing with probability `fail` and writer crashes
/// (and restarts) weighted `crash` against 19 for the rest.
fn op(fail: f64, crash: u32) -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => any::<bool>().prop_map(|wait| Op::Durable { wait }),
        3 => Just(Op::Transient),
        1 => Just(Op::Flush),
        5 => prop::bool::weighted(fail).prop_map(|fail| Op::WriterStep { fail }),
        6 => Just(Op::Deliver),
        crash => any::<bool>().prop_map(|commit| Op::Crash { commit }),
        crash => Just(Op::Up),
    ]
}

enum Job {
    Append(Append),
    Barrier,
}

/// The StoreWriter as a session sees it.
struct Writer {
    id: ActorId,
    alive: bool,
    queue: VecDeque<Job>,
    /// Appends of the session with a lower generation are rejected.
    min_gen: u64,
    next_gen: u64,
}

impl Writer {
    fn new(n: u64) -> Self {
        Self {
            id: ActorId::Local(n),
            alive: true,
            queue: VecDeque::new(),
            min_gen: 0,
            next_gen: 1,
        }
    }
}

/// What the session's mailbox gets.
#[derive(Debug)]
enum Msg {
    Committed { gen: u64, upto: u64 },
    Failed { gen: u64, from: u64 },
    WriterRestarted,
    Rebased(Result<Barrier, i64>),
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Wait {
    /// For the durable event with this emission id.
    Event(u64),
    Settled,
}

struct Model {
    p: Pipeline,
    /// Emission ids, and whether each is durable.
    emitted: Vec<bool>,
    /// The store: emission id of seq `i + 1`.
    disk: Vec<u64>,
    writer: Writer,
    writers: u64,
    mailbox: VecDeque<Msg>,
    /// Emission ids in the order they went out.
    fanned: Vec<u64>,
    fanned_set: HashSet<u64>,
    /// Seq of the last durable frame that went out.
    fanned_seq: u64,
    dropped: HashSet<u64>,
    waits: Vec<Wait>,
    answers: HashMap<u64, u32>,
}

fn id_of(row: &EventRow) -> u64 {
    row.payload.parse().unwrap_or(u64::MAX)
}

fn same(row: &EventRow) -> Option<EventRow> {
    Some(row.clone())
}

impl Model {
    fn new() -> Self {
        Self {
            p: CommitPipeline::new(
                Barrier {
                    latest_seq: 0,
                    gen: 0,
                },
                0,
            ),
            emitted: Vec::new(),
            disk: Vec::new(),
            writer: Writer::new(1),
            writers: 1,
            mailbox: VecDeque::new(),
            fanned: Vec::new(),
            fanned_set: HashSet::new(),
            fanned_seq: 0,
            dropped: HashSet::new(),
            waits: Vec::new(),
            answers: HashMap::new(),
        }
    }

    fn run(&mut self, op: Op) -> Result<(), TestCaseError> {
        match op {
            Op::Durable { wait } => self.emit_durable(wait)?,
            Op::Transient => {
                let id = self.emitted.len() as u64;
                self.emitted.push(false);
                if let Some(id) = self.p.emit_transient(id) {
                    self.fan_out(id, None)?;
                }
            }
            Op::Flush => {
                let w = self.add_wait(Wait::Settled);
                if let Some(w) = self.p.wait_settled(w) {
                    self.answer(w, true)?;
                }
            }
            Op::WriterStep { fail } => return self.writer_step(fail),
            Op::Deliver => match self.mailbox.pop_front() {
                Some(msg) => self.deliver(msg)?,
                None => return Ok(()),
            },
            Op::Crash { commit } => return self.crash(commit),
            Op::Up => return self.up(),
        }
        // After each message the session sends what it has.
        self.send();
        Ok(())
    }

    fn emit_durable(&mut self, wait: bool) -> Result<(), TestCaseError> {
        let id = self.emitted.len() as u64;
        self.emitted.push(true);
        let count = self.p.message_count() + 1;
        let seq = self.p.emit_durable(count, |seq| {
            let row = EventRow {
                seq,
                kind: "message.user".into(),
                payload: id.to_string(),
                turn_id: None,
                trace_id: None,
                ts_ms: 0,
            };
            (row.clone(), row)
        });
        if wait {
            let w = self.add_wait(Wait::Event(id));
            if let Some(w) = self.p.wait_for(seq, w) {
                self.answer(w, true)?;
            }
        }
        Ok(())
    }

    fn add_wait(&mut self, wait: Wait) -> u64 {
        self.waits.push(wait);
        self.waits.len() as u64 - 1
    }

    /// The session's `send_unsent`: a writer that is dead but still
    /// published refuses the message, which gives the rows back.
    fn send(&mut self) {
        let Some(append) = self.p.take_append(self.writer.id) else {
            return;
        };
        if self.writer.alive {
            self.writer.queue.push_back(Job::Append(append));
        } else {
            self.p.append_not_sent(append.rows);
        }
    }

    fn writer_step(&mut self, fail: bool) -> Result<(), TestCaseError> {
        if !self.writer.alive {
            return Ok(());
        }
        let Some(job) = self.writer.queue.pop_front() else {
            return Ok(());
        };
        let msg = match job {
            Job::Barrier if fail => Msg::Rebased(Err(UNAVAILABLE)),
            Job::Barrier => {
                let gen = self.writer.next_gen;
                self.writer.next_gen += 1;
                self.writer.min_gen = gen;
                Msg::Rebased(Ok(Barrier {
                    latest_seq: self.disk.len() as u64,
                    gen,
                }))
            }
            Job::Append(a) => {
                let from = a.rows.first().map_or(0, |r| r.seq);
                if a.append_gen < self.writer.min_gen {
                    Msg::Failed {
                        gen: a.append_gen,
                        from,
                    }
                } else if fail {
                    self.writer.min_gen = self.writer.min_gen.max(a.append_gen + 1);
                    Msg::Failed {
                        gen: a.append_gen,
                        from,
                    }
                } else {
                    let upto = self.write(&a)?;
                    Msg::Committed {
                        gen: a.append_gen,
                        upto,
                    }
                }
            }
        };
        self.mailbox.push_back(msg);
        Ok(())
    }

    /// Writes an append to the store, which must continue it without a
    /// gap or an overlap.
    fn write(&mut self, a: &Append) -> Result<u64, TestCaseError> {
        prop_assert!(!a.rows.is_empty(), "an empty append");
        for row in &a.rows {
            prop_assert_eq!(
                row.seq,
                self.disk.len() as u64 + 1,
                "append {:?} does not continue the store",
                a.rows.iter().map(|r| r.seq).collect::<Vec<_>>()
            );
            let id = id_of(row);
            prop_assert!(!self.disk.contains(&id), "event {} written twice", id);
            prop_assert!(!self.dropped.contains(&id), "dropped event {} written", id);
            self.disk.push(id);
        }
        Ok(self.disk.len() as u64)
    }

    fn crash(&mut self, commit: bool) -> Result<(), TestCaseError> {
        if !self.writer.alive {
            return Ok(());
        }
        self.writer.alive = false;
        let mut queue = std::mem::take(&mut self.writer.queue);
        if commit {
            if let Some(Job::Append(a)) = queue.front() {
                if a.append_gen >= self.writer.min_gen {
                    self.write(a)?;
                }
                queue.pop_front();
            }
        }
        // A barrier call to a dead writer fails.
        for job in queue {
            if let Job::Barrier = job {
                self.mailbox.push_back(Msg::Rebased(Err(UNAVAILABLE)));
            }
        }
        Ok(())
    }

    fn up(&mut self) -> Result<(), TestCaseError> {
        if self.writer.alive {
            return Ok(());
        }
        self.writers += 1;
        self.writer = Writer::new(self.writers);
        self.mailbox.push_back(Msg::WriterRestarted);
        self.send();
        Ok(())
    }

    fn deliver(&mut self, msg: Msg) -> Result<(), TestCaseError> {
        let current = Some(self.writer.id);
        match msg {
            Msg::Committed { gen, upto } => {
                let released = self.p.committed(gen, upto);
                self.release(released)?;
            }
            Msg::Failed { gen, from } => {
                if let Some(d) = self.p.append_failed(gen, from) {
                    for (seq, row) in &d.events {
                        prop_assert_eq!(*seq, row.seq);
                        let id = id_of(row);
                        prop_assert!(
                            !self.fanned_set.contains(&id),
                            "{} dropped after it went out",
                            id
                        );
                        self.dropped.insert(id);
                    }
                    for w in d.failed {
                        self.answer(w, false)?;
                    }
                    for w in d.settled {
                        self.answer(w, true)?;
                    }
                }
            }
            Msg::WriterRestarted => {
                if self.p.writer_restarted(current) {
                    if self.writer.alive {
                        self.writer.queue.push_back(Job::Barrier);
                    } else {
                        self.mailbox.push_back(Msg::Rebased(Err(UNAVAILABLE)));
                    }
                }
            }
            Msg::Rebased(barrier) => match self.p.rebased(current, barrier, same) {
                Rebase::Unneeded => {}
                Rebase::Retry { .. } => self.mailbox.push_back(Msg::WriterRestarted),
                Rebase::Rebased { released, .. } => self.release(released)?,
            },
        }
        Ok(())
    }

    fn release(&mut self, released: Released<EventRow, u64, u64>) -> Result<(), TestCaseError> {
        for frame in released.frames {
            match frame {
                Frame::Durable { seq, item } => self.fan_out(id_of(&item), Some(seq))?,
                Frame::Transient(id) => self.fan_out(id, None)?,
            }
        }
        for w in released.answered {
            self.answer(w, true)?;
        }
        Ok(())
    }

    fn fan_out(&mut self, id: u64, seq: Option<u64>) -> Result<(), TestCaseError> {
        prop_assert!(self.fanned_set.insert(id), "{} went out twice", id);
        if let Some(&last) = self.fanned.last() {
            prop_assert!(id > last, "{} went out after {}", id, last);
        }
        // Every durable event emitted before it is out already or dropped.
        for earlier in 0..id {
            if self.emitted[earlier as usize] {
                prop_assert!(
                    self.fanned_set.contains(&earlier) || self.dropped.contains(&earlier),
                    "{} went out while durable {} was pending",
                    id,
                    earlier
                );
            }
        }
        if let Some(seq) = seq {
            prop_assert!(self.emitted[id as usize], "a transient event with a seq");
            prop_assert_eq!(self.disk.get(seq as usize - 1), Some(&id), "not on disk");
            prop_assert_eq!(seq, self.fanned_seq + 1, "a gap in the seqs that went out");
            self.fanned_seq = seq;
        } else {
            prop_assert!(
                !self.emitted[id as usize],
                "a durable event without its seq"
            );
        }
        self.fanned.push(id);
        Ok(())
    }

    fn answer(&mut self, w: u64, ok: bool) -> Result<(), TestCaseError> {
        let n = self.answers.entry(w).or_insert(0);
        *n += 1;
        prop_assert_eq!(*n, 1, "waiter {} answered twice", w);
        match self.waits[w as usize] {
            Wait::Event(id) if ok => {
                prop_assert!(
                    self.disk.contains(&id),
                    "waiter {} answered before {} is on disk",
                    w,
                    id
                );
                prop_assert!(
                    self.fanned_set.contains(&id),
                    "waiter {} answered before {} went out",
                    w,
                    id
                );
            }
            Wait::Event(id) => {
                prop_assert!(
                    self.dropped.contains(&id),
                    "waiter {} failed but {} was kept",
                    w,
                    id
                );
            }
            Wait::Settled => {
                prop_assert!(ok, "a flush failed");
                prop_assert!(
                    self.p.is_settled(),
                    "flush {} answered with events pending",
                    w
                );
            }
        }
        Ok(())
    }

    /// Brings the writer back and lets everything finish, without failures.
    fn settle(&mut self) -> Result<(), TestCaseError> {
        for _ in 0..10_000 {
            if !self.writer.alive {
                self.up()?;
            } else if !self.writer.queue.is_empty() {
                self.writer_step(false)?;
            } else if let Some(msg) = self.mailbox.pop_front() {
                self.deliver(msg)?;
                self.send();
            } else {
                return Ok(());
            }
        }
        Err(TestCaseError::fail("the pipeline never settles"))
    }

    fn check_settled(&self) -> Result<(), TestCaseError> {
        prop_assert!(self.p.is_quiet(), "not quiet once everything settled");
        prop_assert_eq!(self.p.committed_seq(), self.disk.len() as u64);
        prop_assert_eq!(self.p.next_seq(), self.disk.len() as u64 + 1);
        let out: Vec<u64> = self
            .fanned
            .iter()
            .copied()
            .filter(|id| self.emitted[*id as usize])
            .collect();
        prop_assert_eq!(
            &out,
            &self.disk,
            "the durable frames that went out are the store"
        );
        for (id, durable) in self.emitted.iter().enumerate() {
            let id = id as u64;
            let out = self.fanned_set.contains(&id);
            if *durable {
                prop_assert!(out != self.dropped.contains(&id), "{} both or neither", id);
            } else if !out {
                // A transient frame is lost only with a durable one before it.
                prop_assert!(
                    (0..id).any(|e| self.dropped.contains(&e)),
                    "transient {} lost",
                    id
                );
            }
        }
        for w in 0..self.waits.len() as u64 {
            prop_assert_eq!(self.answers.get(&w), Some(&1), "waiter {} not answered", w);
        }
        Ok(())
    }
}

fn run(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let mut m = Model::new();
    for op in ops {
        m.run(op)?;
    }
    m.settle()?;
    m.check_settled()?;
    // Whatever happened, a store that takes writes again gets the next event.
    m.run(Op::Durable { wait: true })?;
    m.settle()?;
    m.check_settled()?;
    let last = m.emitted.len() as u64 - 1;
    prop_assert_eq!(
        m.disk.last(),
        Some(&last),
        "the session cannot write any more"
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn frames_go_out_in_order_once_on_disk_and_exactly_once(
        ops in proptest::collection::vec(op(0.2, 1), 0..120)
    ) {
        run(ops)?;
    }

    #[test]
    fn failing_appends_leave_no_gap_and_answer_every_waiter(
        ops in proptest::collection::vec(op(0.6, 0), 0..120)
    ) {
        run(ops)?;
    }

    #[test]
    fn writer_restarts_lose_nothing_and_double_nothing(
        ops in proptest::collection::vec(op(0.1, 4), 0..120)
    ) {
        run(ops)?;
    }
}
