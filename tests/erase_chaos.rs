//! Chaos of deletion: a gateway with retention sweeping every few tenths
//! of a second, and clients that, at random from a seed, post a few chat
//! ids again and again (new lives of deleted chats among them), follow
//! their sessions over WebSocket, and close and delete them. Black-box, on
//! both stores. Then the invariants:
//!
//! - every post is answered with a stream or a 4xx, never a storage failure;
//! - every connection that follows a session sees its events once, in
//!   order, from seq 1, and nothing of it after `session.deleted`;
//! - in the store, every session under a chat id holds exactly
//!   `1..=latest_seq`, and each of its turns has exactly one
//!   `message.complete`, before and after a restart.
//!
//! `TETHER_CHAOS_SECS` (default 8) and `TETHER_CHAOS_SEED` set the run;
//! the seed is printed so a failure replays.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

/// A post's bound: the call timeout (a create waits for the id's erase)
/// and a margin for a loaded machine.
const POST_WAIT: std::time::Duration = std::time::Duration::from_secs(45);

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::http::http_within;
use common::{tempdir, Backend, Client, Gateway};
use serde_json::{json, Value};

const CHATS: u64 = 3;

/// splitmix64, seedable so a failing run replays.
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

fn seed() -> u64 {
    std::env::var("TETHER_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x0e7a_5e5e_ed00)
}

fn secs() -> u64 {
    std::env::var("TETHER_CHAOS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(8)
}

/// What the clients learned: each chat's session id, and what broke.
#[derive(Default)]
struct Shared {
    sessions: Mutex<HashMap<String, String>>,
    violations: Mutex<Vec<String>>,
    posts: Mutex<(u64, u64)>,
}

impl Shared {
    fn violation(&self, v: String) {
        self.violations.lock().expect("lock").push(v);
    }

    fn session_of(&self, chat: &str) -> Option<String> {
        self.sessions.lock().expect("lock").get(chat).cloned()
    }
}

/// Posts a random chat id with a prompt, as the AI SDK's transport does.
async fn poster(addr: String, shared: Arc<Shared>, mut rng: Rng, until: tokio::time::Instant) {
    let mut n = 0;
    while tokio::time::Instant::now() < until {
        n += 1;
        let chat = format!("chaos-{}", rng.below(CHATS));
        let text = match rng.below(4) {
            0 => "/sleep 200\nslow one".to_string(),
            _ => format!("prompt {n}"),
        };
        let body = json!({"id": chat, "trigger": "submit-message", "messages": [
            {"id": format!("m{n}"), "role": "user", "parts": [{"type": "text", "text": text}]}
        ]})
        .to_string();
        let r = http_within(
            POST_WAIT,
            &addr,
            "POST",
            "/v1/ai-sdk/chat",
            &[("Content-Type", "application/json")],
            body.as_bytes(),
        )
        .await;
        let mut posts = shared.posts.lock().expect("lock");
        posts.0 += 1;
        if r.status == 200 {
            posts.1 += 1;
        }
        drop(posts);
        if !(r.status == 200 || (400..500).contains(&r.status)) {
            shared.violation(format!(
                "a post of {chat} answered {}: {}",
                r.status,
                String::from_utf8_lossy(&r.body)
            ));
        }
        if let Some((_, id)) = r
            .headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("x-tether-session-id"))
        {
            shared
                .sessions
                .lock()
                .expect("lock")
                .insert(chat, id.clone());
        }
    }
}

/// Follows a random chat's session from seq 1 for a while on a fresh
/// connection, checking what it is sent.
async fn follower(url: String, shared: Arc<Shared>, mut rng: Rng, until: tokio::time::Instant) {
    while tokio::time::Instant::now() < until {
        let chat = format!("chaos-{}", rng.below(CHATS));
        let Some(id) = shared.session_of(&chat) else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let mut c = Client::connect(&url).await;
        let resumed = c
            .call("session.resume", json!({"session_id": id, "last_seen": 0}))
            .await;
        let Some(replayed) = resumed["result"]["events"].as_array() else {
            continue; // 4001 (erased), 4002 (closed): nothing to follow
        };
        let mut last = 0;
        let mut deleted = false;
        let mut check = |e: &Value, deleted: &mut bool| {
            if e["session_id"] != id.as_str() {
                return;
            }
            if *deleted {
                shared.violation(format!("{id}: {} after session.deleted", e["type"]));
            }
            if e["type"] == "session.deleted" {
                *deleted = true;
                return;
            }
            let Some(seq) = e["seq"].as_u64() else {
                return;
            };
            if seq != last + 1 {
                shared.violation(format!("{id}: seq {seq} after {last}"));
            }
            last = seq;
        };
        for e in replayed {
            check(e, &mut deleted);
        }
        let watch = Duration::from_millis(100 + rng.below(600));
        let stop = tokio::time::Instant::now() + watch;
        while let Ok(Ok(frame)) = tokio::time::timeout_at(stop, c.next_or_close()).await {
            if frame["method"] == "event" {
                check(&frame["params"], &mut deleted);
            }
        }
    }
}

/// Closes or deletes a random chat's session now and then.
async fn eraser(url: String, shared: Arc<Shared>, mut rng: Rng, until: tokio::time::Instant) {
    let mut c = Client::connect(&url).await;
    while tokio::time::Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(100 + rng.below(400))).await;
        let chat = format!("chaos-{}", rng.below(CHATS));
        let Some(id) = shared.session_of(&chat) else {
            continue;
        };
        let method = if rng.below(2) == 0 {
            "session.close"
        } else {
            "session.delete"
        };
        let r = c.call(method, json!({"session_id": id})).await;
        let code = r["error"]["code"].as_i64().unwrap_or(0);
        if r.get("error").is_some() && ![4001, 4002].contains(&code) {
            shared.violation(format!("{method} {id}: {r}"));
        }
    }
}

/// Every chat's session in the store: whole, each turn ended once.
async fn check_store(c: &mut Client, ids: &[String], when: &str) -> Vec<String> {
    let mut problems = Vec::new();
    for id in ids {
        let Some((events, latest)) = common::stored_events(c, id).await else {
            continue;
        };
        let seqs: Vec<u64> = events.iter().filter_map(|e| e["seq"].as_u64()).collect();
        if seqs != (1..=latest).collect::<Vec<_>>() {
            problems.push(format!(
                "{when}: {id} holds {} events for latest_seq {latest}",
                seqs.len()
            ));
        }
        let mut endings: HashMap<&str, (u32, u32)> = HashMap::new();
        for e in &events {
            let Some(turn) = e["turn_id"].as_str() else {
                continue;
            };
            let entry = endings.entry(turn).or_default();
            match e["type"].as_str() {
                Some("message.user") => entry.0 += 1,
                Some("message.complete") => entry.1 += 1,
                _ => {}
            }
        }
        for (turn, (users, completes)) in endings {
            if users > 0 && completes != 1 {
                problems.push(format!(
                    "{when}: {id} turn {turn} has {completes} message.complete"
                ));
            }
        }
    }
    problems
}

async fn deleting_and_reusing_chat_ids_at_random_loses_nothing(backend: Backend) {
    let seed = seed();
    println!("erase chaos seed {seed} for {} s", secs());
    let dir = tempdir();
    let mut gw = Gateway::start_on(
        &backend,
        dir.path(),
        &[
            "--orphan-grace-s",
            "0",
            "--retain-closed-s",
            "0.3",
            "--retain-parked-s",
            "0.6",
            "--retention-interval-s",
            "0.2",
        ],
    );
    let shared = Arc::new(Shared::default());
    let until = tokio::time::Instant::now() + Duration::from_secs(secs());
    let mut rng = Rng(seed);
    let mut tasks = Vec::new();
    for _ in 0..3 {
        let r = Rng(rng.below(u64::MAX));
        tasks.push(tokio::spawn(poster(
            gw.addr.clone(),
            shared.clone(),
            r,
            until,
        )));
    }
    for _ in 0..2 {
        let r = Rng(rng.below(u64::MAX));
        tasks.push(tokio::spawn(follower(gw.url(), shared.clone(), r, until)));
    }
    let r = Rng(rng.below(u64::MAX));
    tasks.push(tokio::spawn(eraser(gw.url(), shared.clone(), r, until)));
    for t in tasks {
        t.await.expect("chaos task");
    }
    let ids: Vec<String> = shared
        .sessions
        .lock()
        .expect("lock")
        .values()
        .cloned()
        .collect();
    let mut c = gw.client().await;
    let mut problems = shared.violations.lock().expect("lock").clone();
    problems.extend(check_store(&mut c, &ids, "live").await);
    gw.restart();
    let mut c = gw.client().await;
    problems.extend(check_store(&mut c, &ids, "after a restart").await);
    let (posts, streamed) = *shared.posts.lock().expect("lock");
    println!("erase chaos seed {seed}: {posts} posts, {streamed} streamed");
    assert!(problems.is_empty(), "seed {seed}: {problems:#?}");
    assert!(streamed > 0, "seed {seed}: no post was ever answered");
}

backends!(deleting_and_reusing_chat_ids_at_random_loses_nothing);
