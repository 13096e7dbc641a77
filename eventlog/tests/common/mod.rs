//! Helpers shared by the event log's suites.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tether_eventlog::sim::SimFs;
use tether_eventlog::{open, CommitPolicy, Life, Log, LogOptions, OpenReport, Record, RecordKind};

pub fn dir() -> PathBuf {
    PathBuf::from("/log")
}

pub fn life(n: u8, generation: u32) -> Life {
    Life {
        id: [n; 16],
        generation,
    }
}

/// The body of a life's event `seq`: recognisable, and of a size that varies with `seq`.
pub fn body(life: &Life, seq: u64, size: usize) -> Vec<u8> {
    let mut b = format!("{}/{}/{seq}:", life.id[0], life.generation).into_bytes();
    b.resize(size.max(b.len()), b'a' + (seq % 26) as u8);
    b
}

pub fn event(life: Life, seq: u64, size: usize) -> Record {
    Record {
        life,
        seq,
        kind: RecordKind::Event,
        body: body(&life, seq, size),
    }
}

pub fn options(segment_bytes: u64) -> LogOptions {
    LogOptions {
        segment_bytes,
        policy: CommitPolicy::Adaptive {
            max_wait: Duration::from_micros(200),
            target_bytes: 4096,
            max_bytes: 1 << 20,
        },
    }
}

pub fn open_sim(
    fs: &SimFs,
    segment_bytes: u64,
) -> Result<(Log, OpenReport), tether_eventlog::LogError> {
    open(&dir(), Arc::new(fs.clone()), options(segment_bytes))
}

/// Every event of `life`, read in pages of `page`.
pub fn read_all(
    log: &Log,
    life: &Life,
    page: usize,
) -> Result<Vec<Record>, tether_eventlog::LogError> {
    let mut out: Vec<Record> = Vec::new();
    let mut from = 1;
    loop {
        let got = log.read(life, from, page)?;
        let Some(last) = got.last() else {
            return Ok(out);
        };
        from = last.seq + 1;
        out.extend(got);
    }
}

/// The number of runs of a randomized proof: `default` in CI, more with the variable set.
pub fn runs(default: u64) -> u64 {
    std::env::var("TETHER_EVENTLOG_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

pub fn segment_files(fs: &SimFs) -> Vec<PathBuf> {
    fs.paths()
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect()
}

pub fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}
