//! `tether bench log`: the event log on its own (the `tether-eventlog` crate).
//!
//! `--mode write` (default): bytes written to disk per record. S sessions each append R
//! records a second of `--record-bytes` (the record's body; the log adds a 40-byte header per
//! record and 24 bytes per commit) for T seconds, the sessions staggered evenly, each record
//! its own append (as the gateway's StoreWriter hands them over), from one generator thread
//! that never waits for a commit. Counted over the run: `write_bytes` of `/proc/self/io` (what
//! the kernel charges this process for the storage layer) and the sectors written of the log
//! directory's block device (`/sys/dev/block/MAJ:MIN/stat`: the filesystem's journal too,
//! and anything else on that disk meanwhile), each against the records' bodies; the commits
//! and each append's latency from its submission to its commit being durable.
//!
//! `--mode read`: the read p99 over a big log against a small one. Each log is filled with
//! sessions of equal length, `--in-progress` of them at a time, interleaved, then `--reads`
//! reads of a page of `--page` records from a random seq of a random session are timed,
//! after one untimed pass.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{Args, ValueEnum};
use serde_json::{json, Value};
use tether_eventlog::fs::OsFs;
use tether_eventlog::sim::Rng;
use tether_eventlog::{open, CommitPolicy, Life, Log, LogOptions, Record, RecordKind};

use crate::load::tally::summary_ms;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    Write,
    Read,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Policy {
    /// `CommitPolicy::Adaptive` (`--max-wait-us`, `--target-bytes`).
    Adaptive,
    /// `CommitPolicy::Interval` (`--interval-us`).
    Interval,
}

#[derive(Debug, Args)]
pub struct LogBench {
    #[arg(long, value_enum, default_value = "write")]
    pub mode: Mode,
    /// Sessions (write mode).
    #[arg(long, default_value_t = 100)]
    pub sessions: usize,
    /// Records a second per session (write mode).
    #[arg(long, default_value_t = 100.0)]
    pub rate: f64,
    /// Seconds of records (write mode).
    #[arg(long, default_value_t = 20.0)]
    pub secs: f64,
    /// Bytes of each record's body.
    #[arg(long, default_value_t = 280)]
    pub record_bytes: usize,
    #[arg(long, value_enum, default_value = "adaptive")]
    pub policy: Policy,
    /// The adaptive policy's longest gather under load.
    #[arg(long, default_value_t = 4000)]
    pub max_wait_us: u64,
    /// The adaptive policy's gather target.
    #[arg(long, default_value_t = 256 << 10)]
    pub target_bytes: usize,
    /// The interval policy's spacing of commits.
    #[arg(long, default_value_t = 1000)]
    pub interval_us: u64,
    /// Segment size, MiB.
    #[arg(long, default_value_t = 64)]
    pub segment_mib: u64,
    /// Records of the big log (read mode).
    #[arg(long, default_value_t = 10_000_000)]
    pub big_records: u64,
    /// Sessions of the big log (read mode).
    #[arg(long, default_value_t = 100_000)]
    pub big_sessions: u64,
    /// Records of the small log (read mode).
    #[arg(long, default_value_t = 100_000)]
    pub small_records: u64,
    /// Sessions of the small log (read mode).
    #[arg(long, default_value_t = 1_000)]
    pub small_sessions: u64,
    /// Sessions written at a time while filling (read mode): the sessions are filled in
    /// blocks of this many, interleaved within a block, as a gateway writes them over a long
    /// time; the number of sessions makes one block of all of them, the worst case, in which
    /// every session's records are spread over the whole log.
    #[arg(long, default_value_t = 1_000)]
    pub in_progress: u64,
    /// Reads timed per log (read mode).
    #[arg(long, default_value_t = 20_000)]
    pub reads: usize,
    /// Records per read (read mode).
    #[arg(long, default_value_t = 100)]
    pub page: usize,
    /// Seconds the block device's sectors written are sampled before the run with nothing
    /// of this process writing: the rate of the rest of the machine, subtracted from the
    /// run's count (`device_net_*`). 0: not sampled.
    #[arg(long, default_value_t = 0.0)]
    pub baseline_secs: f64,
    /// Directory the log is made in (on the disk to measure). Default: the current one.
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

pub fn run(b: LogBench) -> anyhow::Result<()> {
    let parent = b.dir.clone().unwrap_or_else(|| PathBuf::from("."));
    let out = match b.mode {
        Mode::Write => write(&b, &parent)?,
        Mode::Read => read(&b, &parent)?,
    };
    println!("{out}");
    Ok(())
}

fn options(b: &LogBench) -> LogOptions {
    let policy = match b.policy {
        Policy::Adaptive => CommitPolicy::Adaptive {
            max_wait: Duration::from_micros(b.max_wait_us),
            target_bytes: b.target_bytes,
            max_bytes: 8 << 20,
        },
        Policy::Interval => CommitPolicy::Interval {
            every: Duration::from_micros(b.interval_us),
            max_bytes: 8 << 20,
        },
    };
    LogOptions {
        segment_bytes: b.segment_mib << 20,
        policy,
    }
}

fn life(n: u64) -> Life {
    let mut id = [0u8; 16];
    id[..8].copy_from_slice(&n.to_be_bytes());
    Life { id, generation: 0 }
}

fn record(session: u64, seq: u64, bytes: usize) -> Record {
    let mut body = format!("{{\"session\":{session},\"seq\":{seq},\"payload\":\"").into_bytes();
    body.resize(bytes.saturating_sub(2).max(body.len()), b'x');
    body.extend_from_slice(b"\"}");
    Record {
        life: life(session),
        seq,
        kind: RecordKind::Event,
        body,
    }
}

fn write(b: &LogBench, parent: &Path) -> anyhow::Result<Value> {
    let tmp = tempfile::Builder::new()
        .prefix("eventlog-bench")
        .tempdir_in(parent)
        .context("making the log directory")?;
    let (log, _) = open(tmp.path(), Arc::new(OsFs), options(b))?;
    let device = Device::of(tmp.path());
    let sessions = b.sessions as u64;
    let total = (b.rate * b.secs).round() as u64 * sessions;
    let latencies = Arc::new(Mutex::new(Vec::with_capacity(total as usize)));
    let acked = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let first_commit = log.next_commit();
    let background = match &device {
        Some(d) if b.baseline_secs > 0.0 => {
            let before = d.sectors_written()?;
            std::thread::sleep(Duration::from_secs_f64(b.baseline_secs));
            Some((d.sectors_written()? - before) as f64 * 512.0 / b.baseline_secs)
        }
        _ => None,
    };
    let io_before = write_bytes()?;
    let dev_before = device.as_ref().map(Device::sectors_written).transpose()?;
    let t0 = Instant::now();
    let mut body_bytes = 0u64;
    for i in 0..total {
        let (round, session) = (i / sessions, i % sessions);
        let due =
            Duration::from_secs_f64((round as f64 + session as f64 / sessions as f64) / b.rate);
        if let Some(wait) = due.checked_sub(t0.elapsed()) {
            std::thread::sleep(wait);
        }
        let r = record(session, round + 1, b.record_bytes);
        body_bytes += r.body.len() as u64;
        let submitted = Instant::now();
        let (latencies, acked, failed) = (latencies.clone(), acked.clone(), failed.clone());
        log.submit_then(
            vec![r],
            Box::new(move |result| {
                if result.is_ok() {
                    let us = submitted.elapsed().as_micros().min(u128::from(u32::MAX)) as u32;
                    if let Ok(mut l) = latencies.lock() {
                        l.push(us);
                    }
                    acked.fetch_add(1, Ordering::Relaxed);
                } else {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
            }),
        );
    }
    while acked.load(Ordering::Relaxed) + failed.load(Ordering::Relaxed) < total {
        std::thread::sleep(Duration::from_millis(5));
    }
    let elapsed = t0.elapsed().as_secs_f64();
    let io = write_bytes()? - io_before;
    let dev = match (&device, dev_before) {
        (Some(d), Some(before)) => Some((d.sectors_written()? - before) * 512),
        _ => None,
    };
    let commits = log.next_commit() - first_commit;
    let net = dev
        .zip(background)
        .map(|(d, bg)| (d as f64 - bg * elapsed).max(0.0) as u64);
    drop(log);
    anyhow::ensure!(failed.load(Ordering::Relaxed) == 0, "appends failed");
    let lat = latencies.lock().map(|l| l.clone()).unwrap_or_default();
    let per = |bytes: u64| bytes as f64 / total as f64;
    let ratio = |bytes: u64| (bytes as f64 / body_bytes as f64 * 100.0).round() / 100.0;
    Ok(json!({
        "bench": "log",
        "mode": "write",
        "sessions": b.sessions,
        "rate_per_session": b.rate,
        "secs": b.secs,
        "elapsed_s": (elapsed * 100.0).round() / 100.0,
        "policy": format!("{:?}", options(b).policy),
        "records": total,
        "record_body_bytes": per(body_bytes),
        "commits": commits,
        "records_per_commit": (total as f64 / commits.max(1) as f64 * 10.0).round() / 10.0,
        "write_bytes": io,
        "write_bytes_per_record": per(io).round(),
        "write_bytes_x_body": ratio(io),
        "device": device.as_ref().map(|d| d.name.clone()),
        "device_bytes": dev,
        "device_bytes_per_record": dev.map(|d| per(d).round()),
        "device_bytes_x_body": dev.map(ratio),
        "device_background_bytes_per_s": background.map(|b| b.round()),
        "device_net_bytes_per_record": net.map(|d| per(d).round()),
        "device_net_bytes_x_body": net.map(ratio),
        "commit_latency_ms": summary_ms(lat),
    }))
}

/// Fills a log of `records` records over `sessions` sessions, interleaved.
fn fill(b: &LogBench, dir: &Path, records: u64, sessions: u64) -> anyhow::Result<Log> {
    let (log, _) = open(dir, Arc::new(OsFs), options(b))?;
    const BATCH: u64 = 2_000;
    let mut i = 0;
    let mut pending = Vec::new();
    while i < records {
        let n = BATCH.min(records - i);
        let batch = (i..i + n)
            .map(|k| {
                let (session, seq) = place(k, records / sessions, b.in_progress.min(sessions));
                record(session, seq, b.record_bytes)
            })
            .collect();
        pending.push(log.submit(batch));
        // Keep a few commits in flight, so the fill is not one sync per batch.
        if pending.len() >= 8 {
            for p in pending.drain(..) {
                p.wait()?;
            }
        }
        i += n;
    }
    for p in pending {
        p.wait()?;
    }
    Ok(log)
}

/// The session and seq of the fill's `k`-th record: blocks of `block` sessions of `per`
/// records each, interleaved within a block.
fn place(k: u64, per: u64, block: u64) -> (u64, u64) {
    let in_block = block.max(1) * per.max(1);
    let (b, within) = (k / in_block, k % in_block);
    (
        b * block.max(1) + within % block.max(1),
        within / block.max(1) + 1,
    )
}

fn time_reads(b: &LogBench, log: &Log, records: u64, sessions: u64) -> anyhow::Result<Value> {
    let mut rng = Rng::new(7);
    let per_session = records / sessions;
    let mut us = Vec::with_capacity(b.reads);
    let mut got = 0usize;
    for _ in 0..b.reads {
        let s = rng.below(sessions);
        let from = 1 + rng.below(per_session.max(1));
        let t = Instant::now();
        let page = log.read(&life(s), from, b.page)?;
        us.push(t.elapsed().as_micros().min(u128::from(u32::MAX)) as u32);
        got += page.len();
    }
    Ok(json!({
        "records": records,
        "sessions": sessions,
        "records_read": got,
        "read_ms": summary_ms(us),
    }))
}

fn read(b: &LogBench, parent: &Path) -> anyhow::Result<Value> {
    let mut out = Vec::new();
    for (records, sessions) in [
        (b.small_records, b.small_sessions),
        (b.big_records, b.big_sessions),
    ] {
        let tmp = tempfile::Builder::new()
            .prefix("eventlog-bench")
            .tempdir_in(parent)
            .context("making the log directory")?;
        let t = Instant::now();
        drop(fill(b, tmp.path(), records, sessions)?);
        let fill_s = t.elapsed().as_secs_f64();
        // Reopened, so the reads go through the checkpoint and the sealed indexes.
        let t = Instant::now();
        let (log, _) = open(tmp.path(), Arc::new(OsFs), options(b))?;
        let open_ms = t.elapsed().as_secs_f64() * 1000.0;
        // One untimed pass warms the page cache the same way for both logs.
        time_reads(b, &log, records, sessions)?;
        let mut v = time_reads(b, &log, records, sessions)?;
        v["fill_s"] = json!((fill_s * 10.0).round() / 10.0);
        v["open_ms"] = json!((open_ms * 10.0).round() / 10.0);
        out.push(v);
    }
    let p99 = |v: &Value| v["read_ms"]["p99"].as_f64().unwrap_or(f64::NAN);
    Ok(json!({
        "bench": "log",
        "mode": "read",
        "page": b.page,
        "in_progress": b.in_progress,
        "small": out[0],
        "big": out[1],
        "p99_big_over_small": ((p99(&out[1]) / p99(&out[0])) * 100.0).round() / 100.0,
    }))
}

fn write_bytes() -> anyhow::Result<u64> {
    let io = std::fs::read_to_string("/proc/self/io").context("read /proc/self/io")?;
    io.lines()
        .find_map(|l| l.strip_prefix("write_bytes:"))
        .and_then(|v| v.trim().parse().ok())
        .context("no write_bytes in /proc/self/io")
}

/// The block device a directory is on, for its sectors-written count.
struct Device {
    name: String,
    stat: PathBuf,
}

impl Device {
    fn of(dir: &Path) -> Option<Device> {
        use std::os::unix::fs::MetadataExt;
        let dev = std::fs::metadata(dir).ok()?.dev();
        // The glibc encoding of dev_t.
        let major = ((dev >> 32) & 0xffff_f000) | ((dev >> 8) & 0xfff);
        let minor = ((dev >> 12) & 0xffff_ff00) | (dev & 0xff);
        let stat = PathBuf::from(format!("/sys/dev/block/{major}:{minor}/stat"));
        stat.is_file().then(|| Device {
            name: format!("{major}:{minor}"),
            stat,
        })
    }

    /// Field 7 of the block device's stat: sectors (512 bytes) written.
    fn sectors_written(&self) -> anyhow::Result<u64> {
        let text = std::fs::read_to_string(&self.stat)
            .with_context(|| format!("read {}", self.stat.display()))?;
        text.split_whitespace()
            .nth(6)
            .and_then(|v| v.parse().ok())
            .context("no sectors written in the device's stat")
    }
}

#[cfg(test)]
mod tests {
    use super::place;
    use std::collections::HashMap;

    #[test]
    fn the_fill_gives_every_session_its_seqs_in_order() {
        for (sessions, per, block) in [(10u64, 7u64, 3u64), (12, 5, 4), (6, 4, 6)] {
            let mut next: HashMap<u64, u64> = HashMap::new();
            let blocks = sessions.div_ceil(block);
            for k in 0..blocks * block * per {
                let (s, seq) = place(k, per, block);
                let want = next.entry(s).or_insert(1);
                assert_eq!(seq, *want, "session {s}");
                *want += 1;
            }
            assert!(next.values().all(|n| *n == per + 1));
        }
    }
}
