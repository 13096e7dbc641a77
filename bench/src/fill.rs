//! `tether bench fill`: fills a store (a SQLite file or a PostgreSQL
//! database) with many sessions and events, through the store's own write
//! API ([`StoreWrite::commit`], the call the gateway's StoreWriter makes),
//! so the rows, the session rows' `latest_seq`, `message_count` and
//! status included, are the ones a gateway writes.
//!
//! The sessions are written interleaved, as a gateway's concurrent
//! sessions are: a window of sessions in progress, each appending a piece
//! of its events per round, batched into group commits; a finished session
//! is parked (or, one in ten, closed) and the next one starts. One session
//! can be made large (`--largest`) and a few of a fixed size
//! (`--probes` × `--probe-events`), for the measurements that need a
//! session of a known size (`tether bench flat`); the other sessions share
//! the remaining events evenly.
//!
//! Generating the next batch and committing the last one overlap (the
//! generator has a thread of its own), so the run takes about as long as
//! the store takes to commit.

mod content;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Args;
use serde_json::{json, Value};
use tether_protocol::{now_ms, SessionStatus};
use tether_store::{
    Backend, NewSession, SessionPatch, StoreConfig, StoreWrite, Synchronous, WriteOp,
};

use content::SessionFill;

/// A finished session's status: parked, or closed for one in this many.
const CLOSED_EVERY: u64 = 10;
/// A session writes its events in about this many pieces (at least a turn
/// each), so sessions of every size stay in progress together.
const ROUNDS: u64 = 20;
/// How far back the sessions' creation times go: a year.
const SPAN_MS: i64 = 365 * 24 * 3600 * 1000;
/// Batches generated ahead of the commit.
const AHEAD: usize = 2;

#[derive(Debug, Args, Clone)]
pub struct FillBench {
    /// The store: `sqlite://PATH` (created if missing) or `postgres://…`
    /// (a database that exists; its tables are created if missing).
    #[arg(long)]
    pub store: String,
    /// Sessions to create.
    #[arg(long, default_value_t = 100_000)]
    pub sessions: u64,
    /// Durable events in all (every session's `session.created` included).
    #[arg(long, default_value_t = 10_000_000)]
    pub events: u64,
    /// Events of the one large session (0: none).
    #[arg(long, default_value_t = 1_000_000)]
    pub largest: u64,
    /// Sessions of `--probe-events` events each.
    #[arg(long, default_value_t = 10)]
    pub probes: u64,
    /// Events of each probe session.
    #[arg(long, default_value_t = 10_000)]
    pub probe_events: u64,
    /// The profile the sessions belong to.
    #[arg(long, default_value = "default")]
    pub profile: String,
    /// Sessions in progress at once.
    #[arg(long, default_value_t = 1000)]
    pub window: usize,
    /// Events per group commit, about.
    #[arg(long, default_value_t = 4000)]
    pub batch_events: u64,
    /// Also write the final JSON line to this file (`tether bench flat`
    /// reads the probe sessions' ids from it).
    #[arg(long)]
    pub report: Option<PathBuf>,
}

/// How many events session `index` gets.
#[derive(Debug, Clone)]
struct Plan {
    sessions: u64,
    largest: u64,
    probes: u64,
    probe_events: u64,
    /// Sessions that share the rest, and their shares.
    share: u64,
    extra: u64,
}

impl Plan {
    fn new(b: &FillBench) -> anyhow::Result<Plan> {
        let special = u64::from(b.largest > 0) + b.probes;
        if b.sessions < special {
            bail!(
                "--sessions {} is fewer than the large and probe sessions ({special})",
                b.sessions
            );
        }
        let fixed = b.largest + b.probes * b.probe_events;
        let regular = b.sessions - special;
        let left = b.events.checked_sub(fixed).with_context(|| {
            format!(
                "--events {} is fewer than the large and probe sessions hold ({fixed})",
                b.events
            )
        })?;
        let (share, extra) = match regular {
            0 => (0, 0),
            n => (left / n, left % n),
        };
        if regular > 0 && share == 0 {
            bail!("--events leaves no event for {regular} sessions (each needs at least one)");
        }
        Ok(Plan {
            sessions: b.sessions,
            largest: b.largest,
            probes: b.probes,
            probe_events: b.probe_events,
            share,
            extra,
        })
    }

    /// Session 0 is the large one (if any), the probes follow, then the
    /// others.
    fn size(&self, index: u64) -> u64 {
        let mut i = index;
        if self.largest > 0 {
            if i == 0 {
                return self.largest;
            }
            i -= 1;
        }
        if i < self.probes {
            return self.probe_events;
        }
        let regular = i - self.probes;
        self.share + u64::from(regular < self.extra)
    }

    fn is_special(&self, index: u64) -> bool {
        index < u64::from(self.largest > 0) + self.probes
    }
}

/// What the generator thread hands the committer.
struct Batch {
    ops: Vec<WriteOp>,
    events: u64,
    finished: u64,
}

/// The ids of the sessions a measurement looks for.
#[derive(Debug, Default)]
struct Known {
    largest: Option<String>,
    probes: Vec<String>,
}

pub fn run(b: FillBench) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let report = rt.block_on(fill(&b))?;
    println!("{report}");
    Ok(())
}

/// Fills the store `b.store` names; the report (also written to
/// `b.report`).
pub async fn fill(b: &FillBench) -> anyhow::Result<Value> {
    let plan = Plan::new(b)?;
    let backend = backend_of(&b.store)?;
    let store = tether_store::open(&backend)
        .await
        .with_context(|| format!("open {}", backend.describe()))?;
    let mut writer = (store.writers)().await?;
    let (tx, mut rx) = tokio::sync::mpsc::channel::<anyhow::Result<Batch>>(AHEAD);
    let (known_tx, known_rx) = std::sync::mpsc::channel::<Known>();
    let generator = {
        let (plan, b) = (plan.clone(), b.clone());
        std::thread::spawn(move || generate(&plan, &b, &tx, &known_tx))
    };
    let t0 = Instant::now();
    let (mut events, mut sessions, mut batches) = (0u64, 0u64, 0u64);
    let mut last_print = Instant::now();
    while let Some(batch) = rx.recv().await {
        let batch = batch?;
        commit(writer.as_mut(), batch.ops).await?;
        events += batch.events;
        sessions += batch.finished;
        batches += 1;
        if last_print.elapsed() >= Duration::from_secs(5) {
            last_print = Instant::now();
            let secs = t0.elapsed().as_secs_f64();
            eprintln!(
                "fill: {events} events, {sessions}/{} sessions done, {:.0} events/s, {secs:.0} s",
                plan.sessions,
                events as f64 / secs
            );
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    if generator.join().is_err() {
        bail!("the generator thread panicked");
    }
    let known = known_rx.recv().unwrap_or_default();
    drop(writer);
    drop(store);
    if let Backend::Sqlite(cfg) = &backend {
        // As a gateway's clean stop leaves it: the WAL folded into the
        // file, so the next open has no WAL to recover.
        tether_store::vacuum_sqlite(cfg).await?;
    }
    let bytes = store_bytes(&backend).await?;
    let report = json!({
        "scenario": "fill",
        "backend": match backend { Backend::Sqlite(_) => "sqlite", Backend::Postgres(_) => "postgres" },
        "store": backend.describe(),
        "sessions": sessions,
        "events": events,
        "largest": plan.largest,
        "probes": plan.probes,
        "probe_events": plan.probe_events,
        "batches": batches,
        "seconds": (secs * 10.0).round() / 10.0,
        "events_per_s": (events as f64 / secs).round(),
        "sessions_per_s": (sessions as f64 / secs).round(),
        "store_bytes": bytes,
        "largest_session": known.largest,
        "probe_sessions": known.probes,
    });
    if let Some(path) = &b.report {
        std::fs::write(path, format!("{report}\n"))
            .with_context(|| format!("write {}", path.display()))?;
    }
    Ok(report)
}

/// The store a URL names, set for filling: PostgreSQL with room for the
/// fill's large batches (a gateway's are smaller).
pub fn backend_of(url: &str) -> anyhow::Result<Backend> {
    Ok(match Backend::from_url(url)? {
        // No fsync per commit: a fill that stops half-way is started
        // again, not recovered (the WAL is still synced at checkpoints).
        Backend::Sqlite(cfg) => Backend::Sqlite(StoreConfig {
            synchronous: Synchronous::Normal,
            ..cfg
        }),
        Backend::Postgres(mut cfg) => {
            cfg.statement_timeout = Duration::from_secs(120);
            cfg.write_wait = Duration::from_secs(120);
            Backend::Postgres(cfg)
        }
    })
}

async fn commit(writer: &mut dyn StoreWrite, ops: Vec<WriteOp>) -> anyhow::Result<()> {
    for (i, r) in writer.commit(ops).await.into_iter().enumerate() {
        r.with_context(|| format!("op {i} of a batch was refused"))?;
    }
    Ok(())
}

/// The generator thread: the batches, in order, then the ids it promised.
fn generate(
    plan: &Plan,
    b: &FillBench,
    tx: &tokio::sync::mpsc::Sender<anyhow::Result<Batch>>,
    known_tx: &std::sync::mpsc::Sender<Known>,
) {
    let now = now_ms();
    let first_ms = now - SPAN_MS;
    let step_ms = SPAN_MS / plan.sessions.max(1) as i64;
    let mut known = Known::default();
    let mut next_index = 0u64;
    let mut active: Vec<(u64, SessionFill)> = Vec::with_capacity(b.window.max(1));
    let mut cursor = 0usize;
    loop {
        while active.len() < b.window.max(1) && next_index < plan.sessions {
            let i = next_index;
            next_index += 1;
            let created = first_ms + i as i64 * step_ms;
            let s = SessionFill::new(i, &b.profile, plan.size(i), created);
            if plan.is_special(i) {
                if plan.largest > 0 && i == 0 {
                    known.largest = Some(s.id.as_str().to_string());
                } else {
                    known.probes.push(s.id.as_str().to_string());
                }
            }
            active.push((i, s));
        }
        if active.is_empty() {
            break;
        }
        let mut batch = Batch {
            ops: Vec::new(),
            events: 0,
            finished: 0,
        };
        while batch.events < b.batch_events && !active.is_empty() {
            if cursor >= active.len() {
                cursor = 0;
            }
            let Some((index, s)) = active.get_mut(cursor) else {
                break;
            };
            let index = *index;
            let room = b.batch_events - batch.events;
            let op = next_op(plan, index, s, room);
            batch.events += op.events().len() as u64;
            batch.ops.push(op);
            if s.done() {
                batch.finished += 1;
                active.swap_remove(cursor);
            } else {
                cursor += 1;
            }
        }
        if tx.blocking_send(Ok(batch)).is_err() {
            return;
        }
    }
    let _ = known_tx.send(known);
}

/// The session's next op: its creation, or its next piece of events.
fn next_op(plan: &Plan, index: u64, s: &mut SessionFill, room: u64) -> WriteOp {
    if s.is_new() {
        let created = s.created();
        return WriteOp::CreateSession {
            session: NewSession {
                id: s.id.clone(),
                profile: s.profile.clone(),
                title: s.title.clone(),
                parent_session_id: None,
                kind: "chat".into(),
                close_on_disconnect: false,
                engine_pin: None,
                follow_profile_config: false,
                created_at_ms: s.created_at_ms,
                message_count: 0,
            },
            events: vec![created],
        };
    }
    let piece = (s.total / ROUNDS).max(content::TOOL_TURN).min(room.max(1));
    let events = s.take(piece);
    let status = s.done().then(|| {
        if !plan.is_special(index) && index % CLOSED_EVERY == CLOSED_EVERY - 1 {
            SessionStatus::Closed
        } else {
            SessionStatus::Parked
        }
    });
    WriteOp::Append {
        session_id: s.id.clone(),
        events,
        patch: SessionPatch {
            status,
            message_count: Some(s.message_count()),
            updated_at_ms: Some(s.last_ts_ms()),
            ..SessionPatch::default()
        },
    }
}

/// Bytes the store takes: the SQLite file with its WAL, or the
/// PostgreSQL database's size.
pub async fn store_bytes(backend: &Backend) -> anyhow::Result<u64> {
    match backend {
        Backend::Sqlite(cfg) => Ok(sqlite_bytes(&cfg.db_path)),
        Backend::Postgres(cfg) => {
            use sqlx::Connection;
            let mut c = sqlx::PgConnection::connect(&cfg.url).await?;
            let (n,): (i64,) = sqlx::query_as("SELECT pg_database_size(current_database())")
                .fetch_one(&mut c)
                .await?;
            let _ = c.close().await;
            Ok(u64::try_from(n).unwrap_or(0))
        }
    }
}

fn sqlite_bytes(db: &Path) -> u64 {
    ["", "-wal", "-shm"]
        .iter()
        .filter_map(|suffix| {
            let mut p = db.as_os_str().to_owned();
            p.push(suffix);
            std::fs::metadata(PathBuf::from(p)).ok()
        })
        .map(|m| m.len())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(sessions: u64, events: u64, largest: u64, probes: u64, probe_events: u64) -> FillBench {
        FillBench {
            store: "sqlite://x.db".into(),
            sessions,
            events,
            largest,
            probes,
            probe_events,
            profile: "default".into(),
            window: 10,
            batch_events: 100,
            report: None,
        }
    }

    #[test]
    fn the_plan_gives_every_event_to_some_session() {
        let plan = Plan::new(&args(100, 10_000, 1000, 3, 500)).expect("plan");
        let total: u64 = (0..100).map(|i| plan.size(i)).sum();
        assert_eq!(total, 10_000);
        assert_eq!(plan.size(0), 1000);
        assert_eq!(plan.size(1), 500);
        assert_eq!(plan.size(3), 500);
        // The other 96 share the remaining 7,500: 78 each, 12 of them 79.
        assert_eq!(plan.size(4), 79);
        assert_eq!(plan.size(99), 78);
    }

    #[test]
    fn a_plan_that_cannot_hold_its_sessions_is_refused() {
        assert!(Plan::new(&args(2, 10_000, 1000, 3, 500)).is_err());
        assert!(Plan::new(&args(100, 1000, 1000, 3, 500)).is_err());
    }
}
