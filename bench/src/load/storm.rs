//! `--scenario storm`: every client drops its connection at once in the
//! middle of a stream, and all of them come back together presenting what
//! they hold: tether `session.resume` with `last_seen` (attach, omit
//! messages), Socket.IO its private session id and last offset (connection
//! state recovery), the limit nothing (it cannot recover; its loss is the
//! point of comparison).
//!
//! Per client, measured from the moment it starts reconnecting:
//! *back live* is when it received an event at or past the last one meant
//! to leave before that moment, and *caught up* is when it also holds
//! every event before it. Events of a room arrive in order on all three
//! servers, so a client that is back live and misses something has lost
//! it. At the end every client must hold each event of its room exactly
//! once; what it lacks is the loss.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use serde_json::{json, Value};
use tokio::sync::{mpsc, watch};

use super::conn::{unix_micros, Conn, Frame, STALL};
use super::fanout::sleep_until_us;
use super::proc;
use super::publish::Schedule;
use super::tally::{round3, summary_ms, Shared};
use super::target::{Client, Target, Watermark};
use super::{cpu_pct, LoadBench, TargetKind};

/// Time between subscribing and the first event.
const LEAD_US: u64 = 1_000_000;

/// Time the reconnects may take, budgeted into the publishing schedule so
/// that events are still flowing when the clients are back.
const RECONNECT_BUDGET_MS: u64 = 3000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Stream,
    Drop,
    Reconnect,
    Finish,
}

/// What a client reports when it came back.
struct Back {
    reconnect_at: u64,
    resumed_at: u64,
    live_at: u64,
    caught_up: bool,
    recovered: bool,
}

pub async fn run(b: &LoadBench, url: &str, pid: Option<u32>) -> anyhow::Result<Value> {
    let target = Arc::new(Target::prepare(b.target, url, b.sessions).await?);
    let clients = target.subscribe_all(b.sessions * b.peers).await?;
    let per_room = b.rate / b.sessions as f64;
    let publish_ms = b.warmup_ms + b.down_ms + RECONNECT_BUDGET_MS + b.after_ms;
    let sched = Schedule {
        rooms: b.sessions,
        per_room,
        count: (per_room * publish_ms as f64 / 1000.0).ceil().max(1.0) as u64,
        t0_us: unix_micros() + LEAD_US,
        bytes: b.payload_bytes,
    };
    let tallies: Vec<Shared> = clients.iter().map(|c| c.tally.clone()).collect();
    for t in &tallies {
        t.lock().reset(sched.count, false);
    }
    let (phase_tx, phase) = watch::channel(Phase::Stream);
    let (back_tx, mut back_rx) = mpsc::unbounded_channel();
    let (dropped_tx, mut dropped_rx) = mpsc::unbounded_channel();
    let sched = Arc::new(sched);
    let tasks: Vec<_> = clients
        .into_iter()
        .map(|c| {
            let ctx = (
                target.clone(),
                sched.clone(),
                phase.clone(),
                dropped_tx.clone(),
                back_tx.clone(),
            );
            tokio::spawn(client(c, ctx))
        })
        .collect();
    let publisher = target.publish(&sched).await?;

    sleep_until_us(sched.t0_us + b.warmup_ms * 1000).await;
    let drop_at = unix_micros();
    let before = proc::sample(pid);
    phase_tx.send_replace(Phase::Drop);
    for _ in 0..tasks.len() {
        tokio::time::timeout(STALL, dropped_rx.recv())
            .await
            .context("clients did not drop")?
            .context("a client ended early")?;
    }
    tokio::time::sleep(Duration::from_millis(b.down_ms)).await;
    phase_tx.send_replace(Phase::Reconnect);
    let mut backs = Vec::with_capacity(tasks.len());
    while backs.len() < tasks.len() {
        match tokio::time::timeout(STALL, back_rx.recv()).await {
            Ok(Some(back)) => backs.push(back),
            _ => bail!("{} clients did not come back", tasks.len() - backs.len()),
        }
    }
    let all_back_at = unix_micros();
    let storm = proc::sample(pid);

    // Let the stream finish (each room's events arrive in order, so a
    // client that has its room's last one has all it will ever get), then
    // collect what every client holds.
    let deadline = sched.end_us() + (b.drain_secs * 1e6) as u64;
    let has_last = |t: &Shared| t.lock().max_n.is_some_and(|m| m + 1 >= sched.count);
    while unix_micros() < deadline && !tallies.iter().all(has_last) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    phase_tx.send_replace(Phase::Finish);
    for t in tasks {
        t.await??;
    }
    if let Some(p) = publisher {
        p.abort();
    }
    let end = proc::sample(pid);
    let mut v = report(b, &sched, &tallies, &backs, drop_at, all_back_at);
    let wall = (all_back_at - drop_at) as f64 / 1e6;
    let server_cpu = storm.server_cpu_s - before.server_cpu_s;
    v["server_cpu_s_in_storm"] = json!(round3(server_cpu));
    v["server_cpu_pct_in_storm"] = json!(cpu_pct(server_cpu, wall));
    v["hosts_cpu_s_in_storm"] = json!(round3(storm.children_cpu_s - before.children_cpu_s));
    v["server_peak_rss_kib"] = json!(end.server_peak_kib);
    v["hosts_peak_rss_kib"] = json!(end.children_peak_kib);
    Ok(v)
}

type Ctx = (
    Arc<Target>,
    Arc<Schedule>,
    watch::Receiver<Phase>,
    mpsc::UnboundedSender<()>,
    mpsc::UnboundedSender<Back>,
);

/// One client: stream, drop abruptly, come back, read to the end.
async fn client(c: Client, ctx: Ctx) -> anyhow::Result<()> {
    let (target, sched, mut phase, dropped, back) = ctx;
    let Client { room, sub, tally } = c;
    let mut conn = sub.conn;
    tokio::select! {
        _ = phase.wait_for(|p| *p != Phase::Stream) => {}
        r = read_until(&mut conn, &tally, |_| false) => r?,
    }
    let mark = {
        let t = tally.lock();
        match target.kind {
            TargetKind::Tether => Watermark::Tether(t.last_seq),
            TargetKind::Socketio => Watermark::Socketio {
                pid: sub.pid.clone().unwrap_or_default(),
                offset: t.offset.clone(),
            },
            TargetKind::Limit => Watermark::Limit,
        }
    };
    // No close frame: the socket just goes away, as with a lost network.
    drop(conn);
    let _ = dropped.send(());
    phase.wait_for(|p| *p != Phase::Drop).await?;

    let reconnect_at = unix_micros();
    let wanted = sched.released(room, reconnect_at);
    let record = &mut |e| tally.lock().record(e, unix_micros());
    let sub = target.resubscribe(room, &mark, record).await?;
    let resumed_at = unix_micros();
    let mut conn = sub.conn;
    let live = |t: &super::tally::Tally| wanted == 0 || t.max_n.is_some_and(|m| m + 1 >= wanted);
    tokio::time::timeout(STALL, read_until(&mut conn, &tally, live))
        .await
        .context("no live event after the reconnect")??;
    let live_at = unix_micros();
    let caught_up = tally.lock().upto >= wanted;
    let _ = back.send(Back {
        reconnect_at,
        resumed_at,
        live_at,
        caught_up,
        recovered: sub.recovered,
    });
    tokio::select! {
        _ = phase.wait_for(|p| *p == Phase::Finish) => {}
        r = read_until(&mut conn, &tally, |t| t.max_n.is_some_and(|m| m + 1 >= sched.count)) => r?,
    }
    Ok(())
}

/// Records events until `done` holds for the tally (checked first).
async fn read_until(
    conn: &mut Conn,
    tally: &Shared,
    done: impl Fn(&super::tally::Tally) -> bool,
) -> anyhow::Result<()> {
    loop {
        if done(&tally.lock()) {
            return Ok(());
        }
        if let Frame::Event(e) = conn.next().await? {
            tally.lock().record(e, unix_micros());
        }
    }
}

fn report(
    b: &LoadBench,
    sched: &Schedule,
    tallies: &[Shared],
    backs: &[Back],
    drop_at: u64,
    all_back_at: u64,
) -> Value {
    // Durations in microseconds, as the summaries take them.
    let us = |from: u64, to: u64| u32::try_from(to.saturating_sub(from)).unwrap_or(u32::MAX);
    let resume: Vec<u32> = backs
        .iter()
        .map(|k| us(k.reconnect_at, k.resumed_at))
        .collect();
    let live: Vec<u32> = backs
        .iter()
        .map(|k| us(k.reconnect_at, k.live_at))
        .collect();
    let caught: Vec<u32> = backs
        .iter()
        .filter(|k| k.caught_up)
        .map(|k| us(k.reconnect_at, k.live_at))
        .collect();
    let caught_up = caught.len();
    let all_caught_up_ms = (caught_up == backs.len())
        .then(|| caught.iter().max().map(|m| round3(f64::from(*m) / 1000.0)))
        .flatten();
    let (mut delivered, mut dups, mut beyond, mut seq_gaps, mut seq_dups) = (0, 0, 0, 0, 0);
    for t in tallies {
        let t = t.lock();
        delivered += t.distinct;
        dups += t.dups;
        beyond += t.beyond;
        seq_gaps += t.seq_gaps;
        seq_dups += t.seq_dups;
    }
    let expected = sched.count * tallies.len() as u64;
    json!({
        "sessions": b.sessions,
        "clients": tallies.len(),
        "rate": b.rate,
        "payload_bytes": b.payload_bytes,
        "events_per_session": sched.count,
        "expected": expected,
        "delivered": delivered,
        "delivered_ratio": round3(delivered as f64 / expected.max(1) as f64),
        "lost": expected.saturating_sub(delivered),
        "dups": dups,
        "beyond": beyond,
        "seq_gaps": seq_gaps,
        "seq_dups": seq_dups,
        "recovered_clients": backs.iter().filter(|k| k.recovered).count(),
        "caught_up_clients": caught_up,
        "resume_ms": summary_ms(resume),
        "back_live_ms": summary_ms(live),
        "caught_up_ms": summary_ms(caught),
        "all_caught_up_ms": all_caught_up_ms,
        "all_back_from_drop_ms": round3((all_back_at - drop_at) as f64 / 1000.0),
    })
}
