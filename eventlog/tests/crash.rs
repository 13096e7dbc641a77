//! The crash proofs, on the simulated disk (`tether_eventlog::sim`). `TETHER_EVENTLOG_RUNS`
//! sets how many random runs the randomized ones make (CI: the default below).
//!
//! 1. Every cut inside the last commit (and inside a segment's index written at a roll)
//!    reopens with every earlier commit whole and nothing of the cut one.
//! 2. A flipped bit anywhere is detected and reported for a range that holds it; nothing
//!    wrong is ever served.
//! 3. A power cut at a random point, under concurrent sessions, with torn pages: every
//!    acknowledged record is there after reopening, gap-free per session.
//! 4. A failed fdatasync: the commit is refused, nothing of it is ever readable, the next
//!    commit is good.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use tether_eventlog::fs::FileSystem;
use tether_eventlog::sim::{Rng, SimFs};
use tether_eventlog::{open, CommitPolicy, Life, LogError, LogOptions, Record, RecordKind};

/// Writes `commits` commits of a few lives, returning what each life holds.
fn fill(fs: &SimFs, segment_bytes: u64, commits: u64) -> HashMap<Life, u64> {
    let (log, _) = open_sim(fs, segment_bytes).unwrap();
    let lives = [life(1, 0), life(2, 0), life(2, 1)];
    let mut latest = HashMap::new();
    for c in 0..commits {
        let l = lives[(c % 3) as usize];
        let seq = latest.get(&l).copied().unwrap_or(0) + 1;
        let mut records = vec![event(l, seq, 30 + (c as usize * 13) % 120)];
        if c % 4 == 0 {
            records.push(event(l, seq + 1, 10));
        }
        let last = records.last().map_or(seq, |r| r.seq);
        log.append(records).unwrap();
        latest.insert(l, last);
    }
    latest
}

fn assert_holds(log: &tether_eventlog::Log, latest: &HashMap<Life, u64>) {
    for (l, last) in latest {
        let all = read_all(log, l, 5).unwrap();
        assert_eq!(all.len() as u64, *last, "life {l:?}");
        for (r, seq) in all.iter().zip(1..) {
            assert_eq!(r.seq, seq);
            assert!(r.body.starts_with(&body(l, seq, 0)));
        }
    }
}

#[test]
fn proof1_every_cut_inside_the_last_commit_drops_it_whole() {
    let fs = SimFs::new(11);
    let before = fill(&fs, 1 << 20, 20);
    let active = segment_files(&fs).pop().unwrap();
    let len_before = fs.read_file(&active).unwrap().len();
    // The last commit: two events of a new life, and one of an old one.
    let mut after = before.clone();
    {
        let (log, _) = open_sim(&fs, 1 << 20).unwrap();
        let l = life(1, 0);
        let next = before[&l] + 1;
        log.append(vec![
            event(life(9, 0), 1, 200),
            event(life(9, 0), 2, 5),
            event(l, next, 40),
        ])
        .unwrap();
        after.insert(l, next);
        after.insert(life(9, 0), 2);
    }
    let full = fs.read_file(&active).unwrap();
    assert!(full.len() > len_before);
    for cut in len_before..full.len() {
        let image = fs.crash_image(0);
        image.write_file(&active, full[..cut].to_vec());
        let (log, report) = open_sim(&image, 1 << 20).unwrap();
        if cut > len_before {
            assert_eq!(
                report.torn_tail,
                Some((active.clone(), len_before as u64, cut as u64))
            );
        }
        assert_holds(&log, &before);
        assert_eq!(log.latest_seq(&life(9, 0)), None, "cut at {cut}");
    }
    let (log, _) = open_sim(&fs.crash_image(0), 1 << 20).unwrap();
    assert_holds(&log, &after);
}

#[test]
fn proof1_every_cut_inside_a_rolls_index_keeps_every_commit() {
    // Commits until one seals its segment: the index written then is the last write.
    let fs = SimFs::new(12);
    let mut latest = HashMap::new();
    let l = life(4, 2);
    for seq in 1.. {
        let segments = segment_files(&fs).len();
        // Closed after each append, so a roll the commit started has finished (the writer
        // acknowledges a commit before it rolls).
        let (log, _) = open_sim(&fs, 1500).unwrap();
        log.append(vec![event(l, seq, 100)]).unwrap();
        drop(log);
        latest.insert(l, seq);
        if seq > 20 && segment_files(&fs).len() > segments {
            break;
        }
    }
    let indexes: Vec<PathBuf> = fs
        .paths()
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "idx"))
        .collect();
    let idx = indexes.last().unwrap().clone();
    let next_segment = segment_files(&fs).pop().unwrap();
    let full = fs.read_file(&idx).unwrap();
    for cut in 0..full.len() {
        // The crash came while the index was written: the next segment does not exist yet.
        let image = fs.crash_image(0);
        image.remove(&next_segment).unwrap();
        image.write_file(&idx, full[..cut].to_vec());
        let (log, _) = open_sim(&image, 1500).unwrap();
        assert_holds(&log, &latest);
        assert!(log.verify().is_empty(), "cut at {cut}");
    }
}

#[test]
fn proof2_a_flipped_bit_anywhere_is_detected_and_never_served() {
    let fs = SimFs::new(21);
    let latest = fill(&fs, 1000, 60);
    let mut rng = Rng::new(21);
    let files = fs.paths();
    assert!(
        files.len() >= 5,
        "the test needs sealed segments and indexes"
    );
    let mut flips = 0;
    for path in &files {
        let bytes = fs.read_file(path).unwrap();
        for at in 0..bytes.len() {
            let image = fs.crash_image(0);
            let mut bad = bytes.clone();
            bad[at] ^= 1 << rng.below(8);
            image.write_file(path, bad);
            flips += 1;
            let holds = |d: &tether_eventlog::Damage| {
                d.file == *path && d.start <= at as u64 && (at as u64) < d.end.max(d.start + 1)
            };
            match open_sim(&image, 1000) {
                Err(LogError::Damaged(d)) => {
                    assert!(holds(&d), "flip at {at} of {path:?} reported as {d}");
                    continue;
                }
                Err(e) => panic!("flip at {at} of {path:?}: {e}"),
                Ok((log, report)) => {
                    let torn = report
                        .torn_tail
                        .as_ref()
                        .is_some_and(|(p, s, e)| p == path && *s <= at as u64 && (at as u64) < *e);
                    let rebuilt = report
                        .rebuilt_indexes
                        .iter()
                        .any(|s| file_name(path).starts_with(&format!("{s:010}.idx")));
                    let unfinished = report
                        .unfinished_segment
                        .is_some_and(|s| file_name(path) == format!("{s:010}.log"));
                    let damage = log.verify();
                    let verified = damage.iter().any(holds);
                    assert!(
                        torn || rebuilt || unfinished || verified,
                        "flip at {at} of {path:?} not detected: {damage:?}"
                    );
                    // Whatever is served is what was written.
                    for (l, last) in &latest {
                        match read_all(&log, l, 4) {
                            Ok(all) => {
                                for (r, seq) in all.iter().zip(1..) {
                                    assert_eq!(r.seq, seq);
                                    assert!(r.body.starts_with(&body(l, seq, 0)));
                                }
                                if !torn {
                                    assert_eq!(all.len() as u64, *last);
                                }
                            }
                            Err(LogError::Damaged(d)) => assert!(holds(&d) || verified),
                            Err(e) => panic!("{e}"),
                        }
                    }
                }
            }
        }
    }
    assert!(flips > 3000);
}

/// One run of proof 3: returns whether the crash point was reached.
fn crash_run(seed: u64) -> bool {
    let mut rng = Rng::new(seed);
    let fs = SimFs::new(seed);
    let segment_bytes = 1024 + rng.below(4096);
    let policy = if rng.below(2) == 0 {
        CommitPolicy::Adaptive {
            max_wait: Duration::from_micros(rng.below(300)),
            target_bytes: 512 + rng.below(4096) as usize,
            max_bytes: 8192,
        }
    } else {
        CommitPolicy::Interval {
            every: Duration::from_micros(rng.below(300)),
            max_bytes: 8192,
        }
    };
    let options = LogOptions {
        segment_bytes,
        policy,
    };
    let fail_sync_after = rng.below(4) == 0;
    fs.crash_at(1 + rng.below(400));
    let lives = [life(1, 0), life(2, 0), life(2, 1), life(3, 0)];
    let acked: Vec<u64> = {
        let Ok((log, _)) = open(&dir(), Arc::new(fs.clone()), options.clone()) else {
            // The crash came while the log was being created: nothing was acknowledged.
            let image = fs.crash_image(seed);
            open(&dir(), Arc::new(image), options).expect("a log cut while created opens");
            return true;
        };
        std::thread::scope(|s| {
            let handles: Vec<_> = lives
                .iter()
                .enumerate()
                .map(|(t, l)| {
                    let (log, fs) = (&log, &fs);
                    let mut rng = Rng::new(seed ^ ((t as u64 + 1) * 7919));
                    s.spawn(move || {
                        let mut acked = 0u64;
                        let mut seq = 0u64;
                        for i in 0..60 {
                            if fail_sync_after && t == 0 && i == 10 {
                                fs.fail_syncs(1);
                            }
                            let n = 1 + rng.below(3);
                            let mut records: Vec<Record> = (1..=n)
                                .map(|k| event(*l, seq + k, 5 + rng.below(300) as usize))
                                .collect();
                            if rng.below(3) == 0 {
                                records.push(Record {
                                    life: *l,
                                    seq: seq + n,
                                    kind: RecordKind::Change,
                                    body: b"row".to_vec(),
                                });
                            }
                            match log.append(records) {
                                Ok(_) => {
                                    seq += n;
                                    acked = seq;
                                }
                                Err(LogError::Io { .. }) if !fs.crashed() => {}
                                Err(_) => break,
                            }
                        }
                        acked
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        })
    };
    let crashed = fs.crashed();
    let image = fs.crash_image(rng.next_u64());
    let (log, _) = open(&dir(), Arc::new(image.clone()), options.clone())
        .unwrap_or_else(|e| panic!("seed {seed}: reopening failed: {e}"));
    for (l, acked) in lives.iter().zip(&acked) {
        let all = read_all(&log, l, 1 + (seed % 16) as usize)
            .unwrap_or_else(|e| panic!("seed {seed}: reading failed: {e}"));
        assert!(
            all.len() as u64 >= *acked,
            "seed {seed}: {l:?} lost acknowledged records"
        );
        for (r, seq) in all.iter().zip(1..) {
            assert_eq!(r.seq, seq, "seed {seed}: gap");
            assert!(r.body.starts_with(&body(l, seq, 0)), "seed {seed}");
        }
    }
    // And the recovered log takes commits and survives another reopening.
    let l = lives[0];
    let next = log.latest_seq(&l).unwrap_or(0) + 1;
    log.append(vec![event(l, next, 20)])
        .unwrap_or_else(|e| panic!("seed {seed}: append after recovery: {e}"));
    drop(log);
    let (log, _) = open(&dir(), Arc::new(image), options).unwrap();
    assert_eq!(log.latest_seq(&l), Some(next), "seed {seed}");
    crashed
}

#[test]
fn proof3_a_power_cut_anywhere_keeps_every_acknowledged_record() {
    let runs = runs(300);
    let crashed = (0..runs).filter(|seed| crash_run(*seed)).count();
    // Most runs must actually crash, or the proof proves little.
    assert!(
        crashed as u64 * 2 > runs,
        "{crashed} of {runs} runs crashed"
    );
}

#[test]
fn proof4_a_failed_fdatasync_refuses_the_commit_for_good() {
    for seed in 0..runs(40) {
        let fs = SimFs::new(seed);
        let a = life(1, 0);
        let refused_body = b"REFUSED".to_vec();
        let (log, _) = open_sim(&fs, 1 << 20).unwrap();
        for seq in 1..=5 {
            log.append(vec![event(a, seq, 40)]).unwrap();
        }
        fs.fail_syncs(1);
        let refused = Record {
            life: a,
            seq: 6,
            kind: RecordKind::Event,
            body: refused_body.clone(),
        };
        assert!(matches!(
            log.append(vec![refused]),
            Err(LogError::Io { .. })
        ));
        assert_eq!(log.latest_seq(&a), Some(5));
        // The next commit is good, and takes seq 6 itself.
        log.append(vec![event(a, 6, 40)]).unwrap();
        log.append(vec![event(a, 7, 40)]).unwrap();
        let check = |log: &tether_eventlog::Log| {
            let all = read_all(log, &a, 3).unwrap();
            assert_eq!(all.len(), 7, "seed {seed}");
            assert!(all.iter().all(|r| r.body != refused_body), "seed {seed}");
            let mut scanned = 0;
            log.scan(0, |_, _, records| {
                assert!(
                    records.iter().all(|r| r.body != refused_body),
                    "seed {seed}"
                );
                scanned += records.len();
                true
            })
            .unwrap();
            assert_eq!(scanned, 7, "seed {seed}");
            assert!(log.verify().is_empty(), "seed {seed}");
        };
        check(&log);
        drop(log);
        // After a clean reopen, and after a power cut (the refused bytes may have reached the
        // disk anyway: the simulated sync failure persists them half the time).
        let (log, _) = open_sim(&fs, 1 << 20).unwrap();
        check(&log);
        drop(log);
        let (log, _) = open_sim(&fs.crash_image(seed), 1 << 20).unwrap();
        check(&log);
    }
}
