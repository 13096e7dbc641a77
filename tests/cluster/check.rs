//! The end-of-run invariants of a loaded cluster, judged against
//! the store: what the clients of `load.rs` saw and were told, and what
//! PostgreSQL holds.
//!
//! 1. each session's stored seqs are exactly 1..n (never skipped; the
//!    primary key makes a seq stored twice impossible, and (3) catches one
//!    shown twice with different contents);
//! 2. the fence stored with each event never decreases along seq;
//! 3. every durable event any client saw is stored, identically;
//! 4. every accepted turn, and every turn with a stored `message.user`, has
//!    exactly one `message.complete`;
//! 5. a submit refused with an answer that says it did not run left no
//!    `message.user` behind; an accepted one left exactly one (every
//!    prompt's text is unique, so a prompt run twice shows).

#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use serde_json::{json, Value};

use crate::chaos::ws::Ws;
use crate::harness::TestCluster;
use crate::load::{Seen, Shared};

/// What the store holds of one session.
pub struct Stored {
    /// Every event, as `session.events.since` shows it, in seq order.
    pub events: Vec<Value>,
    /// `(seq, fence)` of every event row, in seq order.
    pub fences: Vec<(i64, i64)>,
}

/// What a run's checks found, besides the problems.
#[derive(Debug, Default)]
pub struct Tally {
    /// `message.complete`s by `failure_reason` (`"-"` for none).
    pub endings: BTreeMap<String, u32>,
    /// Refusals by code.
    pub refusals: BTreeMap<i64, u32>,
    pub stored_events: usize,
    pub turns: usize,
}

/// Reads one session through the node at `node_url` (events) and straight
/// from the database at `db_url` (fences), retrying a node that is not
/// ready within `bound`.
pub async fn stored(node_url: &str, db_url: &str, session: &str, bound: Duration) -> Stored {
    let deadline = tokio::time::Instant::now() + bound;
    let events = loop {
        match read_all(node_url, session).await {
            Ok(events) => break events,
            Err(e) => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "could not read {session} through {node_url} within {bound:?}: {e}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    Stored {
        events,
        fences: fences(db_url, session).await,
    }
}

/// Every event of `session` through `events.since`, page by page.
async fn read_all(node_url: &str, session: &str) -> Result<Vec<Value>, String> {
    let mut ws = Ws::connect(node_url).await.ok_or("connect")?;
    let mut all: Vec<Value> = Vec::new();
    loop {
        let after = all.last().map_or(0, |e| e["seq"].as_u64().unwrap_or(0));
        let r = ws
            .call(
                "session.events.since",
                json!({"session_id": session, "last_seen": after, "limit": 1000}),
            )
            .await
            .map_err(|e| format!("events.since: {e:?}"))?;
        let page = r["events"].as_array().cloned().unwrap_or_default();
        let latest = r["latest_seq"].as_u64().unwrap_or(0) as usize;
        let done = page.is_empty() || all.len() + page.len() >= latest;
        all.extend(page);
        if done {
            return Ok(all);
        }
    }
}

pub use crate::harness::clients::fences;

/// Invariants 1–5 over every session of the run; the problems found (empty
/// when all hold) and the tally.
pub fn check(
    stored: &BTreeMap<String, Stored>,
    shared: &Shared,
    seen: &[Seen],
) -> (Vec<String>, Tally) {
    let mut problems = shared.violations.lock().expect("violations").clone();
    let mut tally = Tally::default();
    let mut completes: BTreeMap<String, u32> = BTreeMap::new();
    let mut turns: Vec<String> = Vec::new();
    for (id, s) in stored {
        tally.stored_events += s.events.len();
        let got: Vec<u64> = s
            .events
            .iter()
            .map(|e| e["seq"].as_u64().unwrap_or(0))
            .collect();
        if got != (1..=got.len() as u64).collect::<Vec<_>>() {
            problems.push(format!(
                "{id}: stored seqs are not 1..{}: {got:?}",
                got.len()
            ));
        }
        let fence_seqs: Vec<u64> = s.fences.iter().map(|(q, _)| *q as u64).collect();
        if fence_seqs != got {
            problems.push(format!(
                "{id}: the rows read directly differ from events.since"
            ));
        }
        if let Some(w) = s.fences.windows(2).find(|w| w[1].1 < w[0].1) {
            problems.push(format!(
                "{id}: the fence decreases along seq: seq {} fence {}, seq {} fence {}",
                w[0].0, w[0].1, w[1].0, w[1].1
            ));
        }
        for e in &s.events {
            let turn = e["turn_id"].as_str().map(str::to_string);
            match (e["type"].as_str(), turn) {
                (Some("message.user"), Some(t)) => turns.push(t),
                (Some("message.complete"), Some(t)) => {
                    *completes.entry(t).or_default() += 1;
                    let reason = e["payload"]["failure_reason"].as_str().unwrap_or("-");
                    *tally.endings.entry(reason.to_string()).or_default() += 1;
                }
                _ => {}
            }
        }
    }
    for client in seen {
        let Some(s) = stored.get(&client.session) else {
            continue;
        };
        for e in &client.events {
            let seq = e["seq"].as_u64().unwrap_or(0);
            match s.events.get(seq.wrapping_sub(1) as usize) {
                Some(kept) if kept == e => {}
                Some(kept) => problems.push(format!(
                    "{}: saw seq {seq} as {e}, the store has {kept}",
                    client.client
                )),
                None => problems.push(format!(
                    "{}: saw seq {seq} ({e}), which the store does not have",
                    client.client
                )),
            }
        }
    }
    let index = prompt_index(stored);
    let prompts = |session: &str, text: &str| -> Vec<&Value> {
        index.get(&(session, text)).cloned().unwrap_or_default()
    };
    let accepted = shared.accepted.lock().expect("accepted").clone();
    for a in &accepted {
        let users = prompts(&a.session, &a.text);
        if users.len() != 1 || users[0]["turn_id"] != a.turn.as_str() {
            problems.push(format!(
                "turn {} accepted through node {} has {} message.user in the store: {users:?}",
                a.turn,
                a.node,
                users.len()
            ));
        }
    }
    for (session, text) in shared.unanswered.lock().expect("unanswered").iter() {
        let users = prompts(session, text);
        if users.len() > 1 {
            problems.push(format!("an unanswered submit ran twice: {users:?}"));
        }
    }
    turns.extend(accepted.iter().map(|a| a.turn.clone()));
    turns.sort();
    turns.dedup();
    tally.turns = turns.len();
    for t in &turns {
        let n = completes.get(t).copied().unwrap_or(0);
        if n != 1 {
            problems.push(format!("turn {t} has {n} message.complete"));
        }
    }
    for r in shared.refused.lock().expect("refused").iter() {
        *tally.refusals.entry(r.code).or_default() += 1;
        if !r.says_not_run() {
            continue;
        }
        if !prompts(&r.session, &r.text).is_empty() {
            problems.push(format!(
                "a submit refused with {} ({}) through node {} is in the store: {:?}",
                r.code, r.message, r.node, r.text
            ));
        }
    }
    problems.sort();
    problems.dedup();
    (problems, tally)
}

/// The stored `message.user`s by session and text (an index: a long run
/// checks tens of thousands of prompts against as many events).
fn prompt_index(stored: &BTreeMap<String, Stored>) -> HashMap<(&str, &str), Vec<&Value>> {
    let mut index: HashMap<(&str, &str), Vec<&Value>> = HashMap::new();
    for (id, s) in stored {
        for e in &s.events {
            if e["type"] == "message.user" {
                let text = e["payload"]["text"].as_str().unwrap_or_default();
                index.entry((id.as_str(), text)).or_default().push(e);
            }
        }
    }
    index
}

/// Every session of the run as the store holds it (read through node 0),
/// judged by [`check`]: the problems found and the tally.
pub async fn check_sessions(
    cluster: &TestCluster,
    ids: &[String],
    shared: &Shared,
    seen: &[Seen],
) -> (Vec<String>, Tally) {
    let bound = cluster.failover_bound();
    let mut stored = BTreeMap::new();
    for id in ids {
        let s = self::stored(&cluster.nodes[0].url(), cluster.database_url(), id, bound).await;
        stored.insert(id.clone(), s);
    }
    check(&stored, shared, seen)
}

/// What a run did, on one line.
pub fn summary(shared: &Shared, tally: &Tally) -> String {
    use std::sync::atomic::Ordering;
    format!(
        "{} submits, {} turns, {} stored events, {} events seen, {} reconnects, \
         endings {:?}, refusals {:?}",
        shared.submits.load(Ordering::Relaxed),
        tally.turns,
        tally.stored_events,
        shared.events.load(Ordering::Relaxed),
        shared.reconnects.load(Ordering::Relaxed),
        tally.endings,
        tally.refusals
    )
}

/// After the faults: a turn through every node of `cluster` (forwarded
/// where that node only follows the session), each of which must serve.
pub async fn a_turn_through_each(
    cluster: &crate::harness::TestCluster,
    ids: &[String],
    after: &str,
    seed: u64,
) {
    let bound = cluster.failover_bound() * 3;
    for (i, node) in cluster.nodes.iter().enumerate() {
        let text = format!("after {after}, through node {i}");
        let done = crate::load::one_turn(&node.url(), &ids[i % ids.len()], &text, bound)
            .await
            .unwrap_or_else(|e| panic!("seed {seed}: node {i} serves no turn after {after}: {e}"));
        assert_eq!(done["text"], text.as_str(), "seed {seed}: {done}");
    }
}
