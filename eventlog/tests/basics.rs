//! The log's contract without crashes: appends, reads from any seq across sealed segments and
//! the active one, reopening from the checkpoint, refusals, the catch-up scan.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use tether_eventlog::fs::OsFs;
use tether_eventlog::sim::SimFs;
use tether_eventlog::{open, CommitPolicy, LogError, LogOptions, Record, RecordKind};

#[test]
fn events_read_back_from_any_seq_across_segments_and_after_reopening() {
    let fs = SimFs::new(1);
    let lives = [life(1, 0), life(2, 0), life(2, 1), life(3, 7)];
    {
        let (log, report) = open_sim(&fs, 2048).unwrap();
        assert_eq!(report.next_commit, 1);
        for seq in 1..=60u64 {
            for (i, l) in lives.iter().enumerate() {
                // Life 3 writes only every third round, so it spans segments sparsely.
                if i == 3 && seq > 20 {
                    continue;
                }
                log.append(vec![event(*l, seq, 20 + (seq as usize * 7) % 200)])
                    .unwrap();
            }
        }
        assert!(
            segment_files(&fs).len() > 5,
            "the test needs sealed segments"
        );
        check(&log, &lives);
    }
    let (log, report) = open_sim(&fs, 2048).unwrap();
    assert_eq!(report.torn_tail, None);
    assert!(report.rebuilt_indexes.is_empty());
    assert_eq!(report.lives, 4);
    check(&log, &lives);
    // And it goes on where it was.
    log.append(vec![event(lives[0], 61, 10)]).unwrap();
    assert_eq!(log.latest_seq(&lives[0]), Some(61));
}

fn check(log: &tether_eventlog::Log, lives: &[tether_eventlog::Life]) {
    for (i, l) in lives.iter().enumerate() {
        let last = if i == 3 { 20 } else { 60 };
        assert_eq!(log.latest_seq(l), Some(last));
        for page in [1, 7, 100] {
            let all = read_all(log, l, page).unwrap();
            let seqs: Vec<u64> = all.iter().map(|r| r.seq).collect();
            assert_eq!(seqs, (1..=last).collect::<Vec<_>>());
            for r in &all {
                assert_eq!(r.body, body(l, r.seq, 20 + (r.seq as usize * 7) % 200));
            }
        }
        for from in 1..=last + 1 {
            let got = log.read(l, from, 3).unwrap();
            let want: Vec<u64> = (from..=last).take(3).collect();
            assert_eq!(got.iter().map(|r| r.seq).collect::<Vec<_>>(), want);
        }
    }
    assert!(log.read(&life(9, 0), 1, 10).unwrap().is_empty());
}

#[test]
fn an_append_out_of_seq_is_refused_alone() {
    let fs = SimFs::new(2);
    let (log, _) = open_sim(&fs, 1 << 20).unwrap();
    let a = life(1, 0);
    let b = life(2, 0);
    log.append(vec![event(a, 1, 10)]).unwrap();
    // Queued together so they share a commit: the bad one is refused, the others commit.
    let p1 = log.submit(vec![event(a, 3, 10)]);
    let p2 = log.submit(vec![event(b, 1, 10), event(b, 2, 10)]);
    let p3 = log.submit(vec![event(a, 2, 10)]);
    assert!(matches!(
        p1.wait(),
        Err(LogError::SeqConflict {
            expected: 2,
            got: 3
        })
    ));
    p2.wait().unwrap();
    p3.wait().unwrap();
    assert_eq!(log.latest_seq(&a), Some(2));
    assert_eq!(log.latest_seq(&b), Some(2));
    // A change may not claim a seq its life has not reached.
    let change = |seq| Record {
        life: a,
        seq,
        kind: RecordKind::Change,
        body: b"title".to_vec(),
    };
    assert!(log.append(vec![change(3)]).is_err());
    log.append(vec![change(2)]).unwrap();
}

#[test]
fn the_scan_returns_every_commit_with_its_changes_in_order() {
    let fs = SimFs::new(3);
    let (log, _) = open_sim(&fs, 1024).unwrap();
    let a = life(1, 0);
    let mut commits = Vec::new();
    for seq in 1..=40u64 {
        let change = Record {
            life: a,
            seq,
            kind: RecordKind::Change,
            body: format!("status {seq}").into_bytes(),
        };
        let c = log.append(vec![event(a, seq, 50), change]).unwrap();
        commits.push(c);
    }
    let mut seen = Vec::new();
    log.scan(commits[10].commit, |commit, position, records| {
        seen.push((commit, position, records));
        true
    })
    .unwrap();
    assert_eq!(seen.len(), 30);
    for ((commit, position, records), want) in seen.iter().zip(&commits[10..]) {
        assert_eq!(*commit, want.commit);
        assert_eq!(*position, want.position);
        assert_eq!(records.len(), 2);
        assert_eq!(
            records[1].body,
            format!("status {}", records[0].seq).into_bytes()
        );
    }
    assert!(log.verify().is_empty());
}

#[test]
fn both_policies_commit_everything_from_many_threads_on_a_real_disk() {
    for policy in [
        CommitPolicy::default(),
        CommitPolicy::Interval {
            every: Duration::from_millis(1),
            max_bytes: 1 << 20,
        },
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let options = LogOptions {
            segment_bytes: 64 << 10,
            policy,
        };
        {
            let (log, _) = open(tmp.path(), Arc::new(OsFs), options.clone()).unwrap();
            std::thread::scope(|s| {
                for t in 0..4u8 {
                    let log = &log;
                    s.spawn(move || {
                        let l = life(t, 0);
                        for seq in 1..=200 {
                            log.append(vec![event(l, seq, 280)]).unwrap();
                        }
                    });
                }
            });
        }
        let (log, report) = open(tmp.path(), Arc::new(OsFs), options).unwrap();
        assert_eq!(report.torn_tail, None);
        for t in 0..4u8 {
            let all = read_all(&log, &life(t, 0), 64).unwrap();
            assert_eq!(all.len(), 200);
            assert!(all
                .iter()
                .zip(1..)
                .all(|(r, s)| r.seq == s && r.body == body(&r.life, s, 280)));
        }
        assert!(log.verify().is_empty());
    }
}

#[test]
fn reads_during_appends_and_rolls_see_whole_gap_free_streams() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let fs = SimFs::new(5);
    let (log, _) = open_sim(&fs, 1500).unwrap();
    let lives = [life(1, 0), life(2, 0)];
    let size = |seq: u64| 20 + (seq as usize % 90);
    let done = AtomicBool::new(false);
    let reads = std::thread::scope(|s| {
        let (log, done) = (&log, &done);
        let reader = s.spawn(move || {
            let mut rng = tether_eventlog::sim::Rng::new(5);
            let mut reads = 0;
            while !done.load(Ordering::Relaxed) {
                let l = lives[rng.below(2) as usize];
                let latest = log.latest_seq(&l).unwrap_or(0);
                let from = 1 + rng.below(latest + 1);
                let got = log.read(&l, from, 1 + rng.below(40) as usize).unwrap();
                for (r, seq) in got.iter().zip(from..) {
                    assert_eq!(r.seq, seq);
                    assert_eq!(r.body, body(&l, seq, size(seq)));
                }
                reads += 1;
            }
            reads
        });
        let writers: Vec<_> = lives
            .iter()
            .map(|l| {
                s.spawn(move || {
                    for seq in 1..=300 {
                        log.append(vec![event(*l, seq, size(seq))]).unwrap();
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        done.store(true, Ordering::Relaxed);
        reader.join().unwrap()
    });
    assert!(reads > 0);
    assert!(
        segment_files(&fs).len() >= 10,
        "the appends must roll segments"
    );
}
