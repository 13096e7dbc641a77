//! `GET /metrics` (docs/METRICS.md), black-box: scrape the real binary
//! over plain HTTP, do something over the WebSocket, scrape again, and
//! check that the counters moved by what the client saw.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

use common::Backend;

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use common::{session, tempdir, Client, Gateway, FRAME_WAIT};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// One `GET` on its own connection: status, `Content-Type`, body.
async fn get(addr: &str, path: &str, token: Option<&str>) -> (u16, String, String) {
    let fut = async {
        let mut tcp = TcpStream::connect(addr).await.expect("connect");
        let auth = token
            .map(|t| format!("Authorization: Bearer {t}\r\n"))
            .unwrap_or_default();
        let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Connection: close\r\n\r\n");
        tcp.write_all(req.as_bytes()).await.expect("write");
        let mut raw = Vec::new();
        tcp.read_to_end(&mut raw).await.expect("read");
        raw
    };
    let raw = tokio::time::timeout(FRAME_WAIT, fut)
        .await
        .expect("no HTTP answer in time");
    let text = String::from_utf8(raw).expect("UTF-8 response");
    let (head, body) = text.split_once("\r\n\r\n").expect("head and body");
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status");
    let content_type = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-type")
                .then(|| v.trim().to_string())
        })
        .unwrap_or_default();
    (status, content_type, body.to_string())
}

/// A scrape: every sample by its series (`name{labels}` as written).
struct Scrape(HashMap<String, f64>);

impl Scrape {
    /// A series' value; a labelled series that has not occurred yet is 0.
    fn get(&self, series: &str) -> f64 {
        self.0.get(series).copied().unwrap_or(0.0)
    }

    /// Sum of every series of `name` whose labels contain `label`.
    fn sum(&self, name: &str, label: &str) -> f64 {
        self.0
            .iter()
            .filter(|(k, _)| k.starts_with(&format!("{name}{{")) && k.contains(label))
            .map(|(_, v)| v)
            .sum()
    }
}

/// Scrapes `/metrics` and checks the text format on the way: every line a
/// `# HELP`, a `# TYPE` or `name{labels} value`, every sample in a family
/// whose `# TYPE` came before it, no series twice.
async fn scrape(addr: &str) -> Scrape {
    let (status, content_type, body) = get(addr, "/metrics", None).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(content_type, "text/plain; version=0.0.4; charset=utf-8");
    Scrape(parse(&body))
}

fn parse(body: &str) -> HashMap<String, f64> {
    let mut typed: HashMap<String, String> = HashMap::new();
    let mut samples = HashMap::new();
    for line in body.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("# TYPE name kind");
            assert!(["counter", "gauge", "histogram"].contains(&kind), "{line}");
            assert!(typed.insert(name.into(), kind.into()).is_none(), "{line}");
            continue;
        }
        if line.starts_with("# HELP ") {
            continue;
        }
        assert!(!line.starts_with('#') && !line.is_empty(), "{line:?}");
        let (series, value) = line.rsplit_once(' ').expect("series value");
        let value: f64 = value
            .parse()
            .unwrap_or_else(|_| panic!("bad value: {line}"));
        let name = match series.split_once('{') {
            Some((name, labels)) => {
                let labels = labels.strip_suffix('}').expect("labels end with }");
                for pair in labels.split(',') {
                    let (key, val) = pair.split_once('=').expect("label=value");
                    assert!(valid_name(key), "{line}");
                    assert!(
                        val.len() >= 2 && val.starts_with('"') && val.ends_with('"'),
                        "{line}"
                    );
                }
                name
            }
            None => series,
        };
        assert!(valid_name(name), "{line}");
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| {
                let base = name.strip_suffix(s)?;
                (typed.get(base).map(String::as_str) == Some("histogram")).then_some(base)
            })
            .unwrap_or(name);
        assert!(typed.contains_key(family), "no # TYPE before {line}");
        assert!(
            samples.insert(series.to_string(), value).is_none(),
            "twice: {line}"
        );
    }
    let names: HashSet<_> = typed.keys().collect();
    assert!(names.iter().all(|n| n.starts_with("tether_")), "{names:?}");
    samples
}

fn valid_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Creates a session (attached) and drains its `session.created`.
/// Submits a prompt and collects every event through its `message.complete`.
async fn turn(c: &mut Client, id: &str, text: &str) -> Vec<Value> {
    let r = c
        .ok("prompt.submit", json!({"session_id": id, "text": text}))
        .await;
    let turn_id = r["turn_id"].clone();
    let mut events = Vec::new();
    loop {
        let e = c.next_event().await;
        let done = e["type"] == "message.complete" && e["turn_id"] == turn_id;
        events.push(e);
        if done {
            return events;
        }
    }
}

fn last_seq(events: &[Value]) -> f64 {
    events
        .iter()
        .filter_map(|e| e["seq"].as_u64())
        .max()
        .expect("a durable event") as f64
}

const TURNS_COMPLETE: &str = "tether_turns_total{status=\"complete\"}";
const TURN_COUNT: &str = "tether_turn_duration_seconds_count";
const COMMITS: &str = "tether_store_commit_duration_seconds_count";

async fn a_turn_moves_the_counters_by_what_the_client_saw(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &[]);
    let mut c = gw.client().await;
    let id = session(&mut c).await;

    let before = scrape(&gw.addr).await;
    assert_eq!(before.get("tether_connections_open{transport=\"ws\"}"), 1.0);
    assert_eq!(before.get("tether_sessions_live"), 1.0);
    assert_eq!(before.get("tether_sessions_parked"), 0.0);
    // session.created is on disk (with the create's commit).
    assert_eq!(before.get("tether_events_appended_total"), 1.0);
    assert!(before.get(COMMITS) >= 1.0);
    assert_eq!(before.get("tether_store_writable"), 1.0);

    let events = turn(&mut c, &id, "hello metrics world").await;
    let complete = events.last().expect("message.complete");
    assert_eq!(complete["payload"]["status"], "complete");
    let after = scrape(&gw.addr).await;

    assert_eq!(after.get(TURNS_COMPLETE) - before.get(TURNS_COMPLETE), 1.0);
    assert_eq!(after.get(TURN_COUNT) - before.get(TURN_COUNT), 1.0);
    assert_eq!(
        after.get("tether_turn_duration_seconds_bucket{le=\"+Inf\"}"),
        after.get(TURN_COUNT)
    );
    // Every durable event of the session so far, and nothing else.
    assert_eq!(after.get("tether_events_appended_total"), last_seq(&events));
    // This client is the only peer: every event it received was a delivery.
    let delivered = after.get("tether_deliveries_total") - before.get("tether_deliveries_total");
    assert_eq!(delivered, events.len() as f64, "{events:?}");
    let commits = after.get(COMMITS) - before.get(COMMITS);
    let durable = events.iter().filter(|e| e["seq"].is_u64()).count() as f64;
    assert!(commits >= 1.0 && commits <= durable, "{commits} commits");
    assert_eq!(after.sum("tether_turns_total", "status=\"error\""), 0.0);

    // An engine error is an error turn, with its reason.
    let events = turn(&mut c, &id, "/error x").await;
    let payload = &events.last().expect("message.complete")["payload"];
    assert_eq!(payload["status"], "error");
    assert_eq!(payload["failure_reason"], "engine_error");
    let failed = scrape(&gw.addr).await;
    assert_eq!(failed.sum("tether_turns_total", "status=\"error\""), 1.0);
    assert_eq!(
        failed.get("tether_turns_total{status=\"error\",failure_reason=\"engine_error\"}"),
        1.0
    );
    assert_eq!(failed.get(TURNS_COMPLETE), after.get(TURNS_COMPLETE));
    assert_eq!(failed.get(TURN_COUNT) - after.get(TURN_COUNT), 1.0);
    assert_eq!(
        failed.get("tether_events_appended_total"),
        last_seq(&events)
    );
}

async fn replays_are_counted_with_their_events(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &[]);
    let mut a = gw.client().await;
    let id = session(&mut a).await;
    let latest = last_seq(&turn(&mut a, &id, "one two").await) as u64;
    let before = scrape(&gw.addr).await;
    let resume = "tether_replay_requests_total{method=\"session.resume\"}";
    let since = "tether_replay_requests_total{method=\"session.events.since\"}";
    let resumed = "tether_replayed_events_total{method=\"session.resume\"}";
    let sinced = "tether_replayed_events_total{method=\"session.events.since\"}";
    assert_eq!((before.get(resume), before.get(since)), (0.0, 0.0));

    // A resume without a watermark replays nothing and is not counted.
    let mut b = gw.client().await;
    b.ok("session.resume", json!({"session_id": id})).await;
    let r = b
        .ok("session.resume", json!({"session_id": id, "last_seen": 1}))
        .await;
    let replayed = r["events"].as_array().expect("events").len();
    assert_eq!(replayed as u64, latest - 1);
    let r = b
        .ok(
            "session.events.since",
            json!({"session_id": id, "last_seen": 0}),
        )
        .await;
    let read = r["events"].as_array().expect("events").len();
    assert_eq!(read as u64, latest);

    let after = scrape(&gw.addr).await;
    assert_eq!(after.get(resume), 1.0);
    assert_eq!(after.get(resumed), replayed as f64);
    assert_eq!(after.get(since), 1.0);
    assert_eq!(after.get(sinced), read as f64);
    assert_eq!(after.get("tether_connections_open{transport=\"ws\"}"), 2.0);
}

async fn a_crashed_host_counts_a_restart_and_a_host_crash_turn(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &[]);
    let mut c = gw.client().await;
    let id = session(&mut c).await;
    let before = scrape(&gw.addr).await;
    assert_eq!(before.get("tether_host_restarts_total"), 0.0);

    let events = turn(&mut c, &id, "/crash").await;
    let payload = &events.last().expect("message.complete")["payload"];
    assert_eq!(payload["failure_reason"], "host_crash");
    // The supervisor counts the restart right after it failed the turn,
    // so the client may see the turn end first: scrape until it is there.
    let deadline = Instant::now() + Duration::from_secs(30);
    let after = loop {
        let s = scrape(&gw.addr).await;
        if s.get("tether_host_restarts_total") >= 1.0 {
            break s;
        }
        assert!(Instant::now() < deadline, "no restart counted");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(after.get("tether_host_restarts_total"), 1.0);
    assert_eq!(
        after.get("tether_turns_total{status=\"error\",failure_reason=\"host_crash\"}"),
        1.0
    );
    // A crashed turn still ran here: its duration is observed.
    assert_eq!(after.get(TURN_COUNT) - before.get(TURN_COUNT), 1.0);
}

async fn a_session_left_alone_is_counted_parked(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &["--orphan-grace-s", "0"]);
    let empty = scrape(&gw.addr).await;
    assert_eq!(empty.get("tether_sessions_live"), 0.0);
    assert_eq!(empty.get("tether_sessions_parked"), 0.0);
    let mut c = gw.client().await;
    session(&mut c).await;
    c.close().await;
    // Parking follows the disconnect by a few messages: scrape until then.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let s = scrape(&gw.addr).await;
        if s.get("tether_sessions_parked") == 1.0 {
            assert_eq!(s.get("tether_sessions_live"), 0.0);
            assert_eq!(s.get("tether_connections_open{transport=\"ws\"}"), 0.0);
            break;
        }
        assert!(Instant::now() < deadline, "never parked");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn with_tokens_metrics_need_one_of_any_profile(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(
        &b,
        dir.path(),
        &["--token", "a:tok-a", "--token", "b:tok-b"],
    );
    let (status, _, _) = get(&gw.addr, "/metrics", None).await;
    assert_eq!(status, 401);
    let (status, _, _) = get(&gw.addr, "/metrics", Some("wrong")).await;
    assert_eq!(status, 401);
    for token in ["tok-a", "tok-b"] {
        let (status, _, body) = get(&gw.addr, "/metrics", Some(token)).await;
        assert_eq!(status, 200);
        parse(&body);
    }
}

backends!(
    a_turn_moves_the_counters_by_what_the_client_saw,
    replays_are_counted_with_their_events,
    a_crashed_host_counts_a_restart_and_a_host_crash_turn,
    a_session_left_alone_is_counted_parked,
    with_tokens_metrics_need_one_of_any_profile,
);
