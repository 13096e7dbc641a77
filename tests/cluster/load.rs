//! Steady load on a cluster (the cluster's load, restart and chaos tests): a few sessions, one
//! client per session on every node, each submitting its own turns one
//! after another through the node it is connected to, so prompts arrive
//! continuously through every node, owner or follower. Clients never panic
//! on a close or a refusal: they reconnect (to their home node first, then
//! to the others: a load balancer's view) and resume with their watermark.
//!
//! Every client records every durable event it saw (seq and content), every
//! submit it made and its answer; `check.rs` compares them to the store at
//! the end. Nothing here asserts: faults make refusals and reconnects
//! legitimate, and only the end state is judged.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::task::JoinHandle;

use crate::chaos::ws::Ws;
use crate::chaos::Rng;

/// The nodes' current WebSocket URLs, by node index: a node restarted by a
/// test listens on a new port, and the test writes it here.
pub type Urls = Arc<Mutex<Vec<String>>>;

/// The URLs of `nodes`, shareable with the clients.
pub fn urls(nodes: &[crate::common::Gateway]) -> Urls {
    Arc::new(Mutex::new(nodes.iter().map(|n| n.url()).collect()))
}

/// A `prompt.submit` answered with an error.
#[derive(Debug, Clone)]
pub struct Refusal {
    pub session: String,
    pub text: String,
    pub node: usize,
    pub code: i64,
    pub message: String,
}

impl Refusal {
    /// Whether the answer says the prompt did not run: every error does
    /// but 5073 "outcome unknown" (a forward that may have run once; the
    /// client reads the session before it retries).
    pub fn says_not_run(&self) -> bool {
        self.code != 5073
    }
}

/// A `prompt.submit` answered with a turn id.
#[derive(Debug, Clone)]
pub struct Accepted {
    pub session: String,
    pub turn: String,
    pub text: String,
    pub node: usize,
}

/// What every client and the test share.
#[derive(Default)]
pub struct Shared {
    pub stop: AtomicBool,
    pub accepted: Mutex<Vec<Accepted>>,
    pub refused: Mutex<Vec<Refusal>>,
    /// `(session, text)` of submits whose answer never came (the connection
    /// closed first): run once or not at all.
    pub unanswered: Mutex<Vec<(String, String)>>,
    /// Seen by a client as it happened: a gap, a repeat that differed.
    pub violations: Mutex<Vec<String>>,
    /// Each client's turn still waiting for its `message.complete`, for the
    /// message of a run whose clients do not finish.
    pub in_flight: Mutex<BTreeMap<String, String>>,
    pub reconnects: AtomicU64,
    pub submits: AtomicU64,
    pub events: AtomicU64,
    /// What each client is doing (for the message of a stuck run).
    pub phase: Mutex<BTreeMap<String, String>>,
}

impl Shared {
    fn violation(&self, v: String) {
        self.violations.lock().expect("violations").push(v);
    }
}

/// Every durable event one client received, in the order it received them.
#[derive(Debug)]
pub struct Seen {
    pub session: String,
    pub client: String,
    pub events: Vec<Value>,
}

/// A running load: its clients' tasks.
pub struct Load {
    pub shared: Arc<Shared>,
    tasks: Vec<(String, JoinHandle<Seen>)>,
}

impl Load {
    /// One client per session per node of `urls`, all submitting.
    pub fn start(urls: &Urls, sessions: &[String], rng: &mut Rng) -> Load {
        let shared = Arc::new(Shared::default());
        let nodes = urls.lock().expect("urls").len();
        let mut tasks = Vec::new();
        for (s, session) in sessions.iter().enumerate() {
            for home in 0..nodes {
                let name = format!("s{s}c{home}");
                let task = client(
                    urls.clone(),
                    shared.clone(),
                    session.clone(),
                    name.clone(),
                    home,
                    Rng::new(rng.next()),
                );
                tasks.push((name, tokio::spawn(task)));
            }
        }
        Load { shared, tasks }
    }

    /// Stops submitting, lets every client's last turn end, and returns
    /// what each saw. A client that does not finish within `bound` fails
    /// the test, naming the turns still waiting (a stuck turn) with what
    /// the node at `url` holds of them.
    pub async fn finish(self, bound: Duration, seed: u64, url: &str) -> Vec<Seen> {
        self.shared.stop.store(true, Ordering::Relaxed);
        let deadline = tokio::time::Instant::now() + bound;
        let mut seen = Vec::new();
        for (name, task) in self.tasks {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match tokio::time::timeout(left, task).await {
                Ok(Ok(s)) => seen.push(s),
                Ok(Err(e)) => panic!("seed {seed}: client {name} panicked: {e}"),
                Err(_) => {
                    let stuck = self.shared.in_flight.lock().expect("in_flight").clone();
                    let mut why = String::new();
                    for (client, turn) in &stuck {
                        why += &explain(&self.shared, url, client, turn).await;
                    }
                    panic!(
                        "seed {seed}: clients did not finish within {bound:?}; turns still \
                         without their message.complete: {stuck:?}\n{why}"
                    )
                }
            }
        }
        seen
    }
}

/// What the client was doing and what the store holds of a stuck turn.
async fn explain(shared: &Shared, url: &str, client: &str, turn: &str) -> String {
    let phase = shared.phase.lock().expect("phase").get(client).cloned();
    let accepted = shared
        .accepted
        .lock()
        .expect("accepted")
        .iter()
        .find(|a| a.turn == turn)
        .cloned();
    let mut out = format!("{client} ({phase:?}): turn {turn} accepted as {accepted:?}\n");
    let Some(a) = accepted else {
        return out;
    };
    let Some(mut ws) = Ws::connect(url).await else {
        return out + "  (no node to read from)\n";
    };
    let r = ws
        .call(
            "session.resume",
            json!({"session_id": a.session, "attach": false, "omit_messages": true}),
        )
        .await;
    out += &format!("  the session now: {r:?}\n");
    let latest = r
        .as_ref()
        .ok()
        .and_then(|r| r["latest_seq"].as_u64())
        .unwrap_or(0);
    let tail = ws
        .call(
            "session.events.since",
            json!({"session_id": a.session, "last_seen": latest.saturating_sub(12)}),
        )
        .await;
    out += &format!("  its last events: {tail:?}\n");
    out
}

/// One client: see the module doc.
async fn client(
    urls: Urls,
    shared: Arc<Shared>,
    session: String,
    name: String,
    home: usize,
    mut rng: Rng,
) -> Seen {
    let mut events: Vec<Value> = Vec::new();
    let mut in_flight: Option<String> = None;
    let mut n = 0u64;
    let mut detour = 0usize;
    loop {
        if shared.stop.load(Ordering::Relaxed) && in_flight.is_none() {
            break;
        }
        let (node, url) = {
            let urls = urls.lock().expect("urls");
            let node = (home + detour) % urls.len();
            (node, urls[node].clone())
        };
        let phase = |what: String| {
            shared
                .phase
                .lock()
                .expect("phase")
                .insert(name.clone(), what);
        };
        phase(format!("connecting to node {node}"));
        let Some(mut ws) = Ws::connect(&url).await else {
            detour += 1;
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let watermark = events.last().map_or(0, seq_of);
        phase(format!("resuming through node {node} from {watermark}"));
        let resumed = ws
            .call(
                "session.resume",
                json!({"session_id": session, "last_seen": watermark, "omit_messages": true}),
            )
            .await;
        let Ok(r) = resumed else {
            // A node that cannot serve it now (the store down, the session
            // moving): try again, maybe elsewhere.
            detour += 1;
            tokio::time::sleep(Duration::from_millis(100 + rng.below(200))).await;
            continue;
        };
        detour = 0;
        phase(format!(
            "attached through node {node} from {watermark}: latest_seq {}, {} replayed, \
             session {}",
            r["latest_seq"],
            r["events"].as_array().map_or(0, Vec::len),
            r["session"]["status"]
        ));
        let replay = Via {
            how: format!("in a resume's replay through node {node}"),
        };
        for e in r["events"].as_array().into_iter().flatten() {
            accept(&shared, &name, &replay, &mut events, e, &mut in_flight);
        }
        let latest = r["latest_seq"].as_u64().unwrap_or(0);
        let live = Via {
            how: format!("live through node {node}, resumed from {watermark}, its latest {latest}"),
        };
        loop {
            let stopping = shared.stop.load(Ordering::Relaxed);
            if stopping && in_flight.is_none() {
                break;
            }
            if in_flight.is_none() && !stopping {
                n += 1;
                let text = format!("{name} turn {n} says five small words");
                shared.submits.fetch_add(1, Ordering::Relaxed);
                match ws
                    .call(
                        "prompt.submit",
                        json!({"session_id": session, "text": text}),
                    )
                    .await
                {
                    Ok(t) => {
                        let turn = t["turn_id"].as_str().unwrap_or_default().to_string();
                        shared.accepted.lock().expect("accepted").push(Accepted {
                            session: session.clone(),
                            turn: turn.clone(),
                            text,
                            node,
                        });
                        shared
                            .in_flight
                            .lock()
                            .expect("in_flight")
                            .insert(name.clone(), turn.clone());
                        in_flight = Some(turn);
                    }
                    Err(Some(e)) => {
                        shared.refused.lock().expect("refused").push(Refusal {
                            session: session.clone(),
                            text,
                            node,
                            code: e["code"].as_i64().unwrap_or(0),
                            message: e["message"].as_str().unwrap_or_default().to_string(),
                        });
                        tokio::time::sleep(Duration::from_millis(100 + rng.below(200))).await;
                    }
                    // No answer: it may or may not have run; the store's
                    // `message.user` rows are checked either way.
                    Err(None) => {
                        shared
                            .unanswered
                            .lock()
                            .expect("unanswered")
                            .push((session.clone(), text));
                        break;
                    }
                }
            }
            match ws.event(Duration::from_millis(200)).await {
                Err(()) => break,
                Ok(None) => {}
                Ok(Some(e)) => accept(&shared, &name, &live, &mut events, &e, &mut in_flight),
            }
            // Now and then a client walks away and comes back.
            if rng.below(500) == 0 {
                break;
            }
        }
        shared.reconnects.fetch_add(1, Ordering::Relaxed);
    }
    shared.in_flight.lock().expect("in_flight").remove(&name);
    Seen {
        session,
        client: name,
        events,
    }
}

fn seq_of(e: &Value) -> u64 {
    e["seq"].as_u64().unwrap_or(0)
}

/// How an event reached a client, for its violations.
struct Via {
    how: String,
}

/// Takes one event: durable ones must come exactly once, in seq order,
/// across reconnects; one seen again must be identical.
fn accept(
    shared: &Shared,
    client: &str,
    via: &Via,
    events: &mut Vec<Value>,
    e: &Value,
    in_flight: &mut Option<String>,
) {
    let Some(seq) = e["seq"].as_u64() else {
        return; // transient (deltas): best effort, unchecked
    };
    let expected = events.last().map_or(0, seq_of) + 1;
    let how = &via.how;
    if seq < expected {
        let same = events.iter().find(|old| seq_of(old) == seq) == Some(e);
        shared.violation(format!(
            "{client}: seq {seq} again where {expected} was next ({how}; written {})",
            e["ts"]
        ));
        if !same {
            shared.violation(format!("{client}: seq {seq} delivered twice, differently"));
        }
        return;
    }
    if seq > expected {
        shared.violation(format!(
            "{client}: seq {seq} where {expected} was next (a gap, {how})"
        ));
    }
    shared.events.fetch_add(1, Ordering::Relaxed);
    if e["type"] == "message.complete" && e["turn_id"].as_str() == in_flight.as_deref() {
        *in_flight = None;
        shared.in_flight.lock().expect("in_flight").remove(client);
    }
    events.push(e.clone());
}

/// Creates `n` sessions (not attached), the `i`th through node `i % nodes`
/// so that their owners are spread over the cluster.
pub async fn sessions(urls: &Urls, n: usize) -> Vec<String> {
    let urls = urls.lock().expect("urls").clone();
    let mut ids = Vec::new();
    for i in 0..n {
        let mut ws = Ws::connect(&urls[i % urls.len()])
            .await
            .expect("connect to create a session");
        let r = ws
            .call(
                "session.create",
                json!({"title": format!("load {i}"), "attach": false}),
            )
            .await
            .unwrap_or_else(|e| panic!("session.create: {e:?}"));
        ids.push(r["session"]["session_id"].as_str().expect("id").to_string());
    }
    ids
}

/// Waits until `more` turns beyond the first `from` were accepted, within
/// `bound`: the load makes progress (the cluster serves again).
pub async fn progress_from(shared: &Shared, from: usize, more: usize, bound: Duration, what: &str) {
    let deadline = tokio::time::Instant::now() + bound;
    loop {
        let n = shared.accepted.lock().expect("accepted").len();
        if n >= from + more {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: only {} turns accepted within {bound:?} (wanted {more})",
            n - from
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// [`progress_from`] the turns accepted so far.
pub async fn progress(shared: &Shared, more: usize, bound: Duration, what: &str) {
    let from = shared.accepted.lock().expect("accepted").len();
    progress_from(shared, from, more, bound, what).await;
}

/// The compute host of every node of a loaded cluster: echo, with a few
/// milliseconds between deltas so that turns overlap the faults.
pub fn host_command() -> String {
    format!(
        "{} host --engine echo --delay-ms 3",
        env!("CARGO_BIN_EXE_tether")
    )
}

/// A steady load on `n` new sessions of `cluster`, seeded from the
/// environment (`chaos::seed`): the seed, the nodes' URLs (kept current by
/// a test that restarts a node), the sessions and the running load.
pub async fn start_on(
    cluster: &crate::harness::TestCluster,
    n: usize,
) -> (u64, Urls, Vec<String>, Load) {
    let seed = crate::chaos::seed();
    let mut rng = Rng::new(seed);
    let urls = urls(&cluster.nodes);
    let ids = sessions(&urls, n).await;
    let load = Load::start(&urls, &ids, &mut rng);
    (seed, urls, ids, load)
}

/// One turn on `session` through the node at `url`, start to end: its
/// `message.complete` payload. Refusals and closes are retried (the node
/// may still be reconnecting, the session moving) within `bound`; the last
/// one is the error.
pub async fn one_turn(
    url: &str,
    session: &str,
    text: &str,
    bound: Duration,
) -> Result<Value, String> {
    let deadline = tokio::time::Instant::now() + bound;
    let mut last = String::from("never tried");
    while tokio::time::Instant::now() < deadline {
        match try_turn(url, session, text).await {
            Ok(done) => return Ok(done),
            Err(e) => last = e,
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Err(format!("no turn through {url} within {bound:?}: {last}"))
}

async fn try_turn(url: &str, session: &str, text: &str) -> Result<Value, String> {
    let mut ws = Ws::connect(url).await.ok_or("connect")?;
    // Attached from the latest seq: a long run's whole history would be
    // too large a replay.
    let latest = ws
        .call(
            "session.events.since",
            json!({"session_id": session, "last_seen": 0, "limit": 1}),
        )
        .await
        .map_err(|e| format!("events.since: {e:?}"))?["latest_seq"]
        .as_u64()
        .unwrap_or(0);
    ws.call(
        "session.resume",
        json!({"session_id": session, "attach": true, "omit_messages": true, "last_seen": latest}),
    )
    .await
    .map_err(|e| format!("resume: {e:?}"))?;
    let r = ws
        .call(
            "prompt.submit",
            json!({"session_id": session, "text": text}),
        )
        .await
        .map_err(|e| format!("submit: {e:?}"))?;
    let turn = r["turn_id"].as_str().unwrap_or_default().to_string();
    loop {
        match ws.event(Duration::from_secs(10)).await {
            Ok(Some(e)) if e["type"] == "message.complete" && e["turn_id"] == turn.as_str() => {
                return Ok(e["payload"].clone())
            }
            Ok(Some(_)) => {}
            Ok(None) => return Err(format!("turn {turn} did not end within 10 s")),
            Err(()) => return Err(format!("closed during turn {turn}")),
        }
    }
}
