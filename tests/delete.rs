//! `session.delete`, black-box, on both stores: the session is erased with
//! its events, its attached peers get `session.deleted`, every route then
//! answers 4001 / not found for it (WebSocket, `POST /rpc`, SSE,
//! `session.events.since`, `session.list`), its branches lose their link to
//! it and nothing else; a second delete is 4001; another profile cannot
//! delete it. On SQLite the marker written into it is gone from the
//! database file once the gateway is stopped and the store vacuumed. On a
//! cluster a delete sent through a node that only follows the session runs
//! on its owner, and both nodes then answer 4001 for it; a third node whose
//! peers follow the session tells them `session.deleted` too, and answers
//! 4001 for it on every route from then on, even when that node missed the
//! store's notification (it learns of the delete on its listener's resync).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;
#[path = "cluster/mod.rs"]
mod harness;

use std::path::Path;
use std::process::Command;

use common::http::{http, Sse};
use common::{all_events, session_with, submit, tempdir, turn_events, Backend, Gateway};
use serde_json::{json, Value};

const MARKER: &str = "zq-deleted-marker-7f3a9";

/// `POST /rpc` of one request; the whole JSON-RPC answer.
async fn rpc(addr: &str, method: &str, params: Value) -> Value {
    let body = json!({"jsonrpc":"2.0","id":1,"method":method,"params":params}).to_string();
    let r = http(
        addr,
        "POST",
        "/rpc",
        &[("Content-Type", "application/json")],
        body.as_bytes(),
    )
    .await;
    assert_eq!(r.status, 200);
    r.json()
}

/// Whether `needle` occurs anywhere in the file at `path` (false if absent).
fn file_holds(path: &Path, needle: &str) -> bool {
    match std::fs::read(path) {
        Ok(bytes) => bytes.windows(needle.len()).any(|w| w == needle.as_bytes()),
        Err(_) => false,
    }
}

/// Runs `tether ARGS` to completion; its exit code and output.
fn tether(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tether"))
        .args(args)
        .env_remove("TETHER_DATABASE_URL")
        .output()
        .expect("run tether");
    (
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

async fn deleted_everywhere(backend: Backend) {
    let dir = tempdir();
    let mut gw = Gateway::start_on(&backend, dir.path(), &[]);
    let mut c = gw.client().await;
    let id = session_with(&mut c, json!({"title": format!("title {MARKER}")})).await;
    let t = submit(&mut c, &id, &format!("prompt {MARKER}")).await;
    turn_events(&mut c, &t).await;
    // A branch of it, and a session that has nothing to do with it.
    let branch = c.ok("session.branch", json!({"session_id": id})).await["session"]["session_id"]
        .as_str()
        .expect("branch id")
        .to_string();
    let mut other = gw.client().await;
    let kept = session_with(&mut other, json!({"title": "kept"})).await;

    // A second peer attached to it, which must be told.
    let mut watcher = gw.client().await;
    watcher
        .ok(
            "session.resume",
            json!({"session_id": id, "attach": true, "omit_messages": true}),
        )
        .await;
    // Another profile cannot delete it (nor learn it exists).
    let e = other
        .err(
            "session.delete",
            json!({"session_id": id, "profile": "mallory"}),
        )
        .await;
    assert_eq!(e["code"], 4001, "{e}");

    if backend == Backend::Sqlite {
        // Written: the search below would find it.
        let holds = ["tether.db", "tether.db-wal"]
            .iter()
            .any(|f| file_holds(&dir.path().join(f), MARKER));
        assert!(holds, "the marker is in the store before the delete");
    }
    let r = c.ok("session.delete", json!({"session_id": id})).await;
    assert_eq!(r, json!({"deleted": true}));
    let told = watcher.next_event().await;
    assert_eq!(told["type"], "session.deleted", "{told}");
    assert_eq!(told["session_id"], id.as_str(), "{told}");
    assert!(told.get("seq").is_none(), "not a stored event: {told}");

    // Every route: 4001 or not found.
    for (method, params) in [
        ("session.resume", json!({"session_id": id})),
        (
            "session.events.since",
            json!({"session_id": id, "last_seen": 0}),
        ),
        ("prompt.submit", json!({"session_id": id, "text": "again"})),
        ("session.rename", json!({"session_id": id, "title": "x"})),
        ("session.close", json!({"session_id": id})),
        ("session.branch", json!({"session_id": id})),
        ("session.delete", json!({"session_id": id})),
    ] {
        let e = other.err(method, params.clone()).await;
        assert_eq!(e["code"], 4001, "{method}: {e}");
        let v = rpc(&gw.addr, method, params).await;
        assert_eq!(v["error"]["code"], 4001, "POST /rpc {method}: {v}");
    }
    match Sse::open(&gw.addr, &format!("/v1/sessions/{id}/events"), &[]).await {
        Err(resp) => assert_eq!(resp.status, 404, "SSE of a deleted session"),
        Ok(_) => panic!("SSE of a deleted session opened"),
    }
    let listed = other
        .ok("session.list", json!({"include_closed": true}))
        .await;
    let ids: Vec<&str> = listed["sessions"]
        .as_array()
        .expect("sessions")
        .iter()
        .map(|s| s["session_id"].as_str().expect("id"))
        .collect();
    assert!(!ids.contains(&id.as_str()), "{listed}");
    assert!(
        ids.contains(&kept.as_str()) && ids.contains(&branch.as_str()),
        "{listed}"
    );
    // The branch lives on, unlinked, with its own copy of the history.
    let b = other
        .ok(
            "session.resume",
            json!({"session_id": branch, "attach": false}),
        )
        .await;
    assert_eq!(b["session"]["parent_session_id"], Value::Null, "{b}");
    assert!(!all_events(&mut other, &branch).await.is_empty());

    // After a restart too, in the same epoch: a delete is not lost history.
    let epoch = c.epoch();
    drop((c, other, watcher));
    gw.terminate();
    if backend == Backend::Sqlite {
        // The branch copied the marker; delete it too, then no byte of it
        // is left in the file once vacuumed.
        gw.restart();
        let mut c = gw.client().await;
        c.ok("session.delete", json!({"session_id": branch})).await;
        gw.terminate();
        let data_dir = dir.path().to_str().expect("utf-8");
        let (code, out) = tether(&["admin", "vacuum", "--data-dir", data_dir]);
        assert_eq!(code, 0, "{out}");
        for file in ["tether.db", "tether.db-wal"] {
            assert!(
                !file_holds(&dir.path().join(file), MARKER),
                "{file} still holds the deleted session's bytes"
            );
        }
    }
    gw.restart();
    let mut c = gw.client().await;
    assert_eq!(c.epoch(), epoch);
    let e = c.err("session.resume", json!({"session_id": id})).await;
    assert_eq!(e["code"], 4001, "{e}");
    c.ok(
        "session.resume",
        json!({"session_id": kept, "attach": false}),
    )
    .await;
}

/// A session is deleted while a turn runs: the turn still ends with its
/// one `message.complete`, which the peer gets before `session.deleted`.
async fn a_running_turn_ends_before_the_delete(backend: Backend) {
    let dir = tempdir();
    let host = format!(
        "{} host --engine echo --delay-ms 200",
        env!("CARGO_BIN_EXE_tether")
    );
    let gw = Gateway::start_on(&backend, dir.path(), &["--host-command", host.as_str()]);
    let mut c = gw.client().await;
    let id = session_with(&mut c, json!({"title": "busy"})).await;
    let t = submit(&mut c, &id, "a long answer").await;
    let mut d = gw.client().await;
    let r = d.ok("session.delete", json!({"session_id": id})).await;
    assert_eq!(r["deleted"], true);
    let mut completes = 0;
    loop {
        let e = c.next_event().await;
        if e["type"] == "message.complete" {
            assert_eq!(e["turn_id"], t.as_str(), "{e}");
            completes += 1;
        }
        if e["type"] == "session.deleted" {
            break;
        }
    }
    assert_eq!(completes, 1, "the turn ends exactly once");
}

backends!(deleted_everywhere, a_running_turn_ends_before_the_delete);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_through_a_follower_runs_on_the_owner() {
    let Some(cluster) = harness::TestCluster::start(2, 2000) else {
        return;
    };
    let (mut owner, mut follower, id) = harness::clients::owner_and_follower(&cluster).await;
    let r = follower
        .ok("session.delete", json!({"session_id": id}))
        .await;
    assert_eq!(r, json!({"deleted": true}));
    for peer in [&mut owner, &mut follower] {
        let told = peer.next_event().await;
        assert_eq!(told["type"], "session.deleted", "{told}");
    }
    for node in &cluster.nodes {
        let mut c = node.client().await;
        let e = c.err("session.resume", json!({"session_id": id})).await;
        assert_eq!(e["code"], 4001, "{e}");
        let e = c
            .err(
                "session.events.since",
                json!({"session_id": id, "last_seen": 0}),
            )
            .await;
        assert_eq!(e["code"], 4001, "{e}");
    }
}

/// Events of `c` until `session.deleted` (returned), skipping the rest.
async fn until_deleted(c: &mut common::Client) -> Value {
    loop {
        let e = c.next_event().await;
        if e["type"] == "session.deleted" {
            return e;
        }
    }
}

/// SSE events of `s` until `session.deleted` (its data).
async fn sse_until_deleted(s: &mut Sse) -> Value {
    loop {
        let e = s.event().await;
        if e.event.as_deref() == Some("session.deleted") {
            return e.params();
        }
    }
}

/// Three nodes: the owner (node 0) with a peer, a delete sent through node
/// 1 (which has never seen the session), and node 2 with a peer attached
/// and an SSE stream open, both served by a follower there. Every node's
/// peers get `session.deleted`, and every node then answers 4001 / 404
/// for the session on every route.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_third_nodes_follower_learns_of_a_delete() {
    let Some(cluster) = harness::TestCluster::start(3, 2000) else {
        return;
    };
    let mut owner = cluster.nodes[0].client().await;
    let id = session_with(&mut owner, json!({"title": "three nodes"})).await;
    let t = submit(&mut owner, &id, "before the delete").await;
    turn_events(&mut owner, &t).await;
    let mut third = cluster.nodes[2].client().await;
    third
        .ok(
            "session.resume",
            json!({"session_id": id, "attach": true, "omit_messages": true}),
        )
        .await;
    let mut stream = Sse::open(
        &cluster.nodes[2].addr,
        &format!("/v1/sessions/{id}/events"),
        &[],
    )
    .await
    .unwrap_or_else(|r| panic!("SSE through the third node: {}", r.status));

    let mut sender = cluster.nodes[1].client().await;
    let r = sender.ok("session.delete", json!({"session_id": id})).await;
    assert_eq!(r, json!({"deleted": true}));
    let told = until_deleted(&mut owner).await;
    assert_eq!(told["session_id"], id.as_str(), "{told}");
    let told = until_deleted(&mut third).await;
    assert_eq!(told["session_id"], id.as_str(), "{told}");
    assert!(told.get("seq").is_none(), "not a stored event: {told}");
    let told = sse_until_deleted(&mut stream).await;
    assert_eq!(told["session_id"], id.as_str(), "{told}");

    for node in &cluster.nodes {
        let mut c = node.client().await;
        for (method, params) in [
            ("session.resume", json!({"session_id": id})),
            (
                "session.events.since",
                json!({"session_id": id, "last_seen": 0}),
            ),
            ("prompt.submit", json!({"session_id": id, "text": "again"})),
            ("session.close", json!({"session_id": id})),
            ("session.delete", json!({"session_id": id})),
        ] {
            let e = c.err(method, params.clone()).await;
            assert_eq!(e["code"], 4001, "node {}: {method}: {e}", node.addr);
            let v = rpc(&node.addr, method, params).await;
            assert_eq!(
                v["error"]["code"], 4001,
                "node {}: POST /rpc {method}: {v}",
                node.addr
            );
        }
        match Sse::open(&node.addr, &format!("/v1/sessions/{id}/events"), &[]).await {
            Err(resp) => assert_eq!(resp.status, 404, "SSE of a deleted session"),
            Ok(_) => panic!("SSE of a deleted session opened on {}", node.addr),
        }
    }
}

/// The local ports of `pid`'s TCP connections to port `remote_port`
/// (`/proc/PID/fd` and `/proc/net/tcp`): how the database names them.
fn ports_to(pid: u32, remote_port: u16) -> Vec<i32> {
    let inodes: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("the node's descriptors")
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|l| {
            let l = l.to_string_lossy().into_owned();
            Some(l.strip_prefix("socket:[")?.strip_suffix(']')?.to_string())
        })
        .collect();
    let mut ports = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = std::fs::read_to_string(table).unwrap_or_default();
        for line in text.lines().skip(1) {
            let cols: Vec<&str> = line.split_whitespace().collect();
            let port = |addr: &str| {
                addr.rsplit_once(':')
                    .and_then(|(_, p)| u16::from_str_radix(p, 16).ok())
            };
            if cols.len() > 9
                && port(cols[2]) == Some(remote_port)
                && inodes.iter().any(|i| i == cols[9])
            {
                ports.extend(port(cols[1]).map(i32::from));
            }
        }
    }
    ports
}

/// A follower whose node missed the delete's notification (its listening
/// connection was cut while the node was paused, and the delete committed
/// before it came back) learns of it from the resync that follows its
/// reconnect: its peer gets `session.deleted`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_that_missed_the_notification_learns_of_the_delete_on_resync() {
    use sqlx::Connection;
    let Some(cluster) = harness::TestCluster::start(2, 2000) else {
        return;
    };
    let (mut owner, mut follower, id) = harness::clients::owner_and_follower(&cluster).await;
    let url = cluster.database_url().to_string();
    let db_port: u16 = url
        .rsplit_once('@')
        .and_then(|(_, host)| host.split(['/', '?']).next())
        .and_then(|hp| hp.rsplit_once(':'))
        .and_then(|(_, p)| p.parse().ok())
        .expect("the database's port");
    let node = &cluster.nodes[1];
    let ports = ports_to(node.pid().expect("running"), db_port);
    node.signal("STOP");
    let mut db = sqlx::PgConnection::connect(&url).await.expect("connect");
    let cut: Vec<bool> = sqlx::query_scalar(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE client_port = ANY($1) AND query LIKE 'LISTEN%'",
    )
    .bind(&ports)
    .fetch_all(&mut db)
    .await
    .expect("cut the listener");
    let r = owner
        .call("session.delete", json!({"session_id": id}))
        .await;
    node.signal("CONT");
    assert_eq!(cut, [true], "the paused node's listening connection");
    assert_eq!(r["result"], json!({"deleted": true}), "{r}");
    let told = until_deleted(&mut follower).await;
    assert_eq!(told["session_id"], id.as_str(), "{told}");
    let mut c = node.client().await;
    let e = c.err("session.resume", json!({"session_id": id})).await;
    assert_eq!(e["code"], 4001, "{e}");
    let _ = db.close().await;
}
