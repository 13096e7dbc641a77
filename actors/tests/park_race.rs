//! Requests racing parks: with no orphan grace a session that nobody is
//! attached to parks as soon as it is idle, so every request below finds
//! its session live, parking, parked or being brought back. Each must be
//! answered exactly once, with what the session would have answered had it
//! never parked: never lost (no reply, an internal error), never 4001, never
//! run twice (one handoff announcement per transition), never on a second
//! live actor (seqs stay one contiguous run).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

use std::collections::HashMap;
use std::time::Duration;

use serde_json::{json, Value};
use tether_actors::{spawn_peer, GatewayConfig, Identity, Outbound, OutboxReceiver, PeerMsg};
use tether_protocol::SessionStatus;

mod common;

const SESSIONS: usize = 6;
const WORKERS: usize = 6;
const ROUNDS: usize = 40;

/// A peer that asks one thing at a time and checks that each reply comes
/// once, in order.
struct Asker {
    peer: ractor::ActorRef<PeerMsg>,
    rx: OutboxReceiver,
    next_id: u64,
}

impl Asker {
    /// Creates a session nobody is attached to; its id.
    async fn create(&mut self, title: &str) -> String {
        let r = self
            .ok("session.create", json!({"title": title, "attach": false}))
            .await;
        r["session"]["session_id"].as_str().expect("id").to_string()
    }

    async fn start(ctx: &tether_actors::Ctx) -> Asker {
        let identity = Identity {
            profile: "default".into(),
            fixed: false,
            can_attach: true,
            transport: tether_protocol::PeerTransport::WebSocket,
            limits: None,
        };
        let (peer, rx) = spawn_peer(ctx, identity).await.expect("peer");
        let mut asker = Asker {
            peer,
            rx,
            next_id: 1,
        };
        assert_eq!(asker.frame().await["params"]["type"], "gateway.ready");
        asker
    }

    async fn frame(&mut self) -> Value {
        match tokio::time::timeout(Duration::from_secs(30), self.rx.recv()).await {
            Ok(Some(Outbound::Frame(b))) => serde_json::from_slice(&b).expect("frame is JSON"),
            other => panic!("expected a frame, got {other:?}"),
        }
    }

    /// The reply to one request; live frames (of an attached resume) are
    /// skipped, and a reply to any other id is a duplicate or a stray.
    async fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let req = json!({"jsonrpc":"2.0","id":id,"method":method,"params":params});
        self.peer
            .cast(PeerMsg::Text {
                text: req.to_string(),
                permit: None,
            })
            .expect("peer alive");
        loop {
            let f = self.frame().await;
            if f.get("method").is_some() {
                continue;
            }
            assert_eq!(f["id"], id, "{method}: a reply to another request: {f}");
            return f;
        }
    }

    async fn ok(&mut self, method: &str, params: Value) -> Value {
        let r = self.call(method, params).await;
        assert!(r.get("error").is_none(), "{method} failed: {r}");
        r["result"].clone()
    }
}

/// The seqs of event params, checked to be 1, 2, ... `latest`.
fn assert_whole(events: &Value, latest: u64, what: &str) {
    let seqs: Vec<u64> = events
        .as_array()
        .unwrap_or_else(|| panic!("{what}: no events"))
        .iter()
        .map(|e| e["seq"].as_u64().expect("seq"))
        .collect();
    let want: Vec<u64> = (1..=latest).collect();
    assert_eq!(seqs, want, "{what}: not one contiguous run up to {latest}");
}

/// One worker: random requests on random sessions, plus handoffs on its own
/// session. Returns how many handoff transitions it announced there.
async fn worker(ctx: tether_actors::Ctx, ids: Vec<String>, me: usize, mut seed: u64) -> usize {
    let mut a = Asker::start(&ctx).await;
    let own = ids[me].clone();
    let mut transitions = 0;
    for _ in 0..ROUNDS {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let id = ids[(seed >> 33) as usize % ids.len()].clone();
        match (seed >> 20) % 6 {
            0 => {
                let r = a
                    .ok(
                        "session.resume",
                        json!({"session_id": id, "attach": false, "last_seen": 0, "omit_messages": true}),
                    )
                    .await;
                let latest = r["latest_seq"].as_u64().expect("latest_seq");
                assert_whole(&r["events"], latest, "resume");
            }
            1 => {
                let r = a
                    .ok(
                        "session.events.since",
                        json!({"session_id": id, "last_seen": 0}),
                    )
                    .await;
                let latest = r["latest_seq"].as_u64().expect("latest_seq");
                assert_whole(&r["events"], latest, "since");
            }
            2 => {
                // No compute hosts here: the session itself must say so.
                let r = a
                    .call("prompt.submit", json!({"session_id": id, "text": "hi"}))
                    .await;
                assert_eq!(r["error"]["code"], 5019, "submit: {r}");
            }
            3 => {
                let r = a.ok("session.interrupt", json!({"session_id": id})).await;
                assert_eq!(r["status"], "idle");
            }
            4 => {
                // Attached, the session is not parked; detached, it is again.
                a.ok(
                    "session.resume",
                    json!({"session_id": id, "omit_messages": true}),
                )
                .await;
                let r = a.ok("session.detach", json!({"session_id": id})).await;
                assert_eq!(r["detached"], true);
            }
            _ => {
                let r = a
                    .ok(
                        "handoff.request",
                        json!({"session_id": own, "target": format!("t{me}")}),
                    )
                    .await;
                let h = r["handoff_id"].clone();
                let r = a
                    .ok("handoff.fail", json!({"handoff_id": h, "error": "test"}))
                    .await;
                assert_eq!(r["failed"], true);
                transitions += 2;
            }
        }
    }
    a.peer.stop(None);
    transitions
}

/// A gateway whose orphans park at once and whose peers are not rate
/// limited: every request can race a park.
async fn start_parking_at_once(dir: &std::path::Path) -> tether_actors::GatewayHandle {
    common::start(
        dir,
        GatewayConfig {
            orphan_grace: Duration::ZERO,
            rate_limit_rps: 0,
            ..GatewayConfig::default()
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_racing_parks_are_each_answered_once_and_right() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start_parking_at_once(dir.path()).await;
    let ctx = gw.ctx().clone();
    let mut setup = Asker::start(&ctx).await;
    let mut ids = Vec::new();
    for i in 0..SESSIONS {
        ids.push(setup.create(&format!("s{i}")).await);
    }

    // Whether parks really happen meanwhile: the store says `parked`.
    let watching = ctx.clone();
    let watched = ids.clone();
    let (stop_tx, mut stop_rx) = tokio::sync::oneshot::channel::<()>();
    let watcher = tokio::spawn(async move {
        let mut seen_parked = 0;
        loop {
            for id in &watched {
                let id = tether_protocol::SessionId::from(id.as_str());
                if let Ok(Some(row)) = watching.reader.get_session("default", &id).await {
                    seen_parked += usize::from(row.status == SessionStatus::Parked);
                }
            }
            if stop_rx.try_recv().is_ok() {
                return seen_parked;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });

    let workers: Vec<_> = (0..WORKERS)
        .map(|me| tokio::spawn(worker(ctx.clone(), ids.clone(), me, 7 + me as u64)))
        .collect();
    let mut announced = HashMap::new();
    for (me, w) in workers.into_iter().enumerate() {
        announced.insert(me, w.await.expect("worker"));
    }
    let _ = stop_tx.send(());
    let seen_parked = watcher.await.expect("watcher");
    assert!(seen_parked > 0, "no session was ever seen parked");

    // Every announcement exactly once, in order: pending, failed, pending, ...
    for (me, id) in ids.iter().enumerate().take(WORKERS) {
        let r = setup
            .ok(
                "session.events.since",
                json!({"session_id": id, "last_seen": 0, "limit": 1000}),
            )
            .await;
        let latest = r["latest_seq"].as_u64().expect("latest_seq");
        assert_whole(&r["events"], latest, "final read");
        let states: Vec<String> = r["events"]
            .as_array()
            .expect("events")
            .iter()
            .filter(|e| e["type"] == "status.update" && e["payload"]["kind"] == "handoff")
            .map(|e| e["payload"]["text"].as_str().expect("state").to_string())
            .collect();
        let want: Vec<&str> = ["pending", "failed"]
            .iter()
            .cycle()
            .take(announced[&me])
            .copied()
            .collect();
        assert_eq!(states, want, "session {me}'s handoff announcements");
    }
}

/// What a request may answer on a session that is being closed: its answer
/// from before the close, or 4002 after; never an internal error (a request
/// lost in the stopping actor's mailbox) and never 4001.
fn assert_open_or_closed(method: &str, r: &Value) {
    if r.get("error").is_none() {
        return;
    }
    let code = &r["error"]["code"];
    let before = method == "prompt.submit" && code == 5019;
    assert!(before || code == 4002, "{method} on a closing session: {r}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_racing_a_close_are_answered_from_either_side_of_it() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start_parking_at_once(dir.path()).await;
    let ctx = gw.ctx().clone();
    let mut closer = Asker::start(&ctx).await;
    for round in 0..20 {
        let id = closer.create(&format!("c{round}")).await;
        let askers: Vec<_> = (0..4)
            .map(|k| {
                let ctx = ctx.clone();
                let id = id.clone();
                tokio::spawn(async move {
                    let mut a = Asker::start(&ctx).await;
                    for i in 0..10 {
                        let (method, params) = match (i + k) % 4 {
                            0 => ("session.resume", json!({"session_id": id, "attach": false})),
                            1 => ("prompt.submit", json!({"session_id": id, "text": "x"})),
                            2 => ("session.interrupt", json!({"session_id": id})),
                            _ => (
                                "session.events.since",
                                json!({"session_id": id, "last_seen": 0}),
                            ),
                        };
                        let r = a.call(method, params).await;
                        assert_open_or_closed(method, &r);
                    }
                    a.peer.stop(None);
                })
            })
            .collect();
        let r = closer.ok("session.close", json!({"session_id": id})).await;
        assert_eq!(r["closed"], true);
        for a in askers {
            a.await.expect("asker");
        }
        let r = closer
            .call("session.resume", json!({"session_id": id, "attach": false}))
            .await;
        assert_eq!(r["error"]["code"], 4002, "{r}");
    }
}
