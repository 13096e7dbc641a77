//! Disconnects, orphan grace and parking (PROTOCOL 1.7), black-box over
//! WebSocket. A "drop" here is a client that goes without a close frame:
//! its socket is simply closed, as when a laptop lid shuts.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

use common::Backend;

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{
    complete, completes_of, seqs, session, submit, tempdir, turn_events, Client, Gateway,
};
use serde_json::{json, Value};
use tokio::sync::watch;

/// How long a poll for something the gateway does on its own (a peer
/// detaching, a session being parked) may take before the test fails.
/// Generous: the machine is small and shared.
const POLL_WAIT: Duration = Duration::from_secs(60);

/// A compute host whose echo replies stream one word per `delay_ms`, so a
/// turn is still under way when the test acts.
fn slow_host(delay_ms: u64) -> String {
    format!(
        "{} host --engine echo --delay-ms {delay_ms}",
        env!("CARGO_BIN_EXE_tether")
    )
}

/// Creates a session (attached) and drains its `session.created`.
/// Runs one turn to its end; returns its events.
async fn run_turn(c: &mut Client, id: &str, text: &str) -> Vec<Value> {
    let t = submit(c, id, text).await;
    turn_events(c, &t).await
}

fn durable(events: &[Value]) -> Vec<Value> {
    events
        .iter()
        .filter(|e| e.get("seq").is_some_and(Value::is_u64))
        .cloned()
        .collect()
}

/// The session as `session.list` shows it (no attach, works for parked ones).
async fn listed(c: &mut Client, id: &str) -> Value {
    let r = c.ok("session.list", json!({"limit": 500})).await;
    r["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["session_id"] == id)
        .cloned()
        .unwrap_or_else(|| panic!("session {id} not listed: {r}"))
}

/// Polls `session.list` until the session satisfies `want`; returns it.
async fn wait_listed(c: &mut Client, id: &str, what: &str, want: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + POLL_WAIT;
    loop {
        let s = listed(c, id).await;
        if want(&s) {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "session never became {what}; last listed as {s}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn wait_parked(c: &mut Client, id: &str) -> Value {
    wait_listed(c, id, "parked", |s| s["status"] == "parked").await
}

async fn latest_seq(c: &mut Client, id: &str) -> u64 {
    let r = c
        .ok(
            "session.events.since",
            json!({"session_id": id, "last_seen": 0, "limit": 10000}),
        )
        .await;
    r["latest_seq"].as_u64().unwrap()
}

async fn sessions_live(c: &mut Client) -> u64 {
    let s = c.ok("session.events.stats", json!({})).await;
    s["sessions_live"].as_u64().unwrap()
}

/// `role: text` of each transcript message, for comparing transcripts.
fn transcript(messages: &Value) -> Vec<(u64, String, String)> {
    messages
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| {
            (
                m["seq"].as_u64().unwrap(),
                m["role"].as_str().unwrap().to_string(),
                m["text"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Asserts that the durable events of a new turn continue right after
/// `after`: `after+1, after+2, ...` with no gap.
fn assert_continues(events: &[Value], after: u64) {
    let got = seqs(&durable(events));
    let want: Vec<u64> = (after + 1..after + 1 + got.len() as u64).collect();
    assert_eq!(got, want, "the new turn's seqs continue the session's");
}

async fn when_one_of_two_peers_drops_mid_turn_the_other_streams_to_the_end(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &["--host-command", &slow_host(30)]);
    let mut a = gw.client().await;
    let id = session(&mut a).await;
    let mut b = gw.client().await;
    b.ok(
        "session.resume",
        json!({"session_id": id, "omit_messages": true}),
    )
    .await;

    let prompt = "one two three four five six seven eight nine ten eleven twelve \
                  thirteen fourteen fifteen sixteen seventeen eighteen nineteen twenty ";
    let t = submit(&mut a, &id, prompt).await;
    // A is gone while the turn streams: its first delta has arrived, the
    // remaining words take a while.
    while a.next_event().await["type"] != "message.delta" {}
    drop(a);

    let evs = turn_events(&mut b, &t).await;
    assert_eq!(evs[0]["type"], "message.user");
    assert_eq!(evs[1]["type"], "message.start");
    assert_eq!(complete(&evs)["status"], "complete");
    assert_eq!(complete(&evs)["text"], prompt);
    let mut offset = 0;
    let mut text = String::new();
    for d in evs.iter().filter(|e| e["type"] == "message.delta") {
        assert_eq!(d["payload"]["offset"], offset, "no delta lost or doubled");
        let piece = d["payload"]["text"].as_str().unwrap();
        offset += piece.len() as u64;
        text.push_str(piece);
    }
    assert_eq!(text, prompt);

    // The session is live with B alone once the gateway saw A's socket go.
    let s = wait_listed(&mut b, &id, "attached to B alone", |s| s["peers"] == 1).await;
    assert_eq!(s["status"], "idle");
    assert_eq!(sessions_live(&mut b).await, 1);
    let evs = run_turn(&mut b, &id, "still here").await;
    assert_eq!(complete(&evs)["text"], "still here");
}

async fn an_orphan_is_parked_after_the_grace_and_resume_brings_everything_back(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &["--orphan-grace-s", "1"]);
    let mut c = gw.client().await;
    let id = session(&mut c).await;
    for text in ["one", "/todo write tests; fix bugs\ntwo", "three"] {
        run_turn(&mut c, &id, text).await;
    }
    let watermark = latest_seq(&mut c, &id).await;
    let before = c
        .ok("session.resume", json!({"session_id": id, "attach": false}))
        .await;
    assert_eq!(before["session"]["peers"], 1);
    drop(c);

    let mut o = gw.client().await;
    let parked = wait_parked(&mut o, &id).await;
    assert_eq!(parked["peers"], 0);
    assert_eq!(parked["latest_seq"], watermark);
    assert_eq!(
        sessions_live(&mut o).await,
        0,
        "a parked session has no actor"
    );

    let r = o
        .ok(
            "session.resume",
            json!({"session_id": id, "last_seen": watermark}),
        )
        .await;
    assert_eq!(r["events"], json!([]), "nothing happened while parked");
    assert_eq!(r["resync"], false);
    assert_eq!(r["latest_seq"], watermark);
    assert_eq!(
        transcript(&r["messages"]),
        transcript(&before["messages"]),
        "the whole transcript is back"
    );
    assert_eq!(transcript(&r["messages"]).len(), 6);
    assert_eq!(r["todos"]["revision"], 1);
    assert_eq!(r["todos"]["items"][1]["text"], "fix bugs");
    assert_eq!(r["session"]["status"], "idle");
    assert_eq!(r["session"]["peers"], 1);

    // Live again, with the resuming peer attached.
    let s = listed(&mut o, &id).await;
    assert_eq!(s["status"], "idle");
    assert_eq!(s["peers"], 1);
    assert_eq!(sessions_live(&mut o).await, 1);

    let evs = run_turn(&mut o, &id, "four").await;
    assert_eq!(complete(&evs)["text"], "four");
    assert_continues(&evs, watermark);
    let r = o
        .ok("session.resume", json!({"session_id": id, "attach": false}))
        .await;
    assert_eq!(transcript(&r["messages"]).len(), 8);
}

async fn a_peer_back_inside_the_grace_keeps_the_session_live(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &["--orphan-grace-s", "5"]);
    let mut c = gw.client().await;
    let id = session(&mut c).await;
    run_turn(&mut c, &id, "hello").await;
    let watermark = latest_seq(&mut c, &id).await;
    drop(c);

    // Back as soon as the gateway has seen the old socket go, which starts
    // the grace.
    let mut o = gw.client().await;
    wait_listed(&mut o, &id, "orphaned", |s| s["peers"] == 0).await;
    let r = o
        .ok(
            "session.resume",
            json!({"session_id": id, "last_seen": watermark, "omit_messages": true}),
        )
        .await;
    assert_eq!(r["events"], json!([]));
    assert_eq!(r["session"]["peers"], 1);

    // Well past the grace: a timer that was not cancelled would have fired.
    tokio::time::sleep(Duration::from_secs(7)).await;
    let s = listed(&mut o, &id).await;
    assert_eq!(s["status"], "idle", "{s}");
    assert_eq!(s["peers"], 1, "{s}");
    assert_eq!(sessions_live(&mut o).await, 1);
    // Still attached to the same live session: a new turn streams to us.
    let evs = run_turn(&mut o, &id, "again").await;
    assert_eq!(complete(&evs)["text"], "again");
    assert_continues(&evs, watermark);
}

async fn a_running_turn_is_not_parked_it_completes_and_then_the_session_is_parked(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &["--orphan-grace-s", "1"]);
    let mut a = gw.client().await;
    let id = session(&mut a).await;
    let mut b = gw.client().await;
    b.ok(
        "session.resume",
        json!({"session_id": id, "omit_messages": true}),
    )
    .await;
    let t = submit(&mut a, &id, "/sleep 3000\nhello").await;
    // The turn is on its host (sleeping) when every peer goes at once.
    let start = loop {
        let e = a.next_event().await;
        if e["type"] == "message.start" {
            break e;
        }
    };
    assert_eq!(start["turn_id"], t.as_str());
    let watermark = start["seq"].as_u64().unwrap();
    drop(a);
    drop(b);

    let mut o = gw.client().await;
    wait_parked(&mut o, &id).await;
    // Parked only after the turn ended on its own: its one complete is in
    // the store.
    let r = o
        .ok(
            "session.resume",
            json!({"session_id": id, "last_seen": watermark}),
        )
        .await;
    let completes: Vec<&Value> = r["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "message.complete")
        .collect();
    assert_eq!(completes.len(), 1, "{r}");
    assert_eq!(completes[0]["turn_id"], t.as_str());
    assert_eq!(completes[0]["payload"]["status"], "complete");
    assert_eq!(completes[0]["payload"]["text"], "hello");
    let msgs = transcript(&r["messages"]);
    let last = msgs.last().expect("messages");
    assert_eq!((last.1.as_str(), last.2.as_str()), ("assistant", "hello"));
    assert!(r["active_turn"].is_null());

    let n = completes_of(&mut o, &id).await.len();
    assert_eq!(n, 1, "exactly one message.complete");
}

async fn with_no_grace_an_idle_orphan_is_parked_at_once_and_an_attached_session_is_not(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &["--orphan-grace-s", "0"]);
    let mut c = gw.client().await;
    let gone = session(&mut c).await;
    run_turn(&mut c, &gone, "bye").await;
    let mut o = gw.client().await;
    let kept = session(&mut o).await;
    drop(c);

    wait_parked(&mut o, &gone).await;
    let s = listed(&mut o, &kept).await;
    assert_eq!(s["status"], "idle", "a session with a peer stays live");
    assert_eq!(s["peers"], 1);
    // The kept session still serves its peer.
    let evs = run_turn(&mut o, &kept, "here").await;
    assert_eq!(complete(&evs)["text"], "here");
    let r = o
        .ok(
            "session.resume",
            json!({"session_id": gone, "attach": false}),
        )
        .await;
    assert_eq!(transcript(&r["messages"]).len(), 2);
}

/// A tiny deterministic PRNG (splitmix64), so the storm can be replayed
/// from the seed it prints.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const STORM_SESSIONS: usize = 50;
const STORM_CLIENTS_PER_SESSION: usize = 4;
const STORM_TURNS: usize = 5;

/// What one storm client ended with.
struct Held {
    session: String,
    seqs: Vec<u64>,
    drops: u32,
    /// Events that came back in the `events` of a resume after a drop.
    replayed: usize,
}

/// Drives one session's turns one after the other, then publishes the
/// session's final `latest_seq`.
async fn storm_driver(mut d: Client, id: String, mut rng: Rng, fin: watch::Sender<Option<u64>>) {
    for k in 0..STORM_TURNS {
        let text = format!("turn {k} of a session that keeps streaming words ");
        let evs = run_turn(&mut d, &id, &text).await;
        assert_eq!(complete(&evs)["text"], text.as_str());
        tokio::time::sleep(Duration::from_millis(rng.below(150))).await;
    }
    let latest = latest_seq(&mut d, &id).await;
    fin.send_replace(Some(latest));
}

enum Step {
    Event(Value),
    Drop,
    Final,
}

/// One client: resumes with its watermark, drops its connection at random
/// moments (once or twice) and comes back, until it has dropped as often as
/// it meant to and holds everything up to the final seq.
async fn storm_client(
    url: String,
    id: String,
    mut rng: Rng,
    mut fin: watch::Receiver<Option<u64>>,
) -> Held {
    let mut held: Vec<u64> = Vec::new();
    let mut watermark = 0;
    let mut drops_left = 1 + rng.below(2) as u32;
    let mut drops = 0;
    let mut replayed = 0;
    let mut fin_open = true;
    loop {
        let mut c = Client::connect(&url).await;
        let r = c
            .ok(
                "session.resume",
                json!({"session_id": id, "last_seen": watermark, "omit_messages": true}),
            )
            .await;
        assert_eq!(r["resync"], false, "{r}");
        if drops > 0 {
            replayed += r["events"].as_array().unwrap().len();
        }
        for e in r["events"].as_array().unwrap() {
            let seq = e["seq"].as_u64().unwrap();
            held.push(seq);
            watermark = seq;
        }
        let drop_at = tokio::time::Instant::now() + Duration::from_millis(rng.below(1500));
        loop {
            if drops_left == 0 && fin.borrow().is_some_and(|f| watermark >= f) {
                return Held {
                    session: id,
                    seqs: held,
                    drops,
                    replayed,
                };
            }
            let step = tokio::select! {
                e = c.next_event() => Step::Event(e),
                _ = tokio::time::sleep_until(drop_at), if drops_left > 0 => Step::Drop,
                r = fin.changed(), if fin_open => {
                    fin_open = r.is_ok();
                    Step::Final
                }
            };
            match step {
                Step::Event(e) => {
                    if let Some(seq) = e["seq"].as_u64() {
                        held.push(seq);
                        watermark = seq;
                    }
                }
                Step::Drop => break,
                Step::Final => {}
            }
        }
        // Gone without a close frame, whatever was in flight is lost to
        // this connection; the client stays away a moment while the
        // session goes on, so its resume has something to replay.
        drop(c);
        drops_left -= 1;
        drops += 1;
        tokio::time::sleep(Duration::from_millis(rng.below(400))).await;
    }
}

async fn a_reconnect_storm_ends_with_every_client_holding_every_seq_exactly_once(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &["--host-command", &slow_host(25)]);
    let url = Arc::new(gw.url());
    let seed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    eprintln!("storm seed {seed}");
    let mut rng = Rng(seed);

    let storm = async {
        let mut drivers = Vec::new();
        let mut clients = Vec::new();
        let mut ids = Vec::new();
        for _ in 0..STORM_SESSIONS {
            let mut d = Client::connect(&url).await;
            let id = session(&mut d).await;
            let (tx, rx) = watch::channel(None);
            for _ in 0..STORM_CLIENTS_PER_SESSION {
                clients.push(tokio::spawn(storm_client(
                    url.to_string(),
                    id.clone(),
                    Rng(rng.next()),
                    rx.clone(),
                )));
            }
            drivers.push(tokio::spawn(storm_driver(
                d,
                id.clone(),
                Rng(rng.next()),
                tx,
            )));
            ids.push(id);
        }
        for d in drivers {
            d.await.expect("driver");
        }
        let mut held = Vec::new();
        for c in clients {
            held.push(c.await.expect("client"));
        }
        (ids, held)
    };
    let (ids, held) = tokio::time::timeout(Duration::from_secs(180), storm)
        .await
        .expect("the storm did not settle in time");

    let mut c = gw.client().await;
    let mut latest = std::collections::HashMap::new();
    for id in &ids {
        let all = c
            .ok(
                "session.events.since",
                json!({"session_id": id, "last_seen": 0, "limit": 10000}),
            )
            .await;
        let n = all["latest_seq"].as_u64().unwrap();
        assert_eq!(
            seqs(all["events"].as_array().unwrap()),
            (1..=n).collect::<Vec<_>>()
        );
        let completes = all["events"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["type"] == "message.complete")
            .count();
        assert_eq!(completes, STORM_TURNS);
        latest.insert(id.clone(), n);
    }
    assert_eq!(held.len(), STORM_SESSIONS * STORM_CLIENTS_PER_SESSION);
    // The drops happened while events flowed: resumes had missed events
    // to replay (not only empty catch-ups).
    let replayed: usize = held.iter().map(|h| h.replayed).sum();
    let drops: u32 = held.iter().map(|h| h.drops).sum();
    eprintln!("storm: {drops} drops, {replayed} events replayed after them");
    assert!(
        replayed > 0,
        "no resume after a drop had anything to replay"
    );
    for h in &held {
        let n = latest[&h.session];
        assert!(h.drops >= 1);
        assert_eq!(
            h.seqs,
            (1..=n).collect::<Vec<_>>(),
            "a client of {} (dropped {} times) holds the wrong seqs",
            h.session,
            h.drops
        );
    }
}

async fn an_orphaned_turn_silent_past_the_staleness_window_is_interrupted_then_parked(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(
        &b,
        dir.path(),
        &["--orphan-grace-s", "0", "--activity-stale-s", "2"],
    );
    let mut c = gw.client().await;
    let id = session(&mut c).await;
    // `/hang` sends one delta and then nothing: no activity from the host.
    let t = submit(&mut c, &id, "/hang").await;
    loop {
        let e = c.next_event().await;
        if e["type"] == "message.delta" {
            break;
        }
    }
    drop(c);

    let mut o = gw.client().await;
    wait_parked(&mut o, &id).await;
    let ends = completes_of(&mut o, &id).await;
    assert_eq!(ends.len(), 1, "exactly one message.complete: {ends:?}");
    assert_eq!(ends[0]["turn_id"], t.as_str());
    assert_eq!(ends[0]["payload"]["status"], "interrupted");
    // Brought back, the session takes a new turn.
    let r = o
        .ok("session.resume", json!({"session_id": id, "last_seen": 0}))
        .await;
    let latest = r["latest_seq"].as_u64().unwrap();
    let evs = run_turn(&mut o, &id, "again").await;
    assert_eq!(complete(&evs)["text"], "again");
    assert_continues(&evs, latest);
}

async fn above_max_live_sessions_the_least_recently_active_orphans_are_parked(b: Backend) {
    let dir = tempdir();
    // A grace far longer than the test: only the cap parks anything.
    let gw = Gateway::start_on(
        &b,
        dir.path(),
        &["--orphan-grace-s", "3600", "--max-live-sessions", "2"],
    );
    let mut c = gw.client().await;
    let mut ids = Vec::new();
    for i in 0..4 {
        let r = c
            .ok(
                "session.create",
                json!({"title": format!("s{i}"), "attach": false}),
            )
            .await;
        ids.push(r["session"]["session_id"].as_str().unwrap().to_string());
    }
    // One with a peer, created last: never a candidate.
    let kept = session(&mut c).await;

    wait_parked(&mut c, &ids[0]).await;
    wait_parked(&mut c, &ids[1]).await;
    wait_parked(&mut c, &ids[2]).await;
    let deadline = Instant::now() + POLL_WAIT;
    while sessions_live(&mut c).await > 2 {
        assert!(Instant::now() < deadline, "the cap was never enforced");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(listed(&mut c, &ids[3]).await["status"], "idle");
    let s = listed(&mut c, &kept).await;
    assert_eq!(
        (s["status"].as_str(), s["peers"].as_u64()),
        (Some("idle"), Some(1))
    );
}

async fn a_peer_that_resumes_again_on_the_same_connection_stays_and_gets_each_event_once(
    b: Backend,
) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &[]);
    let mut c = gw.client().await;
    let id = session(&mut c).await;
    let r = c
        .ok("session.resume", json!({"session_id": id, "last_seen": 1}))
        .await;
    assert_eq!(r["session"]["peers"], 1, "still one peer: the same one");
    let evs = run_turn(&mut c, &id, "once").await;
    assert_eq!(complete(&evs)["text"], "once");
    assert_continues(&evs, 1);
    c.ok("gateway.ping", json!({})).await;
}

backends!(
    when_one_of_two_peers_drops_mid_turn_the_other_streams_to_the_end,
    an_orphan_is_parked_after_the_grace_and_resume_brings_everything_back,
    a_peer_back_inside_the_grace_keeps_the_session_live,
    a_running_turn_is_not_parked_it_completes_and_then_the_session_is_parked,
    with_no_grace_an_idle_orphan_is_parked_at_once_and_an_attached_session_is_not,
    a_reconnect_storm_ends_with_every_client_holding_every_seq_exactly_once,
    an_orphaned_turn_silent_past_the_staleness_window_is_interrupted_then_parked,
    above_max_live_sessions_the_least_recently_active_orphans_are_parked,
    a_peer_that_resumes_again_on_the_same_connection_stays_and_gets_each_event_once,
);
