//! `session.close` ends every turn it finds, black-box: the running turn
//! ends `interrupted` (`session_closed`), each queued prompt `dequeued`,
//! both before `session.closed`, and nothing durable follows it: not a
//! late host frame, not a queued prompt started, not after a kill -9 and a
//! restart. Requests that race a close are answered (4002 once the close
//! is decided), never with -32603.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use common::{all_events, session, submit, tempdir, Backend, Client, Gateway};
use serde_json::{json, Value};

/// What the stored events of a closed session must satisfy (the chaos
/// suite's invariants, read through the wire): seqs 1..n, exactly one
/// `message.complete` per accepted turn (every `message.user`, and every
/// turn a `prompt.submit` answered), each after its `message.user`, and
/// exactly one `session.closed`, the last event.
fn closed_session_problems(id: &str, events: &[Value], accepted: &[String]) -> Vec<String> {
    let mut problems = Vec::new();
    let seqs: Vec<u64> = events.iter().filter_map(|e| e["seq"].as_u64()).collect();
    let want: Vec<u64> = (1..=events.len() as u64).collect();
    if seqs != want {
        problems.push(format!("{id}: seqs are not 1..{}: {seqs:?}", events.len()));
    }
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e["type"].as_str().unwrap_or("?"))
        .collect();
    let closed: Vec<usize> = kinds
        .iter()
        .enumerate()
        .filter(|(_, k)| **k == "session.closed")
        .map(|(i, _)| i)
        .collect();
    if closed != [events.len().saturating_sub(1)] {
        problems.push(format!(
            "{id}: session.closed is not exactly once and last: {kinds:?}"
        ));
    }
    let mut users: BTreeMap<String, usize> = BTreeMap::new();
    let mut completes: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, e) in events.iter().enumerate() {
        let Some(turn) = e["turn_id"].as_str() else {
            continue;
        };
        match e["type"].as_str() {
            Some("message.user") => {
                users.insert(turn.to_string(), i);
            }
            Some("message.complete") => completes.entry(turn.to_string()).or_default().push(i),
            _ => {}
        }
    }
    let turns: BTreeSet<&String> = users.keys().chain(accepted.iter()).collect();
    for turn in turns {
        let ends = completes.get(turn).map_or(&[][..], Vec::as_slice);
        if ends.len() != 1 {
            problems.push(format!(
                "{id}: turn {turn} has {} message.complete: {kinds:?}",
                ends.len()
            ));
            continue;
        }
        if users.get(turn).is_none_or(|u| *u > ends[0]) {
            problems.push(format!(
                "{id}: turn {turn} ends before (or without) its message.user"
            ));
        }
    }
    problems
}

/// The payload of `turn`'s one `message.complete` among `events`.
fn ending_of<'a>(events: &'a [Value], turn: &str) -> &'a Value {
    let ends: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "message.complete" && e["turn_id"] == turn)
        .collect();
    assert_eq!(ends.len(), 1, "{turn}: {events:?}");
    &ends[0]["payload"]
}

/// The issue's case: a turn sleeping on its host and a prompt queued
/// behind it, then `session.close`. Both turns end before `session.closed`
/// (on disk and live, in that order), the running one `interrupted` /
/// `session_closed`, the queued one `dequeued`; the host's late answer
/// adds nothing, and neither does a kill -9 and a restart.
async fn close_ends_the_running_turn_and_the_queued_prompt_first(b: Backend) {
    let dir = tempdir();
    let mut gw = Gateway::start_on(&b, dir.path(), &[]);
    let mut a = gw.client().await;
    let id = session(&mut a).await;
    let running = submit(&mut a, &id, "/sleep 3000\nslept").await;
    let r = a
        .ok("prompt.submit", json!({"session_id": id, "text": "queued"}))
        .await;
    assert_eq!(r["status"], "queued", "{r}");
    let queued = r["turn_id"].as_str().expect("turn_id").to_string();
    loop {
        let e = a.next_event().await;
        if e["type"] == "message.start" && e["turn_id"] == running {
            break;
        }
    }
    a.ok("session.close", json!({"session_id": id})).await;

    // Live: both endings, then `session.closed`, the last event.
    let mut live = Vec::new();
    loop {
        let e = a.next_event().await;
        let done = e["type"] == "session.closed";
        if e.get("seq").is_some() {
            live.push(e);
        }
        if done {
            break;
        }
    }
    for turn in [&running, &queued] {
        ending_of(&live, turn);
    }
    a.expect_silence(Duration::from_millis(300)).await;

    let turns = [running.clone(), queued.clone()];
    let stored = all_events(&mut a, &id).await;
    let problems = closed_session_problems(&id, &stored, &turns);
    assert!(problems.is_empty(), "{problems:#?}");
    let ended = ending_of(&stored, &running);
    assert_eq!(ended["status"], "interrupted", "{ended}");
    assert_eq!(ended["failure_reason"], "session_closed", "{ended}");
    let dropped = ending_of(&stored, &queued);
    assert_eq!(dropped["status"], "interrupted", "{dropped}");
    assert_eq!(dropped["failure_reason"], "dequeued", "{dropped}");

    // The host's sleep ends meanwhile: its answer is for a turn that is
    // over, and nothing may follow `session.closed`.
    tokio::time::sleep(Duration::from_millis(3500)).await;
    assert_eq!(all_events(&mut a, &id).await, stored, "after the sleep");
    let err = a
        .err("prompt.submit", json!({"session_id": id, "text": "late"}))
        .await;
    assert_eq!(err["code"], 4002, "{err}");

    // A crash and a restart end nothing twice and start nothing.
    gw.restart();
    let mut c = gw.client().await;
    assert_eq!(all_events(&mut c, &id).await, stored, "after kill -9");
}

/// `prompt.submit` and `session.close` pipelined on one socket: the
/// submit is accepted (then ended before `session.closed`) or refused with
/// 4002, never left without an ending, and no `message.start` of a turn
/// started meanwhile follows `session.closed`.
async fn a_submit_pipelined_with_close_is_ended_or_refused(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &[]);
    let mut c = gw.client().await;
    let mut problems = Vec::new();
    for i in 0..20u64 {
        let r = c
            .ok(
                "session.create",
                json!({"title": "pipelined", "attach": false}),
            )
            .await;
        let id = r["session"]["session_id"].as_str().expect("id").to_string();
        let text = if i % 2 == 0 {
            "/sleep 300\nlater"
        } else {
            "now"
        };
        let (s, k) = (1000 + 2 * i, 1001 + 2 * i);
        let frames = [
            json!({"jsonrpc":"2.0","id":s,"method":"prompt.submit",
                   "params":{"session_id": id, "text": text}}),
            json!({"jsonrpc":"2.0","id":k,"method":"session.close",
                   "params":{"session_id": id}}),
        ];
        for f in &frames {
            c.send_text(&f.to_string()).await;
        }
        let submitted = c.reply_to(json!(s)).await;
        let closed = c.reply_to(json!(k)).await;
        assert_eq!(closed["result"]["closed"], true, "{closed}");
        let mut accepted = Vec::new();
        match (submitted.get("result"), submitted["error"]["code"].as_i64()) {
            (Some(r), _) => accepted.push(r["turn_id"].as_str().expect("turn").to_string()),
            (None, Some(4002)) => {}
            _ => problems.push(format!("{id}: submit answered {submitted}")),
        }
        let events = all_events(&mut c, &id).await;
        problems.extend(closed_session_problems(&id, &events, &accepted));
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

/// Closes `id` in the store the way an older gateway's close left it: a
/// `session.closed` after the events, the row closed, and its turn marker
/// (the turns it never ended) left as it was. The gateway is stopped.
async fn close_like_an_older_gateway(gw: &Gateway, id: &str) {
    use sqlx::Connection;
    let ts = 1_764_470_000_000i64;
    let payload = r#"{"reason":"client"}"#;
    match gw.database_url() {
        Some(url) => {
            let mut db = sqlx::PgConnection::connect(url).await.expect("connect");
            let mut tx = db.begin().await.expect("begin");
            let (seq,): (i64,) = sqlx::query_as(
                "UPDATE sessions SET status = 'closed', latest_seq = latest_seq + 1 \
                 WHERE id = $1 AND turn_marker IS NOT NULL RETURNING latest_seq",
            )
            .bind(id)
            .fetch_one(&mut *tx)
            .await
            .expect("close the row");
            sqlx::query(
                "INSERT INTO events (session_id, seq, type, payload, ts_ms) \
                 VALUES ($1, $2, 'session.closed', $3, $4)",
            )
            .bind(id)
            .bind(seq)
            .bind(payload)
            .bind(ts)
            .execute(&mut *tx)
            .await
            .expect("append session.closed");
            tx.commit().await.expect("commit");
            let _ = db.close().await;
        }
        None => {
            let path = gw.data_dir.join("tether.db");
            let url = format!("sqlite://{}", path.display());
            let mut db = sqlx::SqliteConnection::connect(&url).await.expect("open");
            let mut tx = db.begin().await.expect("begin");
            let (seq,): (i64,) = sqlx::query_as(
                "UPDATE sessions SET status = 'closed', latest_seq = latest_seq + 1 \
                 WHERE id = ?1 AND turn_marker IS NOT NULL RETURNING latest_seq",
            )
            .bind(id)
            .fetch_one(&mut *tx)
            .await
            .expect("close the row");
            sqlx::query(
                "INSERT INTO events (session_id, seq, type, payload, ts_ms) \
                 VALUES (?1, ?2, 'session.closed', ?3, ?4)",
            )
            .bind(id)
            .bind(seq)
            .bind(payload)
            .bind(ts)
            .execute(&mut *tx)
            .await
            .expect("append session.closed");
            tx.commit().await.expect("commit");
            let _ = db.close().await;
        }
    }
}

/// A store an older gateway left with a closed session whose turns never
/// ended (its close wrote `session.closed` and kept the turn marker), then
/// killed: the next start ends those turns (`gateway_restart`, `dequeued`),
/// once each, and another restart adds nothing.
async fn a_restart_ends_the_turns_an_older_close_left_unended(b: Backend) {
    let dir = tempdir();
    let mut gw = Gateway::start_on(&b, dir.path(), &[]);
    let mut a = gw.client().await;
    let id = session(&mut a).await;
    let running = submit(&mut a, &id, "/sleep 60000\nnever").await;
    let r = a
        .ok("prompt.submit", json!({"session_id": id, "text": "queued"}))
        .await;
    let queued = r["turn_id"].as_str().expect("turn_id").to_string();
    loop {
        let e = a.next_event().await;
        if e["type"] == "message.start" && e["turn_id"] == running {
            break;
        }
    }
    gw.kill();
    close_like_an_older_gateway(&gw, &id).await;

    gw.restart();
    let mut c = gw.client().await;
    let events = all_events(&mut c, &id).await;
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e["type"].as_str().unwrap_or("?"))
        .collect();
    let closed = kinds
        .iter()
        .position(|k| *k == "session.closed")
        .expect("closed");
    assert_eq!(
        kinds[closed..],
        ["session.closed", "message.complete", "message.complete"],
        "{kinds:?}"
    );
    assert_eq!(
        ending_of(&events, &running)["failure_reason"],
        "gateway_restart"
    );
    assert_eq!(ending_of(&events, &queued)["failure_reason"], "dequeued");
    let err = c
        .err("session.resume", json!({"session_id": id, "attach": false}))
        .await;
    assert_eq!(err["code"], 4002, "{err}");

    gw.restart();
    let mut c = gw.client().await;
    assert_eq!(
        all_events(&mut c, &id).await,
        events,
        "after another restart"
    );
}

/// splitmix64: seedable, so a failing run replays from its seed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) % n.max(1)
    }
}

/// The seed of the race: `TETHER_CHAOS_SEED`, else a fixed one.
fn seed() -> u64 {
    std::env::var("TETHER_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x7e7e_c105_e5ed)
}

/// Rounds of the race, and how many run at once.
const ROUNDS: u64 = 240;
const AT_ONCE: u64 = 8;
/// The whole race must be over by then (it takes a few seconds).
const RACE_BOUND: Duration = Duration::from_secs(60);

/// What one round saw: the turns accepted and every error answered.
struct Round {
    id: String,
    accepted: Vec<String>,
    errors: Vec<(String, Value)>,
}

/// One round: socket `a` pipelines a few requests of every kind that
/// writes (submit, interrupt, compress, branch, handoff) while socket `b`
/// closes the session after a random pause.
async fn race_round(url: &str, rng: &mut Rng, round: u64) -> Round {
    let mut a = Client::connect(url).await;
    let mut b = Client::connect(url).await;
    let r = a
        .ok("session.create", json!({"title": "race", "attach": false}))
        .await;
    let id = r["session"]["session_id"].as_str().expect("id").to_string();
    if rng.below(2) == 0 {
        // A history to compress, and a branch point.
        submit(&mut a, &id, "first words").await;
    }
    let mut sent: Vec<(u64, &str)> = Vec::new();
    for n in 0..1 + rng.below(5) {
        let rid = round * 100 + n;
        let (method, params) = match rng.below(6) {
            0 | 1 => {
                let text = match rng.below(3) {
                    0 => format!("/sleep {}\nslept", 20 + rng.below(200)),
                    _ => format!("words of round {round}"),
                };
                ("prompt.submit", json!({"session_id": id, "text": text}))
            }
            2 => ("session.interrupt", json!({"session_id": id})),
            3 => ("session.compress", json!({"session_id": id})),
            4 => ("session.branch", json!({"session_id": id})),
            _ => (
                "handoff.request",
                json!({"session_id": id, "target": "elsewhere"}),
            ),
        };
        let frame = json!({"jsonrpc":"2.0","id":rid,"method":method,"params":params});
        a.send_text(&frame.to_string()).await;
        sent.push((rid, method));
    }
    let pause = rng.below(12);
    if pause > 0 {
        tokio::time::sleep(Duration::from_millis(pause)).await;
    }
    let closed = b.call("session.close", json!({"session_id": id})).await;
    let mut errors = Vec::new();
    if closed.get("result").is_none() {
        errors.push(("session.close".to_string(), closed["error"].clone()));
    }
    let mut accepted = Vec::new();
    for (rid, method) in sent {
        let answer = a.reply_to(json!(rid)).await;
        match answer.get("result") {
            Some(r) if method == "prompt.submit" => {
                accepted.push(r["turn_id"].as_str().expect("turn").to_string())
            }
            Some(_) => {}
            None => errors.push((method.to_string(), answer["error"].clone())),
        }
    }
    a.close().await;
    b.close().await;
    Round {
        id,
        accepted,
        errors,
    }
}

/// Close racing submit, interrupt, compress, branch and handoff from two
/// sockets, a few hundred seeded rounds: every session satisfies the
/// invariants, and every refusal is one the protocol names for it (4002
/// once the close is decided, 4009 busy, 4090 a handoff in flight),
/// never -32603.
async fn close_racing_other_requests_keeps_the_invariants(b: Backend) {
    let dir = tempdir();
    let host = format!(
        "{} host --engine echo --delay-ms 2 --compress-delay-ms 15",
        env!("CARGO_BIN_EXE_tether")
    );
    let gw = Gateway::start_on(&b, dir.path(), &["--host-command", &host]);
    let url = gw.url();
    let seed = seed();
    let started = Instant::now();
    let mut rounds = Vec::new();
    for wave in 0..ROUNDS / AT_ONCE {
        let tasks: Vec<_> = (0..AT_ONCE)
            .map(|k| {
                let round = wave * AT_ONCE + k;
                let url = url.clone();
                let mut rng = Rng(seed ^ round.wrapping_mul(0x2545_f491_4f6c_dd1d));
                tokio::spawn(async move { race_round(&url, &mut rng, round).await })
            })
            .collect();
        for t in tasks {
            rounds.push(t.await.expect("round"));
        }
        assert!(
            started.elapsed() < RACE_BOUND,
            "seed {seed}: {} rounds took {:?}",
            rounds.len(),
            started.elapsed()
        );
    }
    let mut c = gw.client().await;
    let mut problems = Vec::new();
    for round in &rounds {
        for (method, e) in &round.errors {
            if !matches!(e["code"].as_i64(), Some(4002 | 4009 | 4090)) {
                problems.push(format!("{}: {method} answered {e}", round.id));
            }
        }
        let events = all_events(&mut c, &round.id).await;
        problems.extend(closed_session_problems(&round.id, &events, &round.accepted));
    }
    assert!(
        problems.is_empty(),
        "seed {seed}: {} problems in {} rounds: {problems:#?}",
        problems.len(),
        rounds.len()
    );
}

backends!(
    close_ends_the_running_turn_and_the_queued_prompt_first,
    a_submit_pipelined_with_close_is_ended_or_refused,
    a_restart_ends_the_turns_an_older_close_left_unended,
    close_racing_other_requests_keeps_the_invariants,
);
