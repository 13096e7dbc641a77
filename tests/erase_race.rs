//! Deletion and retention racing the clients that use the same ids,
//! black-box, on both stores.
//!
//! - A closed chat with tens of thousands of events is erased (by
//!   `session.delete`, or by retention's closed rule) while the same chat id
//!   is posted again and again. The new chat's session never shares the id
//!   with the old one's erase: every post is answered with a stream or a
//!   clear 4xx (never a storage failure), and afterwards, and after a
//!   restart, the session under the id holds events `1..=latest_seq` with
//!   no gap.
//! - A parked session that a client resumes and prompts while retention's
//!   parked rule is sweeping stays open: retention decides on the session's
//!   state when it acts, not on what its query saw.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

/// A post's bound: the call timeout (a create waits for the id's erase)
/// and a margin for a loaded machine.
const POST_WAIT: std::time::Duration = std::time::Duration::from_secs(45);

use std::time::{Duration, Instant};

use common::http::http_within;
use common::{tempdir, Backend, Client, Gateway};
use serde_json::{json, Value};

/// Seed messages of the first request: with the events of its turn, the
/// old life holds this many events and more, erased 2,000 a transaction.
const SEEDED: usize = 30_000;

/// The request body of the AI SDK's transport: `messages` then the prompt.
fn chat_body(chat: &str, seed: usize, prompt: &str) -> Vec<u8> {
    let mut messages: Vec<Value> = (0..seed)
        .map(|i| {
            let role = if i % 2 == 0 { "user" } else { "assistant" };
            json!({"id": format!("m{i}"), "role": role,
                   "parts": [{"type": "text", "text": format!("old {i}")}]})
        })
        .collect();
    messages.push(json!({"id": format!("p-{prompt}"), "role": "user",
                         "parts": [{"type": "text", "text": prompt}]}));
    json!({"id": chat, "messages": messages, "trigger": "submit-message"})
        .to_string()
        .into_bytes()
}

/// One POST of the chat; its status, and the session id it names.
async fn post_chat(addr: &str, body: &[u8]) -> (u16, Option<String>, String) {
    let r = http_within(
        POST_WAIT,
        addr,
        "POST",
        "/v1/ai-sdk/chat",
        &[("Content-Type", "application/json")],
        body,
    )
    .await;
    let session = r
        .headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("x-tether-session-id"))
        .map(|(_, v)| v.clone());
    (r.status, session, String::from_utf8_lossy(&r.body).into())
}

/// The seqs stored for `id` from seq 1, its `latest_seq`, and whether it
/// is there at all.
async fn stored(c: &mut Client, id: &str) -> (Vec<u64>, u64, bool) {
    match common::stored_events(c, id).await {
        Some((events, latest)) => (
            events.iter().filter_map(|e| e["seq"].as_u64()).collect(),
            latest,
            true,
        ),
        None => (Vec::new(), 0, false),
    }
}

/// The session under the chat's id, if any, holds exactly `1..=latest_seq`.
async fn assert_whole(c: &mut Client, id: &str, when: &str) {
    let (seqs, latest, found) = stored(c, id).await;
    if !found {
        return;
    }
    let want: Vec<u64> = (1..=latest).collect();
    assert!(
        seqs == want,
        "{when}: the session under the reused id holds {} events for latest_seq {latest} \
         (first {:?}, last {:?})",
        seqs.len(),
        seqs.first(),
        seqs.last()
    );
}

/// Posts the chat id in a loop from `workers` tasks until `until` says
/// stop; every answer must be a stream or a clear client error.
async fn post_while(addr: String, chat: &'static str, stop: tokio::sync::watch::Receiver<bool>) {
    let mut i = 0;
    while !*stop.borrow() {
        i += 1;
        let (status, _, text) = post_chat(&addr, &chat_body(chat, 0, &format!("new {i}"))).await;
        assert!(
            status == 200 || (400..500).contains(&status),
            "a post of the reused chat id answered {status}: {text}"
        );
    }
}

/// The old life: a chat of [`SEEDED`] messages, closed.
async fn closed_big_chat(gw: &Gateway, chat: &str) -> String {
    let (status, session, text) = post_chat(&gw.addr, &chat_body(chat, SEEDED, "first")).await;
    assert_eq!(status, 200, "{text}");
    let id = session.expect("x-tether-session-id");
    let mut c = gw.client().await;
    c.ok("session.close", json!({"session_id": id})).await;
    id
}

async fn a_deleted_chat_id_posted_again_keeps_every_event(backend: Backend) {
    let dir = tempdir();
    let mut gw = Gateway::start_on(&backend, dir.path(), &["--max-frame-bytes", "16777216"]);
    let chat = "reused-chat";
    let id = closed_big_chat(&gw, chat).await;

    let (stop, stopped) = tokio::sync::watch::channel(false);
    let posters: Vec<_> = (0..3)
        .map(|_| tokio::spawn(post_while(gw.addr.clone(), chat, stopped.clone())))
        .collect();
    let mut c = gw.client().await;
    let deleted = c.call("session.delete", json!({"session_id": id})).await;
    assert!(
        deleted["result"]["deleted"] == true || deleted["error"]["code"] == 4001,
        "{deleted}"
    );
    // A few more rounds of posts after the erase, on the id now free.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let _ = stop.send(true);
    for p in posters {
        p.await.expect("poster");
    }
    let (status, _, text) = post_chat(&gw.addr, &chat_body(chat, 0, "last")).await;
    assert_eq!(status, 200, "{text}");
    assert_whole(&mut c, &id, "after the erase").await;
    gw.restart();
    let mut c = gw.client().await;
    assert_whole(&mut c, &id, "after a restart").await;
    let (seqs, _, found) = stored(&mut c, &id).await;
    assert!(found && !seqs.is_empty(), "the new chat is there");
}

async fn retention_erasing_a_chat_id_posted_again_keeps_every_event(backend: Backend) {
    let dir = tempdir();
    let mut gw = Gateway::start_on(
        &backend,
        dir.path(),
        &[
            "--max-frame-bytes",
            "16777216",
            "--retain-closed-s",
            "0.5",
            "--retention-interval-s",
            "0.2",
        ],
    );
    let chat = "retained-chat";
    let id = closed_big_chat(&gw, chat).await;
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let posters: Vec<_> = (0..3)
        .map(|_| tokio::spawn(post_while(gw.addr.clone(), chat, stopped.clone())))
        .collect();
    // Long enough for a sweep to erase the closed chat while it is posted.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let _ = stop.send(true);
    for p in posters {
        p.await.expect("poster");
    }
    let mut c = gw.client().await;
    assert_whole(&mut c, &id, "after retention's erase").await;
    gw.restart();
    let mut c = gw.client().await;
    assert_whole(&mut c, &id, "after a restart").await;
}

/// The sessions' statuses in one listing, by id.
async fn statuses(c: &mut Client) -> std::collections::HashMap<String, Value> {
    let listed = c
        .ok(
            "session.list",
            json!({"include_closed": true, "limit": 500}),
        )
        .await;
    listed["sessions"]
        .as_array()
        .expect("sessions")
        .iter()
        .map(|s| {
            let id = s["session_id"].as_str().expect("id").to_string();
            (id, s["status"].clone())
        })
        .collect()
}

/// A client comes back to `id`: resumes it attached and sends a prompt.
/// `None` if it was closed before the client came back.
async fn come_back(url: String, id: String) -> Option<(String, Client)> {
    let mut c = Client::connect(&url).await;
    let resumed = c
        .call("session.resume", json!({"session_id": id, "last_seen": 0}))
        .await;
    if resumed["error"]["code"] == 4002 {
        return None;
    }
    assert!(resumed["result"]["session"].is_object(), "{resumed}");
    let submitted = c
        .call("prompt.submit", json!({"session_id": id, "text": "back"}))
        .await;
    if submitted["error"]["code"] == 4002 {
        return None;
    }
    assert!(submitted["result"]["turn_id"].is_string(), "{submitted}");
    Some((id, c))
}

async fn retention_does_not_close_a_session_a_client_came_back_to(backend: Backend) {
    // One sweep's batch (200 by default): it closes them one after another,
    // oldest first, and the newest are resumed while it does.
    const SESSIONS: usize = 200;
    const BACK: usize = 40;
    let dir = tempdir();
    let mut gw = Gateway::start_on(&backend, dir.path(), &["--orphan-grace-s", "0"]);
    let mut c = gw.client().await;
    let mut ids = Vec::new();
    for i in 0..SESSIONS {
        let created = c
            .ok(
                "session.create",
                json!({"title": format!("parked {i}"), "attach": false}),
            )
            .await;
        ids.push(
            created["session"]["session_id"]
                .as_str()
                .expect("id")
                .to_string(),
        );
    }
    let started = Instant::now();
    while statuses(&mut c)
        .await
        .values()
        .filter(|s| **s == "parked")
        .count()
        < SESSIONS
    {
        assert!(started.elapsed() < Duration::from_secs(30), "never parked");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(c);
    gw.terminate();

    // The parked rule on: the sweep at start-up finds them too young; the
    // next, three seconds on, closes them all unless they are in use. Same
    // store: the first gateway's database, which lives as long as it.
    let url = gw.database_url().map(str::to_string);
    let mut args = vec![
        "--orphan-grace-s",
        "0",
        "--retain-parked-s",
        "2",
        "--retention-interval-s",
        "3",
    ];
    if let Some(url) = &url {
        args.extend(["--database-url", url.as_str()]);
    }
    let first = gw;
    let gw = Gateway::start(dir.path(), &args);
    let up = Instant::now();
    let mut q = gw.client().await;
    // Whatever the sweep at start-up closed is left aside.
    tokio::time::sleep(Duration::from_millis(2500).saturating_sub(up.elapsed())).await;
    let before = statuses(&mut q).await;
    let early = |id: &String| before.get(id) == Some(&json!("closed"));
    // The second sweep's first close: the clients of the newest come back.
    loop {
        let now = statuses(&mut q).await;
        if ids
            .iter()
            .any(|id| !early(id) && now.get(id) == Some(&json!("closed")))
        {
            break;
        }
        assert!(
            up.elapsed() < Duration::from_secs(20),
            "no sweep closed anything"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let back: Vec<_> = ids[SESSIONS - BACK..]
        .iter()
        .filter(|id| !early(id))
        .map(|id| tokio::spawn(come_back(gw.url(), id.clone())))
        .collect();
    let mut clients = Vec::new();
    for task in back {
        if let Some(back) = task.await.expect("client") {
            clients.push(back);
        }
    }
    assert!(
        !clients.is_empty(),
        "no client came back before retention closed its session"
    );
    // The sweep finishes, and the next one runs, while they stay attached.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let after = statuses(&mut q).await;
    for (id, c) in &mut clients {
        assert_ne!(
            after.get(id.as_str()),
            Some(&json!("closed")),
            "retention closed {id}, resumed and prompted by an attached client"
        );
        let events = common::all_events(c, id).await;
        assert!(
            !events.iter().any(|e| e["type"] == "session.closed"),
            "{id} was closed under its client"
        );
        assert!(
            !events
                .iter()
                .any(|e| e["payload"]["failure_reason"] == "session_closed"),
            "{id}'s turn was ended by a close"
        );
    }
    println!(
        "{} of {BACK} clients came back in time; none of their sessions closed",
        clients.len()
    );
    drop(gw);
    drop(first);
}

backends!(
    a_deleted_chat_id_posted_again_keeps_every_event,
    retention_erasing_a_chat_id_posted_again_keeps_every_event,
    retention_does_not_close_a_session_a_client_came_back_to,
);
