//! The in-process chaos harness: a full gateway (real store, real compute
//! host processes) driven by in-process clients while a monkey kills its
//! actors, then the chaos invariants checked against the clients and
//! the store.
#![allow(dead_code)]

pub mod client;
pub mod monkey;
pub mod ws;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ractor::ActorRef;
use serde_json::{json, Value};
use tether_actors::{
    AfterIntensity, Backoff, GatewayArgs, GatewayConfig, GatewayHandle, HostConfig, PeerMsg,
    RestartPolicy, Strategy,
};
use tether_protocol::SessionId;
use tether_store::{StoreConfig, StoreRead};

use client::{CallError, Conn};

/// splitmix64: small, seedable, so a failing run replays from its seed.
#[derive(Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Logs to stderr when `RUST_LOG` is set (shown for a failing test).
pub fn logs() {
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
    }
}

/// The seed of this run: `TETHER_CHAOS_SEED`, else a fixed one (CI runs
/// the same schedule every time; a soak sets its own).
pub fn seed() -> u64 {
    std::env::var("TETHER_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x7e7e_c4a0_5eed)
}

/// How long the monkey runs: `TETHER_CHAOS_SECS`, else `default`.
pub fn duration(default: u64) -> Duration {
    Duration::from_secs(
        std::env::var("TETHER_CHAOS_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(default),
    )
}

/// Restarts generous enough that the monkey never exhausts them.
fn lenient() -> RestartPolicy {
    RestartPolicy {
        strategy: Strategy::OneForOne,
        intensity: 10_000,
        period: Duration::from_secs(60),
        backoff: Backoff::None,
        after_intensity: AfterIntensity::Escalate,
    }
}

pub struct Harness {
    pub gw: GatewayHandle,
    pub reader: Arc<dyn StoreRead>,
    pub dir: tempfile::TempDir,
    /// On PostgreSQL, the run's own database (dropped with the harness).
    pub database: Option<tether_store::testing::TestDatabase>,
}

/// A gateway on a fresh store with `slots` echo hosts streaming a word
/// every `delay_ms`.
pub async fn start(slots: usize, delay_ms: u64, core_policy: Option<RestartPolicy>) -> Harness {
    start_on(None, slots, delay_ms, core_policy).await
}

/// [`start`] on SQLite, or with `postgres` (a server URL) on a database of
/// its own on that PostgreSQL server.
pub async fn start_on(
    postgres: Option<&str>,
    slots: usize,
    delay_ms: u64,
    core_policy: Option<RestartPolicy>,
) -> Harness {
    let dir = tempfile::tempdir().expect("tempdir");
    let (backend, database) = match postgres {
        None => (
            tether_store::Backend::Sqlite(StoreConfig::new(dir.path().join("tether.db"))),
            None,
        ),
        Some(server) => {
            let db = tether_store::testing::TestDatabase::create(server).await;
            let backend = tether_store::Backend::from_url(&db.url).expect("url");
            (backend, Some(db))
        }
    };
    let store = tether_store::open(&backend).await.expect("open store");
    let reader = store.reader.clone();
    let mut hosts = HostConfig::new(vec![
        env!("CARGO_BIN_EXE_tether").to_string(),
        "host".into(),
        "--engine".into(),
        "echo".into(),
        "--delay-ms".into(),
        delay_ms.to_string(),
    ]);
    hosts.slots = slots;
    hosts.restart = lenient();
    hosts.data_dir = Some(dir.path().to_path_buf());
    let config = GatewayConfig {
        core_policy: core_policy.unwrap_or_else(lenient),
        // Orphans come and go with the drops: let the reaper park some.
        orphan_grace: Duration::from_secs(1),
        turn_deadline: Duration::from_secs(120),
        ..GatewayConfig::default()
    };
    let gw = GatewayHandle::start(GatewayArgs {
        config,
        hosts: Some(hosts),
        reader: store.reader,
        handoffs: store.handoffs,
        eraser: store.eraser,
        epoch: store.epoch,
        writer_factory: store.writers,
        cluster: None,
    })
    .await
    .expect("start gateway");
    Harness {
        gw,
        reader,
        dir,
        database,
    }
}

/// What the run did, for the closing report.
#[derive(Default)]
pub struct Counts {
    pub turns_accepted: AtomicU64,
    pub reconnects: AtomicU64,
    pub events_seen: AtomicU64,
    pub compressions: AtomicU64,
    /// Prompts sent while a turn was in flight (with a random `multitask`).
    pub second_prompts: AtomicU64,
    /// Prompts answered with an earlier prompt's turn (`dedupe_key`).
    pub duplicates: AtomicU64,
}

/// What every client and the monkey share.
pub struct Shared {
    pub stop: AtomicBool,
    pub counts: Counts,
    /// Each client's current peer, for the monkey to kill.
    pub peers: Mutex<Vec<Option<ActorRef<PeerMsg>>>>,
    /// Turns whose `prompt.submit` was answered with a turn id.
    pub accepted: Mutex<Vec<(SessionId, String)>>,
    /// Violations seen by clients (gap, duplicate, resync).
    pub violations: Mutex<Vec<String>>,
}

impl Shared {
    pub fn new(clients: usize) -> Arc<Self> {
        Arc::new(Shared {
            stop: AtomicBool::new(false),
            counts: Counts::default(),
            peers: Mutex::new(vec![None; clients]),
            accepted: Mutex::new(Vec::new()),
            violations: Mutex::new(Vec::new()),
        })
    }

    fn violation(&self, v: String) {
        self.violations.lock().unwrap().push(v);
    }
}

/// Creates `n` sessions.
pub async fn sessions(h: &Harness, n: usize) -> Vec<SessionId> {
    let mut conn = Conn::open(h.gw.ctx()).await.expect("connect");
    let mut ids = Vec::new();
    for i in 0..n {
        let r = conn
            .call(
                "session.create",
                json!({"title": format!("chaos {i}"), "attach": false}),
            )
            .await
            .unwrap_or_else(|e| panic!("create: {e:?}"));
        ids.push(SessionId::from(
            r["session"]["session_id"].as_str().unwrap(),
        ));
    }
    conn.close();
    ids
}

/// One client of one session: attaches, checks that seqs arrive exactly
/// once and in order across reconnects, and (as the driver) submits turns
/// one after another. Returns the seqs it holds.
pub async fn client(
    h: Arc<Harness>,
    shared: Arc<Shared>,
    index: usize,
    session: SessionId,
    driver: bool,
    mut rng: Rng,
) -> Vec<u64> {
    let ctx = h.gw.ctx().clone();
    let mut seqs: Vec<u64> = Vec::new();
    let mut in_flight: Option<String> = None;
    let mut words = 0u64;
    loop {
        let stopping = shared.stop.load(Ordering::Relaxed);
        if stopping && (!driver || in_flight.is_none()) {
            break;
        }
        let Some(mut conn) = Conn::open(&ctx).await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        shared.peers.lock().unwrap()[index] = Some(conn.peer.clone());
        let watermark = seqs.last().copied().unwrap_or(0);
        let resumed = conn
            .call(
                "session.resume",
                json!({"session_id": session.as_str(), "last_seen": watermark,
                       "attach": true, "omit_messages": true}),
            )
            .await;
        let r = match resumed {
            Ok(r) => r,
            Err(_) => {
                // Registry restarting, session reloading, peer killed...
                conn.close();
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if r["resync"] == true {
            shared.violation(format!(
                "{session}: resume from {watermark} asked for a resync"
            ));
        }
        for e in r["events"].as_array().into_iter().flatten() {
            accept(&shared, &session, &mut seqs, e, &mut in_flight);
        }
        loop {
            let stopping = shared.stop.load(Ordering::Relaxed);
            if stopping && (!driver || in_flight.is_none()) {
                break;
            }
            if driver && in_flight.is_none() && !stopping && rng.below(12) == 0 {
                // Compactions too: a new segment, control requests to the
                // hosts, late answers while things die around them.
                match conn
                    .call("session.compress", json!({"session_id": session.as_str()}))
                    .await
                {
                    Err(CallError::Gone) => break,
                    Err(CallError::Rpc(_)) => {}
                    Ok(_) => {
                        shared.counts.compressions.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            // A prompt when idle; now and then a second one while a turn
            // runs, with a random policy, so that every `multitask` (and
            // duplicates of a `dedupe_key`) meets the monkey too.
            let second = in_flight.is_some() && rng.below(6) == 0;
            if driver && (in_flight.is_none() || second) && !stopping {
                if second {
                    shared.counts.second_prompts.fetch_add(1, Ordering::Relaxed);
                }
                words += 1;
                let text = format!("turn {words} of {session} streams a few words");
                let params = submit_params(&mut rng, session.as_str(), words, text);
                match conn.call("prompt.submit", params).await {
                    Ok(t) => {
                        let turn = t["turn_id"].as_str().unwrap_or_default().to_string();
                        shared.counts.turns_accepted.fetch_add(1, Ordering::Relaxed);
                        shared
                            .accepted
                            .lock()
                            .unwrap()
                            .push((session.clone(), turn.clone()));
                        // The newest turn ends last, whatever its policy; a
                        // duplicate's turn may have ended already.
                        if t["duplicate"] == true {
                            shared.counts.duplicates.fetch_add(1, Ordering::Relaxed);
                        } else {
                            in_flight = Some(turn);
                        }
                    }
                    Err(CallError::Rpc(_)) => {
                        // 5019 while hosts restart, 5072 while the registry
                        // does, 4091 for a `reject`, 4009 for a full queue.
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    Err(CallError::Gone) => break,
                }
            }
            match conn.event(Duration::from_millis(200)).await {
                Err(_) => break,
                Ok(None) => {}
                Ok(Some(e)) => accept(&shared, &session, &mut seqs, &e, &mut in_flight),
            }
            // Now and then a client just walks away and comes back.
            if rng.below(400) == 0 {
                break;
            }
        }
        conn.close();
        shared.counts.reconnects.fetch_add(1, Ordering::Relaxed);
    }
    seqs
}

/// A `prompt.submit` with a random `multitask` (or none), and now and
/// then a `dedupe_key` that the previous prompt may have had too.
pub fn submit_params(rng: &mut Rng, session: &str, words: u64, text: String) -> Value {
    let mut params = json!({"session_id": session, "text": text});
    let policy = ["enqueue", "reject", "interrupt", "rollback"][rng.below(4) as usize];
    match rng.below(5) {
        0 => {}
        1 => params["multitask"] = json!("interrupt"),
        _ => params["multitask"] = json!(policy),
    }
    if params["multitask"] == "interrupt" && rng.below(2) == 0 {
        params["drop_queued"] = json!(true);
    }
    if rng.below(3) == 0 {
        params["dedupe_key"] = json!(format!("k{}", words / 2));
    }
    params
}

fn accept(
    shared: &Shared,
    session: &SessionId,
    seqs: &mut Vec<u64>,
    e: &Value,
    in_flight: &mut Option<String>,
) {
    let Some(seq) = e["seq"].as_u64() else {
        return;
    };
    let expected = seqs.last().copied().unwrap_or(0) + 1;
    if seq != expected {
        shared.violation(format!(
            "{session}: got seq {seq} where {expected} was next ({})",
            if seq < expected { "duplicate" } else { "gap" }
        ));
        if seq < expected {
            return;
        }
    }
    seqs.push(seq);
    shared.counts.events_seen.fetch_add(1, Ordering::Relaxed);
    if e["type"] == "message.complete" && e["turn_id"].as_str() == in_flight.as_deref() {
        *in_flight = None;
    }
}

/// A client's final resume from its watermark (no attach): what it missed
/// after it stopped listening.
pub async fn catch_up(h: &Harness, session: &SessionId, seqs: &mut Vec<u64>) {
    // A core actor killed just before the monkey stopped may still be
    // restarting: retry as a client would, within a bound.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let watermark = seqs.last().copied().unwrap_or(0);
    let r = loop {
        let attempt = async {
            let mut c = Conn::open(h.gw.ctx()).await.ok_or(CallError::Gone)?;
            let r = c
                .call(
                    "session.resume",
                    json!({"session_id": session.as_str(), "last_seen": watermark,
                           "attach": false, "omit_messages": true}),
                )
                .await;
            c.close();
            r
        };
        match attempt.await {
            Ok(r) => break r,
            Err(e) if tokio::time::Instant::now() > deadline => {
                panic!("final resume of {session}: {e:?}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    };
    for e in r["events"].as_array().into_iter().flatten() {
        if let Some(seq) = e["seq"].as_u64() {
            seqs.push(seq);
        }
    }
}

/// Invariants (1)–(3) against the store: each client's seqs are exactly
/// 1..latest, the store's are contiguous from 1, and every turn that was
/// accepted (or has a `message.user` in the store) ended exactly once.
pub async fn check_store(
    h: &Harness,
    shared: &Shared,
    held: &[(SessionId, Vec<u64>)],
) -> Vec<String> {
    let mut problems = shared.violations.lock().unwrap().clone();
    let mut latest = HashMap::new();
    let mut completes: BTreeMap<String, u32> = BTreeMap::new();
    let mut users: Vec<String> = Vec::new();
    let sessions: std::collections::BTreeSet<SessionId> =
        held.iter().map(|(s, _)| s.clone()).collect();
    for id in &sessions {
        let rows = h
            .reader
            .events_since(id, 0, u32::MAX)
            .await
            .expect("read events");
        let want: Vec<u64> = (1..=rows.len() as u64).collect();
        let got: Vec<u64> = rows.iter().map(|r| r.seq).collect();
        if got != want {
            problems.push(format!("{id}: stored seqs are not contiguous from 1"));
        }
        latest.insert(id.clone(), rows.len() as u64);
        for r in &rows {
            match (r.kind.as_str(), &r.turn_id) {
                ("message.user", Some(t)) => users.push(t.clone()),
                ("message.complete", Some(t)) => *completes.entry(t.clone()).or_default() += 1,
                _ => {}
            }
        }
    }
    for (id, seqs) in held {
        let want: Vec<u64> = (1..=latest[id]).collect();
        if *seqs != want {
            problems.push(format!(
                "{id}: a client holds {} seqs ending at {:?}, the store has 1..{}",
                seqs.len(),
                seqs.last(),
                latest[id]
            ));
        }
    }
    let accepted = shared.accepted.lock().unwrap().clone();
    for turn in users.iter().chain(accepted.iter().map(|(_, t)| t)) {
        let n = completes.get(turn).copied().unwrap_or(0);
        if n != 1 {
            problems.push(format!("turn {turn} has {n} message.complete"));
        }
    }
    problems.sort();
    problems.dedup();
    problems
}

/// Invariant (5): after the chaos, a new session and a turn just work.
pub async fn check_fresh_turn(h: &Harness) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut last = String::new();
    while tokio::time::Instant::now() < deadline {
        match fresh_turn(h).await {
            Ok(()) => return Ok(()),
            Err(e) => last = e,
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Err(format!("no working turn after the chaos: {last}"))
}

async fn fresh_turn(h: &Harness) -> Result<(), String> {
    let mut c = Conn::open(h.gw.ctx()).await.ok_or("connect")?;
    let r = c
        .call("session.create", json!({"title": "after"}))
        .await
        .map_err(|e| format!("create: {e:?}"))?;
    let id = r["session"]["session_id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    c.call(
        "prompt.submit",
        json!({"session_id": id, "text": "still here"}),
    )
    .await
    .map_err(|e| format!("submit: {e:?}"))?;
    loop {
        match c.event(Duration::from_secs(30)).await {
            Ok(Some(e)) if e["type"] == "message.complete" => {
                c.close();
                return if e["payload"]["text"] == "still here" {
                    Ok(())
                } else {
                    Err(format!("unexpected end: {e}"))
                };
            }
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => return Err("the turn did not end".into()),
        }
    }
}

/// Whether a process is running (a zombie awaiting its reaper is not).
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => false,
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
    }
}

/// Waits up to 10 s for every process in `pids` to be gone; fails with
/// `what` and the ones left.
pub async fn wait_gone(pids: &[u32], what: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let left: Vec<u32> = pids.iter().copied().filter(|p| alive(*p)).collect();
        if left.is_empty() {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "{what}: {left:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
