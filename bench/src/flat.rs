//! `tether bench flat`: whether the gateway's costs stay flat as its
//! store grows. The same binary, in one run, against two stores of one
//! backend:
//!
//! - *empty*: the probe sessions (`--probes` of `--probe-events` events
//!   each), which the measurements read, and a few pages of sessions of
//!   the big store's average size;
//! - *big*: the same probes among `--sessions` sessions and `--events`
//!   events, one session of `--largest` events among them
//!   (`tether bench fill`).
//!
//! For each: start-up to the `tether listening` line (`--starts` times),
//! the idle gateway's RSS, `session.list` and `session.resume` (of a probe)
//! latencies, a session read whole through `session.events.since` pages
//! (the largest on the big store, a probe on the empty one) with its time
//! and the gateway's peak RSS meanwhile. Then the turn benchmark (`tether
//! bench load --scenario turns`) in `--turn-rounds` rounds alternating the
//! stores (`flat/turns.rs`). The report puts big ÷ empty beside each
//! figure (for the turns, of the medians).
//!
//! The stores are kept (SQLite files in `--dir`, PostgreSQL databases
//! `flat_empty` and `flat_big`) with the fill's report beside them, and
//! reused by the next run with the same shape: filling takes minutes.

mod gateway;
mod probe;
mod turns;

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use serde_json::{json, Value};

use super::fill::{self, FillBench};
use super::harness::on_pinned_thread;
use gateway::Gateway;
use probe::percentiles;

#[derive(Debug, Args)]
pub struct FlatBench {
    /// Where the SQLite stores and the fills' reports are kept.
    #[arg(long)]
    dir: PathBuf,
    /// Measure on PostgreSQL: the databases `flat_empty` and `flat_big`
    /// on the server this URL names (its user must be allowed to create
    /// databases). Without it, SQLite files in `--dir`.
    #[arg(long, value_name = "SERVER_URL")]
    postgres: Option<String>,
    /// Sessions of the big store.
    #[arg(long, default_value_t = 100_000)]
    sessions: u64,
    /// Events of the big store.
    #[arg(long, default_value_t = 10_000_000)]
    events: u64,
    /// Events of the big store's largest session.
    #[arg(long, default_value_t = 1_000_000)]
    largest: u64,
    /// Probe sessions (in both stores).
    #[arg(long, default_value_t = 10)]
    probes: u64,
    /// Events of each probe session.
    #[arg(long, default_value_t = 10_000)]
    probe_events: u64,
    /// Gateway starts timed per store (all but the last also resume each
    /// probe once, from the store).
    #[arg(long, default_value_t = 4)]
    starts: usize,
    /// Requests timed per latency figure.
    #[arg(long, default_value_t = 300)]
    requests: usize,
    /// `session.events.since` page size.
    #[arg(long, default_value_t = 1000)]
    page: u32,
    /// Seconds the gateway sits idle before its memory is read.
    #[arg(long, default_value_t = 3.0)]
    settle_secs: f64,
    /// Compute hosts of the gateway (the turn benchmark's).
    #[arg(long, default_value_t = 2)]
    hosts: usize,
    /// The turn benchmark's steps, durable deliveries/s (empty: skip it).
    /// Close together (5,000 apart below 80,000): the clean rate is the
    /// highest clean step, so the spacing is its resolution.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "30000,35000,40000,45000,50000,55000,60000,65000,70000,75000,80000,90000,100000"
    )]
    turn_steps: Vec<u64>,
    /// Rounds of the turn benchmark, each on both stores in turn (empty
    /// first), each on a fresh gateway; medians are compared.
    #[arg(long, default_value_t = 3)]
    turn_rounds: usize,
    /// The turn benchmark's sessions.
    #[arg(long, default_value_t = 100)]
    turn_sessions: usize,
    /// The turn benchmark's clients per session.
    #[arg(long, default_value_t = 10)]
    turn_peers: usize,
    /// The turn benchmark's seconds per step.
    #[arg(long, default_value_t = 5.0)]
    turn_step_secs: f64,
    /// CPU of the gateway and its hosts.
    #[arg(long, default_value_t = 0)]
    server_cpu: usize,
    /// CPU of the clients (and of the fill).
    #[arg(long, default_value_t = 1)]
    client_cpu: usize,
}

/// Sessions of the empty store besides the probes: a few pages of them,
/// so `session.list` answers full pages on both stores.
const EMPTY_SESSIONS: u64 = 200;

/// One of the two stores: its URL, and the fill's report (the probes'
/// ids).
struct Prepared {
    name: &'static str,
    url: String,
    fill: Value,
}

pub fn run(b: FlatBench) -> anyhow::Result<()> {
    std::fs::create_dir_all(&b.dir).with_context(|| format!("create {}", b.dir.display()))?;
    let empty = prepare(&b, "empty")?;
    let big = prepare(&b, "big")?;
    // What a fill left in the page cache's dirty pages is written out
    // before anything is timed.
    let _ = std::process::Command::new("sync").status();
    std::thread::sleep(Duration::from_secs(5));
    let e = measure(&b, &empty)?;
    let g = measure(&b, &big)?;
    let turns = if b.turn_steps.is_empty() {
        Value::Null
    } else {
        turns::rounds(&b, &[&empty, &big])?
    };
    let ratio = |path: &[&str]| big_over_empty(&g, &e, path);
    let of_turns = |key: &str| big_over_empty(&turns["big"], &turns["empty"], &[key]);
    let report = json!({
        "scenario": "flat",
        "backend": backend(&b),
        "big_over_empty": {
            "startup_max": ratio(&["startup_ms", "max"]),
            "idle_rss": ratio(&["idle_rss_kib"]),
            "list_p99": ratio(&["list", "p99_ms"]),
            "resume_live_p99": ratio(&["resume_live", "p99_ms"]),
            "resume_from_store_p99": ratio(&["resume_from_store", "p99_ms"]),
            "page_rss_growth": ratio(&["paging", "rss_growth_kib"]),
            "turns_clean_rate_median": of_turns("clean_durable_deliveries_per_s"),
            "turns_saturation_median": of_turns("saturation_durable_deliveries_per_s"),
        },
        "empty": e,
        "big": g,
        "turns": turns,
        "server_cpu": format!("cpu{}", b.server_cpu),
        "client_cpu": format!("cpu{}", b.client_cpu),
    });
    println!("{report}");
    Ok(())
}

/// The figure at `path` of the big store's report over the empty one's,
/// to three decimals (`null` if either lacks it or the empty one's is 0).
fn big_over_empty(big: &Value, empty: &Value, path: &[&str]) -> Value {
    let pick = |v: &Value| path.iter().fold(v, |v, k| &v[*k]).as_f64();
    match (pick(big), pick(empty)) {
        (Some(x), Some(y)) if y > 0.0 => json!((x / y * 1000.0).round() / 1000.0),
        _ => Value::Null,
    }
}

fn backend(b: &FlatBench) -> &'static str {
    if b.postgres.is_some() {
        "postgres"
    } else {
        "sqlite"
    }
}

/// The store `name` (`empty` or `big`), filled unless a fill of the same
/// shape is recorded beside it.
fn prepare(b: &FlatBench, name: &'static str) -> anyhow::Result<Prepared> {
    let shape = match name {
        "big" => (b.sessions, b.events, b.largest),
        _ => {
            // The probes among a few pages of sessions of the big store's
            // average size, so both stores list full pages.
            let special = u64::from(b.largest > 0) + b.probes;
            let fixed = b.largest + b.probes * b.probe_events;
            let share = b.events.saturating_sub(fixed) / b.sessions.saturating_sub(special).max(1);
            (
                b.probes + EMPTY_SESSIONS,
                b.probes * b.probe_events + EMPTY_SESSIONS * share.max(1),
                0,
            )
        }
    };
    let report_path = b.dir.join(format!("{}-{name}.fill.json", backend(b)));
    let url = match &b.postgres {
        None => format!(
            "sqlite://{}",
            absolute(&b.dir)?.join(format!("{name}.db")).display()
        ),
        Some(server) => tether_store::testing::with_database(server, &format!("flat_{name}")),
    };
    if let Some(fill) = recorded(&report_path, shape, b) {
        eprintln!("flat: reusing the {name} store ({})", report_path.display());
        return Ok(Prepared { name, url, fill });
    }
    let _ = std::fs::remove_file(&report_path);
    let server = b.postgres.clone();
    let db = b.dir.join(format!("{name}.db"));
    let args = FillBench {
        store: url.clone(),
        sessions: shape.0,
        events: shape.1,
        largest: shape.2,
        probes: b.probes,
        probe_events: b.probe_events,
        profile: "default".into(),
        window: 1000,
        batch_events: 4000,
        report: Some(report_path),
    };
    eprintln!(
        "flat: filling the {name} store: {} sessions, {} events",
        shape.0, shape.1
    );
    let fill = on_pinned_thread(b.client_cpu, move || -> anyhow::Result<Value> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        rt.block_on(async move {
            match &server {
                Some(server) => recreate_database(server, &format!("flat_{name}")).await?,
                None => remove_sqlite(&db)?,
            }
            fill::fill(&args).await
        })
    })?;
    eprintln!("flat: {fill}");
    Ok(Prepared { name, url, fill })
}

/// The recorded fill at `path` if it has this shape and these probes.
fn recorded(path: &Path, shape: (u64, u64, u64), b: &FlatBench) -> Option<Value> {
    let v: Value = serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()?;
    let same = v["sessions"].as_u64() == Some(shape.0)
        && v["largest"].as_u64() == Some(shape.2)
        && v["probes"].as_u64() == Some(b.probes)
        && v["probe_events"].as_u64() == Some(b.probe_events)
        // The events written round each session up to whole turns.
        && v["events"].as_u64().is_some_and(|n| n >= shape.1 && n <= shape.1 + 3 * shape.0);
    same.then_some(v)
}

fn absolute(dir: &Path) -> anyhow::Result<PathBuf> {
    Ok(if dir.is_absolute() {
        dir.to_path_buf()
    } else {
        std::env::current_dir()?.join(dir)
    })
}

fn remove_sqlite(db: &Path) -> anyhow::Result<()> {
    for suffix in ["", "-wal", "-shm"] {
        let mut p = db.as_os_str().to_owned();
        p.push(suffix);
        match std::fs::remove_file(PathBuf::from(p)) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

async fn recreate_database(server: &str, name: &str) -> anyhow::Result<()> {
    use sqlx::Connection;
    let mut c = sqlx::PgConnection::connect(server).await?;
    sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .execute(&mut c)
        .await?;
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&mut c)
        .await?;
    let _ = c.close().await;
    Ok(())
}

/// Every figure of one store.
fn measure(b: &FlatBench, store: &Prepared) -> anyhow::Result<Value> {
    eprintln!("flat: measuring the {} store", store.name);
    let probes: Vec<String> = store.fill["probe_sessions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect();
    // Each start but the last: its start-up, and every probe resumed
    // once, from the store.
    let (mut startups, mut from_store, mut first_round) = (Vec::new(), Vec::new(), Vec::new());
    for i in 1..b.starts.max(1) {
        let gw = Gateway::start(&store.url, b.hosts, b.server_cpu)?;
        startups.push(gw.startup);
        let round = clients(b, &gw, &probes, |url, probes| async move {
            probe::resume_each(&url, &probes).await
        })?;
        if i == 1 {
            first_round.clone_from(&round);
        }
        from_store.extend(round);
        gw.stop()?;
    }
    let gw = Gateway::start(&store.url, b.hosts, b.server_cpu)?;
    startups.push(gw.startup);
    std::thread::sleep(Duration::from_secs_f64(b.settle_secs));
    let (idle_rss, idle_anon) = gw.rss();
    let paged = store.fill["largest_session"]
        .as_str()
        .map(str::to_owned)
        .or_else(|| probes.first().cloned())
        .context("the fill recorded no session to page through")?;
    let (pid, n, page) = (gw.pid, b.requests, b.page);
    let reads = clients(b, &gw, &probes, move |url, probes| async move {
        // Paging first: its memory is measured from the idle gateway's,
        // before the resumes bring transcripts live.
        let paging = probe::page_through(&url, pid, &paged, page).await?;
        let list = probe::list(&url, n).await?;
        let live = probe::resume_live(&url, &probes, n).await?;
        Ok(json!({ "list": list, "resume_live": live, "paging": paging }))
    })?;
    let (after_rss, _) = gw.rss();
    gw.stop()?;
    let ms: Vec<f64> = startups
        .iter()
        .map(|d| (d.as_secs_f64() * 10_000.0).round() / 10.0)
        .collect();
    let max = ms.iter().copied().fold(0.0, f64::max);
    let mut v = json!({
        "store": store.url.split('@').next_back().unwrap_or_default(),
        "fill": {
            "sessions": store.fill["sessions"],
            "events": store.fill["events"],
            "store_bytes": store.fill["store_bytes"],
        },
        "startup_ms": { "each": ms, "max": max },
        "idle_rss_kib": idle_rss,
        "idle_rss_anon_kib": idle_anon,
        "rss_after_reads_kib": after_rss,
        "resume_from_store": percentiles(&mut from_store),
        "resume_from_store_first_start": percentiles(&mut first_round),
    });
    if let (Some(o), Value::Object(c)) = (v.as_object_mut(), reads) {
        o.extend(c);
    }
    Ok(v)
}

/// Runs `body` (the gateway's WebSocket URL, the probes) on a runtime of
/// its own on the client CPU.
fn clients<T, F, Fut>(b: &FlatBench, gw: &Gateway, probes: &[String], body: F) -> anyhow::Result<T>
where
    T: Send + 'static,
    F: FnOnce(String, Vec<String>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = anyhow::Result<T>>,
{
    let (url, probes) = (gw.ws_url(), probes.to_vec());
    on_pinned_thread(b.client_cpu, move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        rt.block_on(body(url, probes))
    })
}
