//! `tether bench write-bytes`: bytes the gateway writes to disk per stored
//! event, next to what the events themselves take.
//!
//! A real gateway (`tether serve`, SQLite, `--synchronous full` unless
//! told otherwise, echo compute hosts) runs in its own process pinned to
//! one CPU; the generator, on another, creates S sessions and starts one
//! echo `/flood` turn in each (the real path: host process → gateway →
//! SQLite), R durable `tool.start` events a second per session for T
//! seconds, the sessions staggered evenly so the writer sees a steady
//! stream.
//!
//! What is counted: `write_bytes` of `/proc/<gateway>/io` (bytes the
//! kernel accounts to the process for the storage layer: the WAL, the
//! database file written by the checkpoints, everything) from just before
//! the prompts are submitted until every turn's `message.complete` is in
//! the store; then the WAL still pending is copied into the database by a
//! `wal_checkpoint(TRUNCATE)` run from this process, whose own
//! `write_bytes` are added, so what the gateway left in the WAL is counted
//! once, as the checkpoint it would have run. The WAL is emptied the same
//! way before the window, so the sessions' creation is not counted.
//!
//! Against that, the events stored meanwhile, read from the store: their
//! count, the sum of their payloads (the JSON text), and the sum of their
//! rows (payload, session id, type, turn and trace ids, and the two
//! integers at 8 bytes each), which is what the data needs.

use std::path::PathBuf;
use std::process::Child;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Args;
use serde_json::{json, Value};
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection, SqliteJournalMode};
use sqlx::{ConnectOptions, Connection, Row};

use crate::harness::on_pinned_thread;
use crate::load::conn::unix_micros;
use crate::load::publish::Schedule;
use crate::load::tether::{connect, create_sessions, flood};
use crate::store::cpu_label;

/// How often the store is polled for the turns' ends.
const POLL: Duration = Duration::from_millis(500);
/// How long after the last event was due the turns may take to end.
const DRAIN: Duration = Duration::from_secs(60);

#[derive(Debug, Args)]
pub struct WriteBytesBench {
    /// Sessions, one flood turn each.
    #[arg(long, default_value_t = 100)]
    pub sessions: usize,
    /// Durable events a second per session.
    #[arg(long, default_value_t = 100.0)]
    pub rate: f64,
    /// Seconds of events.
    #[arg(long, default_value_t = 20.0)]
    pub secs: f64,
    /// Size of each event's payload JSON, about.
    #[arg(long, default_value_t = 100)]
    pub payload_bytes: usize,
    /// Compute-host processes.
    #[arg(long, default_value_t = 2)]
    pub hosts: usize,
    /// `tether serve --synchronous`.
    #[arg(long, default_value = "full")]
    pub synchronous: String,
    /// More arguments for `tether serve` (repeat the flag), e.g.
    /// `--serve-arg=--commit-window-us=5000`.
    #[arg(long, allow_hyphen_values = true)]
    pub serve_arg: Vec<String>,
    /// Directory the gateway's data directory is made in: it must be on
    /// the disk to measure (a tmpfs writes nothing to disk). Default: the
    /// current directory.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// CPU the gateway (and its compute hosts) is pinned to.
    #[arg(long, default_value_t = 0)]
    pub server_cpu: usize,
    /// CPU the generator runs on.
    #[arg(long, default_value_t = 1)]
    pub client_cpu: usize,
}

/// The gateway's process, killed when dropped.
struct Gateway {
    child: Child,
    url: String,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn run(b: WriteBytesBench) -> anyhow::Result<()> {
    anyhow::ensure!(b.sessions > 0, "--sessions must be at least 1");
    anyhow::ensure!(
        b.rate > 0.0 && b.secs > 0.0,
        "--rate and --secs must be positive"
    );
    let parent = match &b.dir {
        Some(d) => d.clone(),
        None => std::env::current_dir()?,
    };
    let data = tempfile::Builder::new()
        .prefix("tether-write-bytes-")
        .tempdir_in(&parent)
        .with_context(|| format!("a data directory in {}", parent.display()))?;
    let gateway = start(&b, data.path())?;
    let pid = gateway.child.id();
    let db = data.path().join("tether.db");
    let url = gateway.url.clone();
    let args = (b.sessions, b.rate, b.secs, b.payload_bytes);
    let report = on_pinned_thread(b.client_cpu, move || -> anyhow::Result<Value> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        rt.block_on(measure(args, &url, pid, db))
    })?;
    drop(gateway);
    let mut out = json!({
        "scenario": "write-bytes",
        "sessions": b.sessions,
        "events_per_s_per_session": b.rate,
        "secs": b.secs,
        "payload_bytes_asked": b.payload_bytes,
        "synchronous": b.synchronous,
        "serve_args": b.serve_arg,
        "server_cpu": cpu_label(b.server_cpu),
        "client_cpu": cpu_label(b.client_cpu),
    });
    if let (Some(o), Value::Object(r)) = (out.as_object_mut(), report) {
        o.extend(r);
    }
    println!("{out}");
    Ok(())
}

fn start(b: &WriteBytesBench, data: &std::path::Path) -> anyhow::Result<Gateway> {
    let program = crate::tether_exe()?;
    let mut cmd = crate::harness::pinned_command(b.server_cpu, &program);
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data)
        .args(["--hosts", &b.hosts.to_string()])
        // One control connection creates every session and submits every
        // prompt.
        .args(["--rate-limit-rps", "0"])
        .args(["--synchronous", &b.synchronous])
        .args(&b.serve_arg);
    let (child, addr) = crate::load::server::spawn_listening(&mut cmd)?;
    Ok(Gateway {
        child,
        url: format!("ws://{addr}/ws"),
    })
}

/// What the store holds, summed over its events.
#[derive(Debug, Clone, Copy, Default)]
struct Stored {
    events: i64,
    payload_bytes: i64,
    row_bytes: i64,
}

async fn stored(conn: &mut SqliteConnection) -> anyhow::Result<Stored> {
    // `length` of a BLOB is its bytes (of TEXT it would be characters).
    let row = sqlx::query(
        "SELECT count(*), \
            COALESCE(SUM(length(CAST(payload AS BLOB))), 0), \
            COALESCE(SUM(length(CAST(payload AS BLOB)) + length(CAST(session_id AS BLOB)) \
              + length(CAST(type AS BLOB)) + COALESCE(length(CAST(turn_id AS BLOB)), 0) \
              + COALESCE(length(CAST(trace_id AS BLOB)), 0) + 16), 0) \
         FROM events",
    )
    .fetch_one(&mut *conn)
    .await?;
    Ok(Stored {
        events: row.try_get(0)?,
        payload_bytes: row.try_get(1)?,
        row_bytes: row.try_get(2)?,
    })
}

/// Group commits the gateway ran so far: the count of its commit-time
/// histogram on `/metrics` (fetched with a bare HTTP/1.0 GET).
async fn commits(http: &str) -> anyhow::Result<u64> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut tcp = tokio::net::TcpStream::connect(http).await?;
    tcp.write_all(format!("GET /metrics HTTP/1.0\r\nHost: {http}\r\n\r\n").as_bytes())
        .await?;
    let mut text = String::new();
    tcp.read_to_string(&mut text).await?;
    text.lines()
        .find_map(|l| l.strip_prefix("tether_store_commit_duration_seconds_count "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|v| v as u64)
        .context("no tether_store_commit_duration_seconds_count on /metrics")
}

/// `write_bytes` of `/proc/PID/io` (`self` for this process).
fn write_bytes(pid: &str) -> anyhow::Result<u64> {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io"))
        .with_context(|| format!("read /proc/{pid}/io"))?;
    io.lines()
        .find_map(|l| l.strip_prefix("write_bytes:"))
        .and_then(|v| v.trim().parse().ok())
        .context("no write_bytes in /proc/PID/io")
}

/// Copies the whole WAL into the database and empties it; the bytes this
/// process wrote doing so.
async fn checkpoint(conn: &mut SqliteConnection) -> anyhow::Result<u64> {
    let before = write_bytes("self")?;
    let row = sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
        .fetch_one(&mut *conn)
        .await?;
    let busy: i64 = row.try_get(0)?;
    if busy != 0 {
        bail!("the checkpoint could not finish (the gateway kept writing)");
    }
    Ok(write_bytes("self")? - before)
}

async fn completed_turns(conn: &mut SqliteConnection) -> anyhow::Result<i64> {
    Ok(
        sqlx::query_scalar("SELECT count(*) FROM events WHERE type = 'message.complete'")
            .fetch_one(&mut *conn)
            .await?,
    )
}

async fn measure(
    (sessions, rate, secs, payload_bytes): (usize, f64, f64, usize),
    url: &str,
    pid: u32,
    db: PathBuf,
) -> anyhow::Result<Value> {
    let pid_s = pid.to_string();
    let http = url
        .trim_start_matches("ws://")
        .trim_end_matches("/ws")
        .to_owned();
    let mut ctl = connect(url).await?;
    let ids = create_sessions(&mut ctl, sessions).await?;
    let mut store = SqliteConnectOptions::new()
        .filename(&db)
        .journal_mode(SqliteJournalMode::Wal)
        .busy_timeout(Duration::from_secs(30))
        .connect()
        .await
        .with_context(|| format!("open {}", db.display()))?;
    let page_size: i64 = sqlx::query_scalar("PRAGMA page_size")
        .fetch_one(&mut store)
        .await?;
    let turns_before = completed_turns(&mut store).await?;
    checkpoint(&mut store).await?;
    let before = stored(&mut store).await?;
    let gateway_before = write_bytes(&pid_s)?;
    let commits_before = commits(&http).await?;

    // Each session's flood starts a little later than the one before, so
    // the events arrive evenly; the prompts are all in before the first.
    let lead_us = 2_000_000 + 300 * sessions as u64;
    let sched = Schedule {
        rooms: sessions,
        per_room: rate,
        count: (rate * secs).ceil().max(1.0) as u64,
        t0_us: unix_micros() + lead_us,
        bytes: payload_bytes,
    };
    let started = std::time::Instant::now();
    flood(&mut ctl, &ids, &sched).await?;
    let want = turns_before + sessions as i64;
    let deadline = sched.end_us() + DRAIN.as_micros() as u64;
    let until_end = sched.end_us().saturating_sub(unix_micros());
    tokio::time::sleep(Duration::from_micros(until_end)).await;
    loop {
        if completed_turns(&mut store).await? >= want {
            break;
        }
        if unix_micros() > deadline {
            bail!("the turns did not all end within {DRAIN:?} of the last event");
        }
        // The control connection is read meanwhile: nothing should come,
        // and a closed one is worth knowing about.
        if let Ok(frame) = tokio::time::timeout(POLL, ctl.next()).await {
            frame.context("the control connection")?;
        }
    }
    let wall = started.elapsed().as_secs_f64();
    let gateway_bytes = write_bytes(&pid_s)? - gateway_before;
    let commits = commits(&http).await? - commits_before;
    let checkpoint_bytes = checkpoint(&mut store).await?;
    let after = stored(&mut store).await?;
    store.close().await?;

    let events = after.events - before.events;
    anyhow::ensure!(events > 0, "no event was stored");
    let total = gateway_bytes + checkpoint_bytes;
    let payload = after.payload_bytes - before.payload_bytes;
    let rows = after.row_bytes - before.row_bytes;
    let per = |v: f64| (v / events as f64 * 10.0).round() / 10.0;
    let ratio = |a: f64, b: i64| (a / b.max(1) as f64 * 100.0).round() / 100.0;
    Ok(json!({
        "page_size": page_size,
        "events": events,
        "seconds": (wall * 10.0).round() / 10.0,
        "stored_events_per_s": (events as f64 / wall).round(),
        "commits": commits,
        "events_per_commit": (events as f64 / commits.max(1) as f64 * 10.0).round() / 10.0,
        "gateway_write_bytes_per_commit": gateway_bytes / commits.max(1),
        "gateway_write_bytes": gateway_bytes,
        "final_checkpoint_write_bytes": checkpoint_bytes,
        "write_bytes_per_event": per(total as f64),
        "payload_bytes_per_event": per(payload as f64),
        "row_bytes_per_event": per(rows as f64),
        "ratio_to_payload": ratio(total as f64, payload),
        "ratio_to_row": ratio(total as f64, rows),
    }))
}
