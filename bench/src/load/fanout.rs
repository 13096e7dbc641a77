//! `--scenario fanout`: S rooms × P clients, the delivery rate stepped up
//! until the server saturates.
//!
//! Each step aims at D deliveries a second: every room publishes
//! D / (S × P) events a second for `--step-secs`, on the fixed schedule of
//! [`super::publish`]. A step ends when every client holds every event of
//! its room, or `--drain-secs` after the last one was due. The ramp stops
//! after a step that delivered under 99 % of what was expected, whose p99
//! latency passed 1 s (`--max-p99-ms`), or that lost a client (e.g. tether's slow-consumer
//! close); the saturation figure is the highest rate achieved by any step.
//!
//! Two allowances for a shared machine: a warm-up at the first step's rate
//! runs before the ramp and is not counted (node's JIT, SQLite's page
//! cache, the hosts' first turns), and a step that fails is run once more
//! before the ramp stops, so that one stall of the machine (a commit held
//! up a second and a half by another process's disk writes was seen) does
//! not end it far below saturation. Both attempts are reported.

use std::time::Duration;

use serde_json::{json, Value};

use super::conn::{unix_micros, Frame};
use super::proc::{self, Sample};
use super::publish::Schedule;
use super::tally::{round3, seq_faults, summary_ms, Shared, Tally};
use super::target::Target;
use super::{cpu_pct, LoadBench};

/// Time between starting a step and its first event: the prompts (or the
/// publisher's connection) must be in place by then.
const LEAD_US: u64 = 1_000_000;

/// How often the controller looks at the tallies.
const POLL: Duration = Duration::from_millis(20);

pub async fn run(b: &LoadBench, url: &str, pid: Option<u32>) -> anyhow::Result<Value> {
    let ramped = ramp(b, url, pid, step).await?;
    let saturation = ramped
        .steps
        .iter()
        .filter_map(|s| s["deliveries_per_s"].as_f64())
        .fold(0.0_f64, f64::max);
    let (seq_gaps, seq_dups) = ramped.seq_faults;
    let end = ramped.end;
    Ok(json!({
        "sessions": b.sessions,
        "peers": b.peers,
        "clients": ramped.clients,
        "payload_bytes": b.payload_bytes,
        "step_secs": b.step_secs,
        "steps": ramped.steps,
        "stopped": ramped.stopped,
        "saturation_deliveries_per_s": saturation.round(),
        "seq_gaps": seq_gaps,
        "seq_dups": seq_dups,
        "server_peak_rss_kib": end.server_peak_kib,
        "hosts_peak_rss_kib": end.children_peak_kib,
    }))
}

/// Connects the clients (`--peers` per room) and starts a reader for
/// each; their tallies.
async fn start_readers(b: &LoadBench, target: &Target) -> anyhow::Result<Vec<Shared>> {
    let clients = target.subscribe_all(b.sessions * b.peers).await?;
    let tallies: Vec<Shared> = clients.iter().map(|c| c.tally.clone()).collect();
    for c in clients {
        tokio::spawn(read(c.sub.conn, c.tally));
    }
    Ok(tallies)
}

/// What the steps of a ramp run against: the clients' tallies and the
/// server (`pid`: its process, for CPU and memory).
#[derive(Clone, Copy)]
pub(super) struct Setup<'a> {
    pub b: &'a LoadBench,
    pub target: &'a Target,
    pub tallies: &'a [Shared],
    pub pid: Option<u32>,
}

/// What a ramp left: every attempt's JSON line (with its `attempt`), why
/// it stopped, and the clients and the server as they were at its end.
pub(super) struct Ramped {
    pub steps: Vec<Value>,
    pub stopped: Option<String>,
    pub clients: usize,
    /// `seq` gaps and duplicates over every client.
    pub seq_faults: (u64, u64),
    pub end: Sample,
}

/// The ramp (of this scenario and of `turns`): the target prepared and
/// its clients connected, the warm-up, then each of `--steps` for
/// `--step-secs`, a failed one run once more before the ramp stops.
pub(super) async fn ramp(
    b: &LoadBench,
    url: &str,
    pid: Option<u32>,
    step: impl AsyncFn(&Setup<'_>, u64, f64) -> anyhow::Result<Value>,
) -> anyhow::Result<Ramped> {
    let target = Target::prepare(b.target, url, b.sessions).await?;
    let tallies = start_readers(b, &target).await?;
    let on = Setup {
        b,
        target: &target,
        tallies: &tallies,
        pid,
    };
    if let (Some(&first), true) = (b.steps.first(), b.ramp_warmup_secs > 0.0) {
        let warm = step(&on, first, b.ramp_warmup_secs).await?;
        eprintln!("bench load: warm-up {warm}");
    }
    let (mut steps, mut stopped) = (Vec::new(), None);
    'ramp: for &aim in &b.steps {
        for attempt in 1..=2 {
            let mut s = step(&on, aim, b.step_secs).await?;
            s["attempt"] = json!(attempt);
            eprintln!("bench load: {s}");
            let why = stop_reason(&s, b.max_p99_ms);
            steps.push(s);
            match why {
                None => break,
                Some(why) if attempt == 2 => {
                    stopped = Some(why);
                    break 'ramp;
                }
                Some(_) => {}
            }
        }
    }
    Ok(Ramped {
        steps,
        stopped,
        clients: tallies.len(),
        seq_faults: seq_faults(&tallies),
        end: proc::sample(pid),
    })
}

/// A step's schedule: `aim` deliveries a second to `clients` spread over
/// the rooms, for `secs`, each of a room's events being `per_event`
/// deliveries to each of its clients; its first event `lead_us` from now.
pub(super) fn schedule(
    b: &LoadBench,
    clients: usize,
    per_event: u64,
    aim: u64,
    secs: f64,
    lead_us: u64,
    bytes: usize,
) -> Schedule {
    let clients_per_room = (clients as f64 / b.sessions as f64).max(1.0);
    let per_room = aim as f64 / (b.sessions as f64 * clients_per_room * per_event as f64);
    let count = (per_room * secs).ceil().max(1.0) as u64;
    Schedule {
        rooms: b.sessions,
        per_room,
        count,
        t0_us: unix_micros() + lead_us,
        bytes,
    }
}

/// What a step measured from its first event to its end.
pub(super) struct Window {
    pub wall: f64,
    pub before: Sample,
    pub after: Sample,
    /// CPU seconds of this process (the load generator) meanwhile.
    pub gen_cpu: f64,
}

/// Waits for the step's first event, then until every client is `done`
/// or lost, or `--drain-secs` after the last event was due.
pub(super) async fn measure(
    on: &Setup<'_>,
    sched: &Schedule,
    done: impl Fn(&Tally) -> bool,
) -> Window {
    let Setup {
        b, tallies, pid, ..
    } = *on;
    sleep_until_us(sched.t0_us).await;
    let before = proc::sample(pid);
    let gen_before = proc::own_cpu_s();
    let started = tokio::time::Instant::now();
    let deadline = sched.end_us() + (b.drain_secs * 1e6) as u64;
    loop {
        let all = tallies.iter().all(|t| {
            let t = t.lock();
            done(&t) || t.closed.is_some()
        });
        if all || unix_micros() > deadline {
            break;
        }
        tokio::time::sleep(POLL).await;
    }
    let wall = started.elapsed().as_secs_f64();
    let after = proc::sample(pid);
    let gen_cpu = proc::own_cpu_s() - gen_before;
    Window {
        wall,
        before,
        after,
        gen_cpu,
    }
}

/// A client's reader: records every event until the connection ends.
pub(super) async fn read(mut conn: super::conn::Conn, tally: Shared) {
    loop {
        match conn.next().await {
            Ok(Frame::Event(e)) => tally.lock().record(e, unix_micros()),
            Ok(Frame::Text(_)) => {}
            Err(e) => {
                tally.lock().closed = Some(format!("{e:#}"));
                return;
            }
        }
    }
}

/// One step of the ramp; its JSON line.
async fn step(on: &Setup<'_>, aim: u64, secs: f64) -> anyhow::Result<Value> {
    let Setup {
        b, target, tallies, ..
    } = *on;
    let sched = schedule(b, tallies.len(), 1, aim, secs, LEAD_US, b.payload_bytes);
    for t in tallies {
        t.lock().reset(sched.count, true);
    }
    let publisher = target.publish(&sched).await?;
    let w = measure(on, &sched, Tally::complete).await;
    let publisher_error = match publisher {
        Some(task) if task.is_finished() => task.await.ok().and_then(Result::err),
        Some(task) => {
            // Still behind its schedule: the server is not reading.
            task.abort();
            None
        }
        None => None,
    };
    let mut v = harvest(tallies, &sched, aim, &w);
    if let Some(e) = publisher_error {
        v["publisher_error"] = json!(format!("{e:#}"));
    }
    Ok(v)
}

/// Adds up the tallies of a finished step.
fn harvest(tallies: &[Shared], sched: &Schedule, aim: u64, w: &Window) -> Value {
    let (wall, before, after) = (w.wall, &w.before, &w.after);
    let mut latencies = Vec::new();
    let (mut delivered, mut dups, mut beyond, mut closed, mut last_at) = (0, 0, 0, 0, 0);
    for t in tallies {
        let mut t = t.lock();
        delivered += t.distinct;
        dups += t.dups;
        beyond += t.beyond;
        closed += u64::from(t.closed.is_some());
        last_at = last_at.max(t.last_at_us);
        latencies.append(&mut t.latencies_us);
    }
    let expected = sched.count * tallies.len() as u64;
    let span_s = last_at.saturating_sub(sched.t0_us) as f64 / 1e6;
    let rate = if span_s > 0.0 {
        delivered as f64 / span_s
    } else {
        0.0
    };
    let latency = summary_ms(latencies);
    json!({
        "target_deliveries_per_s": aim,
        "events_per_s_per_session": round3(sched.per_room),
        "published_per_s": round3(sched.per_room * sched.rooms as f64),
        "events_per_session": sched.count,
        "expected": expected,
        "delivered": delivered,
        "delivered_ratio": round3(delivered as f64 / expected.max(1) as f64),
        "gaps": expected.saturating_sub(delivered),
        "dups": dups,
        "beyond": beyond,
        "closed_clients": closed,
        "deliveries_per_s": rate.round(),
        "latency_ms": latency,
        "seconds": round3(wall),
        "server_cpu_pct": cpu_pct(after.server_cpu_s - before.server_cpu_s, wall),
        "hosts_cpu_pct": cpu_pct(after.children_cpu_s - before.children_cpu_s, wall),
        "generator_cpu_pct": cpu_pct(w.gen_cpu, wall),
        "server_peak_rss_kib": after.server_peak_kib,
        "hosts_peak_rss_kib": after.children_peak_kib,
    })
}

/// Why the ramp stops after this step, if it does.
pub(super) fn stop_reason(step: &Value, max_p99_ms: f64) -> Option<String> {
    let ratio = step["delivered_ratio"].as_f64().unwrap_or(0.0);
    let p99 = step["latency_ms"]["p99"].as_f64().unwrap_or(f64::INFINITY);
    let closed = step["closed_clients"].as_u64().unwrap_or(0);
    if closed > 0 {
        Some(format!("{closed} clients lost their connection"))
    } else if ratio < 0.99 {
        Some(format!(
            "delivered {:.1} % of the expected events",
            ratio * 100.0
        ))
    } else if p99 > max_p99_ms {
        Some(format!("p99 latency {p99} ms > {max_p99_ms} ms"))
    } else {
        None
    }
}

pub async fn sleep_until_us(at_us: u64) {
    let now = unix_micros();
    if at_us > now {
        tokio::time::sleep(Duration::from_micros(at_us - now)).await;
    }
}
