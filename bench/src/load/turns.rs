//! `--scenario turns`: the shape of an agent application. S sessions × P
//! attached clients, and one driver connection per session that submits
//! turns on a fixed schedule; each turn is `/tool t {"n":I,"t_us":T}`
//! plus ten words, so on tether it is five durable events (`message.user`,
//! `message.start`, `tool.start`, `tool.complete`, `message.complete`) and
//! ten `message.delta`s, through a compute host, SQLite and every peer.
//! The baselines relay the same fifteen messages per turn to every room
//! member (the driver publishes them at the turn's intended time, with
//! about the sizes of tether's frames).
//!
//! Each client times every turn's `message.complete` from the turn's
//! intended submit time, and counts what it received: durable events, the
//! deltas they carry however merged (tether may join a turn's deltas into
//! fewer frames; each word is one delta), and the wire frames apart. The
//! steps are in durable deliveries a second (5 per turn per client). A
//! step is *clean* when every client got every turn, every delta and
//! every durable event once (tether: gap-free `seq`s), and p99 < 200 ms.

use std::time::Duration;

use anyhow::Context;
use serde_json::{json, Value};

use super::conn::{unix_micros, Conn, Event, Flood, Frame, STALL};
use super::fanout::{measure, ramp, schedule, Setup, Window};
use super::publish::Schedule;
use super::tally::{round3, seq_faults, summary_ms, Shared};
use super::{cpu_pct, socketio, tether, LoadBench, TargetKind};

/// Words per turn: one delta each.
pub const WORDS: u64 = 10;
/// Durable events per turn on tether (and non-delta messages on the
/// baselines).
pub const DURABLE: u64 = 5;
/// p99 of a clean step.
const CLEAN_P99_MS: f64 = 200.0;
/// Time between starting a step and its first turn: the drivers connect.
const LEAD_US: u64 = 1_500_000;
/// Sizes of the baselines' messages, about those of tether's frames for
/// this turn (a durable event's frame carries the envelope, the session,
/// turn and trace ids, a timestamp and a seq; a delta's a few less).
const BASE_DURABLE_BYTES: usize = 330;
const BASE_DELTA_BYTES: usize = 270;

/// A baseline's relayed message as a client reads it. `kind` is `d` for a
/// delta, `c` for the turn's last message, anything else for the other
/// four; frames without one (the fanout's) read as durable.
pub fn baseline_event(text: &str, flood: Option<Flood>, offset: Option<String>) -> Event {
    let delta = text.contains(r#""kind":"d""#);
    Event {
        seq: None,
        flood,
        offset,
        durable: !delta,
        pieces: u32::from(delta),
        complete: text.contains(r#""kind":"c""#),
    }
}

/// The words of every turn, each ending with a space.
fn words() -> String {
    (0..WORDS).map(|i| format!("w{i} ")).collect()
}

pub async fn run(b: &LoadBench, url: &str, pid: Option<u32>) -> anyhow::Result<Value> {
    let ramped = ramp(b, url, pid, step).await?;
    let steps = ramped.steps;
    let best = |key: &str, clean_only: bool| {
        steps
            .iter()
            .filter(|s| !clean_only || s["clean"] == true)
            .filter_map(|s| s[key].as_f64())
            .fold(0.0_f64, f64::max)
    };
    let end = ramped.end;
    Ok(json!({
        "sessions": b.sessions,
        "peers": b.peers,
        "clients": ramped.clients,
        "step_secs": b.step_secs,
        "clean_durable_deliveries_per_s": best("durable_deliveries_per_s", true).round(),
        "clean_events_delivered_per_s": best("events_delivered_per_s", true).round(),
        "clean_wire_frames_per_s": best("wire_frames_per_s", true).round(),
        "saturation_events_delivered_per_s": best("events_delivered_per_s", false).round(),
        "steps": steps,
        "stopped": ramped.stopped,
        "server_peak_rss_kib": end.server_peak_kib,
        "hosts_peak_rss_kib": end.children_peak_kib,
    }))
}

/// One step: `aim` durable deliveries a second for `secs`; its JSON line.
async fn step(on: &Setup<'_>, aim: u64, secs: f64) -> anyhow::Result<Value> {
    let Setup {
        b, target, tallies, ..
    } = *on;
    // Each turn is `DURABLE` durable deliveries to each client.
    let sched = schedule(b, tallies.len(), DURABLE, aim, secs, LEAD_US, 0);
    let gaps_before = seq_faults(tallies);
    for t in tallies {
        let mut t = t.lock();
        t.turns = true;
        t.reset(sched.count, true);
    }
    let drivers: Vec<_> = (0..b.sessions)
        .map(|k| {
            let (kind, url) = (target.kind, target.url().to_owned());
            let room = target.rooms.get(k).cloned().unwrap_or_default();
            let sched = sched.clone();
            tokio::spawn(async move { drive(kind, &url, &room, k, &sched).await })
        })
        .collect();
    let w = measure(on, &sched, |t| {
        t.complete() && t.pieces >= WORDS * t.expected
    })
    .await;
    let (refused, driver_errors) = drivers_done(drivers).await;
    let (gaps, dups) = seq_faults(tallies);
    let mut v = harvest(tallies, &sched, aim, &w);
    v["submits_refused"] = json!(refused);
    v["seq_gaps"] = json!(gaps - gaps_before.0);
    v["seq_dups"] = json!(dups - gaps_before.1);
    if let Some(e) = driver_errors.first() {
        v["driver_error"] = json!(e);
    }
    let clean = is_clean(&v) && refused == 0 && driver_errors.is_empty();
    v["clean"] = json!(clean);
    Ok(v)
}

/// The submits the drivers saw refused, and their errors (a driver still
/// behind its schedule at the step's end is stopped and counts as one).
async fn drivers_done(
    drivers: Vec<tokio::task::JoinHandle<anyhow::Result<u64>>>,
) -> (u64, Vec<String>) {
    let (mut refused, mut driver_errors) = (0, Vec::new());
    for d in drivers {
        if !d.is_finished() {
            d.abort();
            driver_errors.push("a driver was still behind its schedule".to_owned());
            continue;
        }
        match d.await {
            Ok(Ok(n)) => refused += n,
            Ok(Err(e)) => driver_errors.push(format!("{e:#}")),
            Err(e) => driver_errors.push(format!("{e}")),
        }
    }
    (refused, driver_errors)
}

/// Whether the step's tallies are a clean step's: every turn, delta and
/// durable event once, gap-free `seq`s, p99 under [`CLEAN_P99_MS`].
fn is_clean(v: &Value) -> bool {
    v["delivered_ratio"] == 1.0
        && v["pieces_ratio"] == 1.0
        && v["dups"] == 0
        && v["seq_gaps"] == 0
        && v["seq_dups"] == 0
        && v["latency_ms"]["p99"]
            .as_f64()
            .is_some_and(|p| p < CLEAN_P99_MS)
}

/// Adds up the tallies of a finished step.
fn harvest(tallies: &[Shared], sched: &Schedule, aim: u64, w: &Window) -> Value {
    let (wall, before, after) = (w.wall, &w.before, &w.after);
    let mut latencies = Vec::new();
    let (mut turns, mut dups, mut closed, mut last_at) = (0, 0, 0, 0);
    let (mut frames, mut durable, mut pieces) = (0, 0, 0);
    for t in tallies {
        let mut t = t.lock();
        turns += t.distinct;
        dups += t.dups;
        closed += u64::from(t.closed.is_some());
        last_at = last_at.max(t.last_at_us);
        frames += t.frames;
        durable += t.durable;
        pieces += t.pieces;
        latencies.append(&mut t.latencies_us);
    }
    let expected = sched.count * tallies.len() as u64;
    let span_s = last_at.saturating_sub(sched.t0_us) as f64 / 1e6;
    let rate = |n: u64| {
        if span_s > 0.0 {
            (n as f64 / span_s).round()
        } else {
            0.0
        }
    };
    json!({
        "target_durable_deliveries_per_s": aim,
        "turns_per_s_per_session": round3(sched.per_room),
        "turns_per_s": round3(sched.per_room * sched.rooms as f64),
        "turns_per_session": sched.count,
        "expected": expected,
        "delivered": turns,
        "delivered_ratio": round3(turns as f64 / expected.max(1) as f64),
        "pieces_ratio": round3(pieces as f64 / (expected * WORDS).max(1) as f64),
        "durable_ratio": round3(durable as f64 / (expected * DURABLE).max(1) as f64),
        "dups": dups,
        "closed_clients": closed,
        "durable_deliveries_per_s": rate(durable),
        "events_delivered_per_s": rate(durable + pieces),
        "wire_frames_per_s": rate(frames),
        "deltas_per_frame": round3(pieces as f64 / frames.saturating_sub(durable).max(1) as f64),
        "latency_ms": summary_ms(latencies),
        "seconds": round3(wall),
        "server_cpu_pct": cpu_pct(after.server_cpu_s - before.server_cpu_s, wall),
        "hosts_cpu_pct": cpu_pct(after.children_cpu_s - before.children_cpu_s, wall),
        "generator_cpu_pct": cpu_pct(w.gen_cpu, wall),
        "server_rss_kib": after.server_rss_kib,
        "server_peak_rss_kib": after.server_peak_kib,
        "host_max_rss_kib": after.child_max_rss_kib,
    })
}

/// Session (room) `k`'s driver: submits (tether) or publishes (the
/// baselines) each of its turns at its intended time, answering the
/// server meanwhile; the number of submits the server refused.
pub async fn drive(
    kind: TargetKind,
    url: &str,
    room: &str,
    k: usize,
    sched: &Schedule,
) -> anyhow::Result<u64> {
    let mut conn = match kind {
        TargetKind::Tether => tether::connect(url).await?,
        TargetKind::Socketio => socketio::connect(url, None, &mut |_| {}).await?.conn,
        TargetKind::Limit => Conn::open(kind, url).await?,
    };
    let mut replies = Replies::default();
    let words = words();
    for i in 0..sched.count {
        let due = sched.due(k, i);
        wait_until(&mut conn, due, &mut replies).await?;
        match kind {
            TargetKind::Tether => {
                let text = format!("/tool t {{\"n\":{i},\"t_us\":{due}}}\n{words}");
                let req = json!({"jsonrpc": "2.0", "id": i, "method": "prompt.submit",
                    "params": {"session_id": room, "text": text}});
                conn.send(req.to_string()).await?;
            }
            _ => {
                for body in turn_messages(room, i, due) {
                    let frame = match kind {
                        TargetKind::Socketio => socketio::publish_frame(&body),
                        _ => body,
                    };
                    conn.feed(frame).await?;
                }
                conn.flush().await?;
            }
        }
    }
    if kind == TargetKind::Tether {
        let want = sched.count;
        tokio::time::timeout(STALL, async {
            while replies.answered < want {
                if let Frame::Text(t) = conn.next().await? {
                    replies.note(&t);
                }
            }
            anyhow::Ok(())
        })
        .await
        .context("prompt.submit answers")??;
    }
    Ok(replies.refused)
}

/// The answers a tether driver got to its submits.
#[derive(Default)]
struct Replies {
    answered: u64,
    refused: u64,
}

impl Replies {
    fn note(&mut self, text: &str) {
        if text.contains(r#""id":"#) {
            self.answered += 1;
            self.refused += u64::from(text.contains(r#""error":"#));
        }
    }
}

/// Reads (and answers heartbeats) until `due`, unix µs.
async fn wait_until(conn: &mut Conn, due: u64, replies: &mut Replies) -> anyhow::Result<()> {
    loop {
        let now = unix_micros();
        if due <= now {
            return Ok(());
        }
        tokio::select! {
            () = tokio::time::sleep(Duration::from_micros(due - now)) => return Ok(()),
            frame = conn.next() => {
                if let Frame::Text(t) = frame? {
                    replies.note(&t);
                }
            }
        }
    }
}

/// The fifteen messages of turn `n` of `room` as a baseline relays them:
/// four durable-like ones, ten deltas of one word, and the last one.
fn turn_messages(room: &str, n: u64, t_us: u64) -> Vec<String> {
    let msg = |kind: &str, text: &str, bytes: usize| {
        let head = format!(
            r#"{{"room":"{room}","n":{n},"t_us":{t_us},"kind":"{kind}","text":"{text}","pad":""#
        );
        let pad = "x".repeat(bytes.saturating_sub(head.len() + 2));
        format!(r#"{head}{pad}"}}"#)
    };
    let mut out = Vec::with_capacity((DURABLE + WORDS) as usize);
    for kind in ["u", "s", "ts", "tc"] {
        out.push(msg(kind, "", BASE_DURABLE_BYTES));
    }
    for i in 0..WORDS {
        out.push(msg("d", &format!("w{i} "), BASE_DELTA_BYTES));
    }
    out.push(msg("c", &words(), BASE_DURABLE_BYTES));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_baseline_turn_reads_as_five_durable_events_and_ten_deltas() {
        let msgs = turn_messages("r1", 3, 1_700_000_000_000_000);
        assert_eq!(msgs.len(), 15);
        let events: Vec<Event> = msgs
            .iter()
            .map(|m| baseline_event(m, super::super::conn::flood_in(m), None))
            .collect();
        assert_eq!(events.iter().filter(|e| e.durable).count(), 5);
        assert_eq!(events.iter().map(|e| e.pieces).sum::<u32>(), 10);
        assert!(events[14].complete && events[..14].iter().all(|e| !e.complete));
        assert!(events.iter().all(|e| e.flood
            == Some(Flood {
                n: 3,
                t_us: 1_700_000_000_000_000
            })));
        for m in &msgs {
            let v: Value = serde_json::from_str(m).expect("JSON");
            assert_eq!(v["room"], "r1");
            assert!(m.len() <= BASE_DURABLE_BYTES + 30, "{}", m.len());
        }
    }
}
