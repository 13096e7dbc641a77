//! Cross-node delivery and its cost: real turns on one node, clients on
//! both.
//!
//! Every session is created through the owner node (node 0), so that node
//! runs every turn on its compute hosts and writes every event; each
//! session has `owner_peers` clients attached through the owner and
//! `follower_peers` through the follower node (node 1), which is woken by
//! NOTIFY and reads the events back from PostgreSQL. One driver connection
//! per session, on the owner, submits turns on a fixed schedule (the same
//! turns and schedule as `bench load --scenario turns`: five durable
//! events and ten deltas each), never waiting on delivery.
//!
//! Every client stamps each durable event (session, seq) with the time it
//! read it, on the generator's one clock, so the figure is, per event and
//! follower client, (its receive time − the first owner client's receive
//! time). The generator's own scheduling is in both sides of that
//! difference, as noise. The cost is the CPU time of each process between
//! the first turn's due time and the last delivery, per 1,000 durable
//! deliveries (to all clients, both nodes).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use serde_json::{json, Value};
use tokio::sync::watch;

use super::node::Node;
use super::postgres::RunDatabase;
use super::stats::{round3, signed_summary_ms};
use crate::load::conn::{unix_micros, Conn, Frame};
use crate::load::publish::Schedule;
use crate::load::turns::{drive, DURABLE};
use crate::load::{tether, TargetKind};

/// Time between the sessions being ready and the first turn: the drivers
/// connect.
const LEAD_US: u64 = 1_500_000;

/// The shape of the phase.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub sessions: usize,
    pub owner_peers: usize,
    pub follower_peers: usize,
    /// Durable deliveries a second aimed at, over all clients.
    pub rate: f64,
    pub secs: f64,
    /// How long after the last turn was due the clients may still wait.
    pub drain: Duration,
}

/// One attached client: where it is and what it read, (seq, unix µs).
struct Client {
    session: usize,
    on_owner: bool,
    task: tokio::task::JoinHandle<anyhow::Result<Vec<(u64, u64)>>>,
}

/// What a client read, once it stopped.
struct Reads {
    session: usize,
    on_owner: bool,
    got: Vec<(u64, u64)>,
}

/// Runs the phase; with `samples`, also writes every follower client's
/// read there, one line each: `session seq owner_us follower_us` (unix µs,
/// the owner's the first owner client's), to look at the tail's shape.
pub async fn run(
    nodes: &[Node],
    db: &RunDatabase,
    shape: Shape,
    samples: Option<&std::path::Path>,
) -> anyhow::Result<Value> {
    let (owner, follower) = (&nodes[0], &nodes[1]);
    let mut ctl = tether::connect(&owner.url).await?;
    let ids = tether::create_sessions(&mut ctl, shape.sessions).await?;
    let per_session = shape.owner_peers + shape.follower_peers;
    let turns_per_s = shape.rate / (DURABLE as f64 * per_session as f64);
    let per_room = turns_per_s / shape.sessions as f64;
    let count = (per_room * shape.secs).ceil().max(1.0) as u64;
    let received = Arc::new(AtomicU64::new(0));
    let (stop_tx, stop_rx) = watch::channel(false);
    let urls = (owner.url.as_str(), follower.url.as_str());
    let clients = attach_all(&ids, &shape, urls, &received, &stop_rx).await?;
    let sched = Schedule {
        rooms: shape.sessions,
        per_room,
        count,
        t0_us: unix_micros() + LEAD_US,
        bytes: 0,
    };
    let drivers: Vec<_> = ids
        .iter()
        .enumerate()
        .map(|(k, id)| {
            let (url, id, sched) = (owner.url.clone(), id.clone(), sched.clone());
            tokio::spawn(async move { drive(TargetKind::Tether, &url, &id, k, &sched).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_micros(
        sched.t0_us.saturating_sub(unix_micros()),
    ))
    .await;
    let before = Cpu::sample(nodes, db);
    let expected = count * DURABLE * clients.len() as u64;
    let deadline =
        Duration::from_micros(sched.end_us().saturating_sub(unix_micros())) + shape.drain;
    let all_in = async {
        while received.load(Ordering::Relaxed) < expected {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let complete = tokio::time::timeout(deadline, all_in).await.is_ok();
    let after = Cpu::sample(nodes, db);
    let _ = stop_tx.send(true);
    let mut refused = 0;
    for d in drivers {
        refused += match tokio::time::timeout(shape.drain, d).await {
            Ok(Ok(Ok(n))) => n,
            _ => 1,
        };
    }
    let mut reads = Vec::with_capacity(clients.len());
    for c in clients {
        let got = c.task.await.context("client task")??;
        reads.push(Reads {
            session: c.session,
            on_owner: c.on_owner,
            got,
        });
    }
    if let Some(path) = samples {
        write_samples(path, &reads).with_context(|| format!("write {}", path.display()))?;
    }
    let mut out = harvest(&reads, &sched, &before, &after);
    out["expected"] = json!(expected);
    out["complete"] = json!(complete);
    out["submits_refused_or_late"] = json!(refused);
    out["sessions"] = json!(shape.sessions);
    out["owner_peers"] = json!(shape.owner_peers);
    out["follower_peers"] = json!(shape.follower_peers);
    out["target_durable_deliveries_per_s"] = json!(shape.rate);
    out["turns_per_s"] = json!(round3(turns_per_s));
    Ok(out)
}

/// Every session's clients, `shape.owner_peers` through the owner and
/// `shape.follower_peers` through the follower (`urls`), each reading on a
/// task of its own until `stop`.
async fn attach_all(
    ids: &[String],
    shape: &Shape,
    (owner, follower): (&str, &str),
    received: &Arc<AtomicU64>,
    stop: &watch::Receiver<bool>,
) -> anyhow::Result<Vec<Client>> {
    let per_session = shape.owner_peers + shape.follower_peers;
    let mut clients = Vec::with_capacity(ids.len() * per_session);
    for (k, id) in ids.iter().enumerate() {
        for p in 0..per_session {
            let on_owner = p < shape.owner_peers;
            let conn = attached(if on_owner { owner } else { follower }, id).await?;
            let task = tokio::spawn(read(conn, received.clone(), stop.clone()));
            clients.push(Client {
                session: k,
                on_owner,
                task,
            });
        }
    }
    Ok(clients)
}

/// A client attached to session `id` through the node at `url`.
async fn attached(url: &str, id: &str) -> anyhow::Result<Conn> {
    let mut conn = tether::connect(url).await?;
    if !tether::attach(&mut conn, id, 0, &mut |_| {}).await? {
        anyhow::bail!("session.resume of a fresh session answered resync");
    }
    Ok(conn)
}

/// A client's reading loop: every durable event's seq and receive time,
/// until told to stop.
async fn read(
    mut conn: Conn,
    received: Arc<AtomicU64>,
    mut stop: watch::Receiver<bool>,
) -> anyhow::Result<Vec<(u64, u64)>> {
    let mut got = Vec::new();
    loop {
        tokio::select! {
            _ = stop.changed() => return Ok(got),
            frame = conn.next() => {
                if let Frame::Event(e) = frame? {
                    if let Some(seq) = e.seq {
                        got.push((seq, unix_micros()));
                        received.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
    }
}

/// CPU seconds of every process that carries the load.
#[derive(Debug, Clone, Copy)]
struct Cpu {
    at_us: u64,
    owner: (f64, f64),
    follower: (f64, f64),
    postgres: Option<f64>,
}

impl Cpu {
    fn sample(nodes: &[Node], db: &RunDatabase) -> Cpu {
        Cpu {
            at_us: unix_micros(),
            owner: nodes[0].cpu_s(),
            follower: nodes[1].cpu_s(),
            postgres: db.cpu_s(),
        }
    }
}

fn write_samples(path: &std::path::Path, reads: &[Reads]) -> std::io::Result<()> {
    use std::io::Write;
    let mut first: HashMap<(usize, u64), u64> = HashMap::new();
    for r in reads.iter().filter(|r| r.on_owner) {
        for &(seq, t) in &r.got {
            let e = first.entry((r.session, seq)).or_insert(t);
            *e = (*e).min(t);
        }
    }
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    for r in reads.iter().filter(|r| !r.on_owner) {
        for &(seq, t) in &r.got {
            if let Some(o) = first.get(&(r.session, seq)) {
                writeln!(out, "{} {seq} {o} {t}", r.session)?;
            }
        }
    }
    out.flush()
}

/// The per-event differences and the cost, from every client's reads.
fn harvest(reads: &[Reads], sched: &Schedule, before: &Cpu, after: &Cpu) -> Value {
    // The first and last owner clients' receive times of each (session,
    // seq), and how many read it.
    let mut at_owner: HashMap<(usize, u64), (u64, u64, u32)> = HashMap::new();
    let (mut owner_deliveries, mut follower_deliveries) = (0u64, 0u64);
    for r in reads.iter().filter(|r| r.on_owner) {
        owner_deliveries += r.got.len() as u64;
        for &(seq, t) in &r.got {
            let e = at_owner.entry((r.session, seq)).or_insert((t, t, 0));
            *e = (e.0.min(t), e.1.max(t), e.2 + 1);
        }
    }
    // The control: how far apart two clients of the same node read the
    // same event. The generator's scheduling and the owner's fan-out are
    // in it, the follower path is not; a follower tail well above it is
    // the follower's.
    let spread: Vec<i64> = at_owner
        .values()
        .filter(|e| e.2 > 1)
        .map(|e| e.1 as i64 - e.0 as i64)
        .collect();
    let (mut deltas, mut unmatched, mut last_us) = (Vec::new(), 0u64, 0u64);
    for r in reads {
        last_us = last_us.max(r.got.last().map_or(0, |g| g.1));
        if r.on_owner {
            continue;
        }
        follower_deliveries += r.got.len() as u64;
        for &(seq, t) in &r.got {
            match at_owner.get(&(r.session, seq)) {
                Some(&(o, _, _)) => deltas.push(t as i64 - o as i64),
                None => unmatched += 1,
            }
        }
    }
    let deliveries = owner_deliveries + follower_deliveries;
    let span_s = last_us.saturating_sub(sched.t0_us) as f64 / 1e6;
    let thousands = deliveries as f64 / 1000.0;
    let per_k = |cpu: f64| {
        if thousands > 0.0 {
            json!((cpu / thousands * 1e5).round() / 1e5)
        } else {
            Value::Null
        }
    };
    let window_s = after.at_us.saturating_sub(before.at_us) as f64 / 1e6;
    let pg = match (before.postgres, after.postgres) {
        (Some(b), Some(a)) => per_k(a - b),
        _ => Value::Null,
    };
    json!({
        "durable_deliveries": deliveries,
        "owner_client_deliveries": owner_deliveries,
        "follower_client_deliveries": follower_deliveries,
        "durable_deliveries_per_s": if span_s > 0.0 { (deliveries as f64 / span_s).round() } else { 0.0 },
        "follower_minus_owner_ms": signed_summary_ms(deltas),
        "follower_events_unseen_at_owner": unmatched,
        "owner_clients_spread_ms": signed_summary_ms(spread),
        "cpu_window_s": round3(window_s),
        "cpu_s_per_1000_deliveries": {
            "owner_node": per_k(after.owner.0 - before.owner.0),
            "owner_hosts": per_k(after.owner.1 - before.owner.1),
            "follower_node": per_k(after.follower.0 - before.follower.0),
            "follower_hosts": per_k(after.follower.1 - before.follower.1),
            "postgres": pg,
        },
        "cpu_s": {
            "owner_node": round3(after.owner.0 - before.owner.0),
            "owner_hosts": round3(after.owner.1 - before.owner.1),
            "follower_node": round3(after.follower.0 - before.follower.0),
            "postgres": before.postgres.zip(after.postgres).map(|(b, a)| round3(a - b)),
        },
    })
}
