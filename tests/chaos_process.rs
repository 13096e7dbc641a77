//! Process-level chaos: the real `tether` binary under load
//! (sessions, WebSocket clients streaming turns and reconnecting with their
//! watermarks) while the test `kill -9`s random compute hosts and the
//! gateway itself, restarting it on the same data dir. Then: every client
//! holds exactly 1..latest of its session, the store's events are
//! contiguous, every accepted turn ended exactly once, a fresh turn works,
//! and no host process is left after the last shutdown.
//!
//! `TETHER_CHAOS_SECS` (default 12) and `TETHER_CHAOS_SEED` set the run.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod chaos;
mod common;

use common::Backend;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chaos::ws::Ws;
use chaos::Rng;
use common::{tempdir, Gateway};
use serde_json::{json, Value};
use tokio::sync::watch;

const SESSIONS: usize = 4;
const CLIENTS_PER_SESSION: usize = 2;

fn host_command() -> String {
    format!(
        "{} host --engine echo --delay-ms 3",
        env!("CARGO_BIN_EXE_tether")
    )
}

#[derive(Default)]
struct Shared {
    stop: AtomicBool,
    accepted: Mutex<Vec<String>>,
    violations: Mutex<Vec<String>>,
    reconnects: AtomicU64,
    turns: AtomicU64,
}

/// One client: attach, check that seqs arrive exactly once and in order
/// across reconnects (and gateway restarts), and as the driver submit turns.
async fn client(
    url: watch::Receiver<String>,
    shared: Arc<Shared>,
    session: String,
    driver: bool,
    mut rng: Rng,
) -> Vec<u64> {
    let mut seqs: Vec<u64> = Vec::new();
    let mut in_flight: Option<String> = None;
    let mut n = 0;
    loop {
        let stopping = shared.stop.load(Ordering::Relaxed);
        if stopping && (!driver || in_flight.is_none()) {
            return seqs;
        }
        let current = url.borrow().clone();
        let Some(mut ws) = Ws::connect(&current).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let watermark = seqs.last().copied().unwrap_or(0);
        let Ok(r) = ws
            .call(
                "session.resume",
                json!({"session_id": session, "last_seen": watermark, "omit_messages": true}),
            )
            .await
        else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        for e in r["events"].as_array().into_iter().flatten() {
            accept(&shared, &session, &mut seqs, e, &mut in_flight);
        }
        loop {
            let stopping = shared.stop.load(Ordering::Relaxed);
            if stopping && (!driver || in_flight.is_none()) {
                break;
            }
            // Now and then a second prompt while a turn runs, with a
            // random `multitask` and `dedupe_key` (`chaos::submit_params`).
            let second = in_flight.is_some() && rng.below(6) == 0;
            if driver && (in_flight.is_none() || second) && !stopping {
                n += 1;
                let text = format!("turn {n} streams five small words");
                let params = chaos::submit_params(&mut rng, &session, n, text);
                match ws.call("prompt.submit", params).await {
                    Ok(t) => {
                        let turn = t["turn_id"].as_str().unwrap_or_default().to_string();
                        shared.accepted.lock().unwrap().push(turn.clone());
                        shared.turns.fetch_add(1, Ordering::Relaxed);
                        // The newest turn ends last; a duplicate's turn may
                        // have ended already.
                        if t["duplicate"] != true {
                            in_flight = Some(turn);
                        }
                    }
                    Err(Some(_)) => tokio::time::sleep(Duration::from_millis(100)).await,
                    Err(None) => break,
                }
            }
            match ws.event(Duration::from_millis(200)).await {
                Err(()) => break,
                Ok(None) => {}
                Ok(Some(e)) => accept(&shared, &session, &mut seqs, &e, &mut in_flight),
            }
            if rng.below(300) == 0 {
                break;
            }
        }
        shared.reconnects.fetch_add(1, Ordering::Relaxed);
    }
}

fn accept(
    shared: &Shared,
    session: &str,
    seqs: &mut Vec<u64>,
    e: &Value,
    in_flight: &mut Option<String>,
) {
    let Some(seq) = e["seq"].as_u64() else {
        return;
    };
    let expected = seqs.last().copied().unwrap_or(0) + 1;
    if seq != expected {
        shared
            .violations
            .lock()
            .unwrap()
            .push(format!("{session}: seq {seq} where {expected} was next"));
        if seq < expected {
            return;
        }
    }
    seqs.push(seq);
    if e["type"] == "message.complete" && e["turn_id"].as_str() == in_flight.as_deref() {
        *in_flight = None;
    }
}

/// Every durable event of a session, read back through `events.since`.
async fn stored(ws: &mut Ws, session: &str) -> Vec<Value> {
    let mut all = Vec::new();
    loop {
        let after = all.last().map_or(0, |e: &Value| e["seq"].as_u64().unwrap());
        let r = ws
            .call(
                "session.events.since",
                json!({"session_id": session, "last_seen": after, "limit": 1000}),
            )
            .await
            .expect("events.since");
        let page = r["events"].as_array().unwrap().clone();
        let done =
            page.is_empty() || all.len() + page.len() >= r["latest_seq"].as_u64().unwrap() as usize;
        all.extend(page);
        if done {
            return all;
        }
    }
}

fn host_pids(stats: &Value) -> Vec<u32> {
    stats["hosts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|h| h["pid"].as_u64().map(|p| p as u32))
        .collect()
}

async fn kill_9_of_hosts_and_of_the_gateway_loses_nothing(b: Backend) {
    storm(b, None).await
}

/// The same load while the PostgreSQL server (one of this test's own) is restarted, and once
/// stays down for a few seconds: writes answer 5072 meanwhile, and afterwards the same
/// invariants hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarting_postgres_under_load_loses_nothing() {
    let Some(pg) = tether_store::testing::PgServer::start() else {
        return;
    };
    storm(Backend::Postgres(pg.url()), Some(pg)).await
}

/// Runs the load; the faults are `kill -9`s of hosts and of the gateway, or (with `pg`)
/// restarts of the PostgreSQL server.
async fn storm(b: Backend, pg: Option<tether_store::testing::PgServer>) {
    let seed = chaos::seed();
    let secs = chaos::duration(12);
    println!("process chaos seed {seed} for {} s", secs.as_secs());
    let mut rng = Rng::new(seed);
    let dir = tempdir();
    let host = host_command();
    let mut gw = Gateway::start_on(
        &b,
        dir.path(),
        &[
            "--hosts",
            "2",
            "--host-command",
            &host,
            "--host-restarts",
            "1000",
        ],
    );
    let (url_tx, url_rx) = watch::channel(gw.url());
    let shared = Arc::new(Shared::default());

    let mut ws = Ws::connect(&gw.url()).await.expect("connect");
    let mut ids = Vec::new();
    for i in 0..SESSIONS {
        let r = ws
            .call(
                "session.create",
                json!({"title": format!("p{i}"), "attach": false}),
            )
            .await
            .expect("create");
        ids.push(r["session"]["session_id"].as_str().unwrap().to_string());
    }
    drop(ws);

    let mut tasks = Vec::new();
    for id in &ids {
        for c in 0..CLIENTS_PER_SESSION {
            let task = client(
                url_rx.clone(),
                shared.clone(),
                id.clone(),
                c == 0,
                Rng::new(rng.next()),
            );
            tasks.push((id.clone(), tokio::spawn(task)));
        }
    }

    let mut kills: BTreeMap<&str, u32> = BTreeMap::new();
    let mut pids_seen = BTreeSet::new();
    let until = tokio::time::Instant::now() + secs;
    while tokio::time::Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(400 + rng.below(800))).await;
        let pids = match Ws::connect(&gw.url()).await {
            Some(mut w) => match w.call("session.events.stats", json!({})).await {
                Ok(s) => host_pids(&s),
                Err(_) => Vec::new(),
            },
            None => Vec::new(),
        };
        pids_seen.extend(pids.iter().copied());
        if let Some(pg) = &pg {
            if rng.below(3) == 0 {
                pg.stop();
                tokio::time::sleep(Duration::from_millis(1000 + rng.below(2000))).await;
                pg.start_again();
                *kills.entry("postgres down").or_default() += 1;
            } else {
                pg.restart();
                *kills.entry("postgres restart").or_default() += 1;
            }
        } else if rng.below(4) == 0 {
            // The gateway itself: SIGKILL, then a new one on the same store.
            gw.restart();
            let _ = url_tx.send(gw.url());
            *kills.entry("gateway").or_default() += 1;
        } else if let Some(pid) = pids.get(rng.below(pids.len() as u64 + 1) as usize) {
            let _ = std::process::Command::new("kill")
                .args(["-9", &pid.to_string()])
                .status();
            *kills.entry("host").or_default() += 1;
        }
    }
    shared.stop.store(true, Ordering::Relaxed);
    let mut held = Vec::new();
    for (id, task) in tasks {
        let seqs = tokio::time::timeout(Duration::from_secs(120), task)
            .await
            .unwrap_or_else(|_| {
                panic!("seed {seed}: a client of {id} never finished (a turn stuck?)")
            })
            .expect("client");
        held.push((id, seqs));
    }

    // The invariants, from a fresh connection to the last gateway.
    let mut ws = Ws::connect(&gw.url()).await.expect("connect");
    if let Ok(s) = ws.call("session.events.stats", json!({})).await {
        pids_seen.extend(host_pids(&s));
    }
    let mut problems = shared.violations.lock().unwrap().clone();
    let mut completes: BTreeMap<String, u32> = BTreeMap::new();
    let mut users = Vec::new();
    let mut latest = BTreeMap::new();
    for id in &ids {
        let events = stored(&mut ws, id).await;
        let got: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
        if got != (1..=got.len() as u64).collect::<Vec<_>>() {
            problems.push(format!("{id}: stored seqs are not contiguous"));
        }
        latest.insert(id.clone(), got.len() as u64);
        for e in &events {
            let turn = e["turn_id"].as_str().map(str::to_string);
            match (e["type"].as_str(), turn) {
                (Some("message.user"), Some(t)) => users.push(t),
                (Some("message.complete"), Some(t)) => *completes.entry(t).or_default() += 1,
                _ => {}
            }
        }
    }
    for (id, mut seqs) in held {
        // What landed after the client stopped listening, as a reconnect
        // would fetch it.
        let from = seqs.last().copied().unwrap_or(0);
        let r = ws
            .call(
                "session.resume",
                json!({"session_id": id, "last_seen": from, "attach": false, "omit_messages": true}),
            )
            .await
            .expect("final resume");
        seqs.extend(
            r["events"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|e| e["seq"].as_u64()),
        );
        if seqs != (1..=latest[&id]).collect::<Vec<_>>() {
            problems.push(format!(
                "{id}: a client holds {} seqs, the store {}",
                seqs.len(),
                latest[&id]
            ));
        }
    }
    let accepted = shared.accepted.lock().unwrap().clone();
    for t in users.iter().chain(accepted.iter()) {
        let n = completes.get(t).copied().unwrap_or(0);
        if n != 1 {
            problems.push(format!("turn {t} has {n} message.complete"));
        }
    }
    problems.sort();
    problems.dedup();
    println!(
        "process chaos seed {seed}: kills {kills:?}; turns accepted {}; reconnects {}",
        shared.turns.load(Ordering::Relaxed),
        shared.reconnects.load(Ordering::Relaxed)
    );
    assert!(problems.is_empty(), "seed {seed}: {problems:#?}");

    // (5) A fresh session and turn work.
    let r = ws
        .call("session.create", json!({"title": "after"}))
        .await
        .expect("create");
    let id = r["session"]["session_id"].as_str().unwrap().to_string();
    ws.call(
        "prompt.submit",
        json!({"session_id": id, "text": "after the storm"}),
    )
    .await
    .expect("submit");
    loop {
        let e = ws
            .event(Duration::from_secs(30))
            .await
            .expect("connection")
            .expect("the fresh turn ends");
        if e["type"] == "message.complete" {
            assert_eq!(e["payload"]["text"], "after the storm");
            break;
        }
    }
    drop(ws);

    // (4) No host process outlives the gateway.
    assert_eq!(gw.terminate(), Some(0));
    let pids: Vec<u32> = pids_seen.iter().copied().collect();
    chaos::wait_gone(&pids, &format!("seed {seed}: hosts left running")).await;
}

backends!(kill_9_of_hosts_and_of_the_gateway_loses_nothing,);
