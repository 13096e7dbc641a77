//! One gate for every door (docs/AUTHENTICATION.md), black-box: every
//! method of the method table and every route, walked against each rule a
//! token is held to: a token scoped to some sessions acting on another, an
//! expired token, a revoked one, and one over a limit. A combination the
//! docs refuse and the gateway allows fails the test, and so does a
//! method added to the table without a row here. A refused request
//! changes nothing: no session, no seed, no limit, no count.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;
#[path = "cluster/mod.rs"]
mod harness;
#[path = "gate/mint.rs"]
mod mint;
#[path = "jwt/support.rs"]
mod support;

use common::http::{http, Resp};
use common::{tempdir, Backend, Client, Gateway};
use mint::{ws_url, Signer};
use serde_json::{json, Value};
use support::{status, upgrade};

backends!(a_scoped_token_acts_on_no_other_session_through_any_method_or_route);

/// The params of `method` naming session `s` (or the profile-wide call);
/// `None` for a method this table does not know: a new method must be
/// given a row, and its rule decided, before the suite passes.
fn params_for(method: &str, s: &str, token: &str) -> Option<Value> {
    Some(match method {
        "gateway.ping" | "session.list" | "session.events.stats" => json!({}),
        "session.create" => json!({"title": "made by the scoped token"}),
        "session.resume" | "session.detach" | "session.presence" | "handoff.state" => {
            json!({"session_id": s})
        }
        "session.events.since" => json!({"session_id": s, "last_seen": 0}),
        "gateway.hello" => json!({"name": "guest"}),
        "handoff.claim" => json!({"target": "t"}),
        "handoff.complete" => json!({"handoff_id": "h_01JAAAAAAAAAAAAAAAAAAAAAAA"}),
        "handoff.fail" => json!({"handoff_id": "h_01JAAAAAAAAAAAAAAAAAAAAAAA", "error": "x"}),
        "gateway.refresh_token" => json!({"token": token}),
        "session.close" | "session.branch" | "session.interrupt" | "session.compress"
        | "session.delete" => json!({"session_id": s}),
        "prompt.submit" => json!({"session_id": s, "text": "from the scoped token"}),
        "handoff.request" => json!({"session_id": s, "target": "t"}),
        "session.rename" => json!({"session_id": s, "title": "renamed by the scoped token"}),
        _ => return None,
    })
}

/// Methods a scoped token may call whatever the session: they reach none
/// (`session.list` shows only its own).
const REACH_NOTHING: &[&str] = &[
    "gateway.ping",
    "gateway.hello",
    "gateway.refresh_token",
    "session.list",
];

/// What the owner sees of session `s`: its row as listed, and its events.
async fn state_of(owner: &mut Client, s: &str) -> (Value, Vec<Value>) {
    let list = owner
        .ok("session.list", json!({"include_closed": true}))
        .await;
    let row = list["sessions"]
        .as_array()
        .expect("sessions")
        .iter()
        .find(|r| r["session_id"] == s)
        .cloned()
        .unwrap_or(Value::Null);
    let mut row = row;
    // Who is attached right now is not the session's state.
    if let Some(o) = row.as_object_mut() {
        o.remove("peers");
    }
    (row, common::all_events(owner, s).await)
}

async fn rpc(addr: &str, token: &str, body: Value) -> Resp {
    http(
        addr,
        "POST",
        "/rpc",
        &[
            ("Authorization", &format!("Bearer {token}")),
            ("Content-Type", "application/json"),
        ],
        body.to_string().as_bytes(),
    )
    .await
}

async fn post_json(addr: &str, path: &str, token: &str, body: Value) -> Resp {
    http(
        addr,
        "POST",
        path,
        &[
            ("Authorization", &format!("Bearer {token}")),
            ("Content-Type", "application/json"),
        ],
        body.to_string().as_bytes(),
    )
    .await
}

async fn get(addr: &str, path: &str, token: &str) -> Resp {
    http(
        addr,
        "GET",
        path,
        &[("Authorization", &format!("Bearer {token}"))],
        b"",
    )
    .await
}

fn chat_body(id: &str, text: &str) -> Value {
    json!({"id": id, "messages": [
        {"id": "m0", "role": "user", "parts": [{"type": "text", "text": "the attacker's seed"}]},
        {"id": "m1", "role": "assistant", "parts": [{"type": "text", "text": "ok"}]},
        {"id": "m2", "role": "user", "parts": [{"type": "text", "text": text}]},
    ]})
}

fn run_body(thread: &str, text: &str) -> Value {
    json!({"threadId": thread, "runId": "r1", "messages": [
        {"id": "m0", "role": "user", "content": "the attacker's seed"},
        {"id": "m1", "role": "assistant", "content": "ok"},
        {"id": "m2", "role": "user", "content": text},
    ], "tools": [], "context": [], "state": {}, "forwardedProps": {}})
}

/// Every route that names a chat, with a chat of the token's own profile
/// it may not reach: each must answer as for a chat that does not exist.
async fn front_end_routes_refuse(addr: &str, token: &str) {
    let chat = "not-yours";
    for (path, body) in [
        ("/v1/ai-sdk/chat", chat_body(chat, "hi")),
        ("/v1/ag-ui", run_body(chat, "hi")),
        ("/v1/ai-sdk/chat/not-yours/stop", json!({})),
        ("/v1/ag-ui/threads/not-yours/stop", json!({})),
    ] {
        let r = post_json(addr, path, token, body).await;
        assert_eq!(
            r.status,
            404,
            "POST {path}: {}",
            String::from_utf8_lossy(&r.body)
        );
    }
    for path in [
        "/v1/ai-sdk/chat/not-yours/stream",
        "/v1/ai-sdk/chat/not-yours/messages",
        "/v1/ag-ui/threads/not-yours/events",
    ] {
        let r = get(addr, path, token).await;
        assert_eq!(
            r.status,
            404,
            "GET {path}: {}",
            String::from_utf8_lossy(&r.body)
        );
    }
}

async fn a_scoped_token_acts_on_no_other_session_through_any_method_or_route(b: Backend) {
    let dir = tempdir();
    let keys = Signer::new(dir.path(), "secret");
    let secret = keys.path();
    let gw = Gateway::start_on(
        &b,
        &dir.path().join("data"),
        &["--jwt-secret-file", &secret],
    );
    scoped_walk(&gw.addr, &gw.addr, &keys).await;
}

/// On a cluster the guest speaks to a node that only follows the sessions
/// (its writes are forwarded to the owner): the same answers, the same
/// nothing changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_a_scoped_token_acts_on_no_other_session_through_a_follower() {
    let dir = tempdir();
    let keys = Signer::new(dir.path(), "secret");
    let secret = keys.path();
    let Some(cluster) = harness::TestCluster::start_with(2, 1000, &["--jwt-secret-file", &secret])
    else {
        return;
    };
    scoped_walk(&cluster.nodes[0].addr, &cluster.nodes[1].addr, &keys).await;
}

/// The owner makes two sessions on the node at `owner_addr`; a token
/// scoped to the first walks every method and route at `addr`.
async fn scoped_walk(owner_addr: &str, addr: &str, keys: &Signer) {
    let owner_t = keys.token("alice", json!({}));
    let mut owner = Client::connect(&ws_url(owner_addr, &owner_t)).await;
    let shared = common::session(&mut owner).await;
    let other = common::session(&mut owner).await;
    let turn = common::submit(&mut owner, &other, "the owner's own").await;
    common::turn_events(&mut owner, &turn).await;
    let before = state_of(&mut owner, &other).await;
    let count = |list: &Value| list["sessions"].as_array().map_or(0, Vec::len);
    let sessions_before = count(
        &owner
            .ok("session.list", json!({"include_closed": true}))
            .await,
    );

    let link = keys.token("alice", json!({"sessions": [shared]}));
    let mut guest = Client::connect(&ws_url(addr, &link)).await;
    for method in tether_protocol::METHODS {
        let params = params_for(method, &other, &link)
            .unwrap_or_else(|| panic!("{method} has no row in the gate's table: decide its rule"));
        // Over the WebSocket, then over POST /rpc.
        let ws = guest.call(method, params.clone()).await;
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let r = rpc(addr, &link, body).await;
        assert_eq!(r.status, 200, "{method} over /rpc");
        let http = r.json();
        for (transport, answer) in [("ws", &ws), ("rpc", &http)] {
            if REACH_NOTHING.contains(method) {
                assert!(
                    answer.get("result").is_some(),
                    "{method} {transport}: {answer}"
                );
            } else {
                assert_eq!(
                    answer["error"]["code"], 4001,
                    "{method} over {transport} with a token scoped to another session: {answer}"
                );
            }
        }
        if *method == "session.list" {
            for answer in [&ws, &http] {
                let ids: Vec<&Value> = answer["result"]["sessions"]
                    .as_array()
                    .expect("sessions")
                    .iter()
                    .map(|r| &r["session_id"])
                    .collect();
                assert_eq!(ids, vec![&json!(shared)], "{answer}");
            }
        }
    }
    // The SSE route and every front-end route.
    let sse = common::http::Sse::open(
        addr,
        &format!("/v1/sessions/{other}/events?token={link}"),
        &[],
    )
    .await;
    assert_eq!(sse.err().map(|r| r.status), Some(404));
    front_end_routes_refuse(addr, &link).await;

    // Nothing the guest did changed the other session, or made one.
    assert_eq!(state_of(&mut owner, &other).await, before);
    let after = owner
        .ok("session.list", json!({"include_closed": true}))
        .await;
    assert_eq!(count(&after), sessions_before, "{after}");
    // The guest still has its own session, through the same methods.
    guest
        .ok(
            "session.resume",
            json!({"session_id": shared, "last_seen": 0}),
        )
        .await;
}

#[tokio::test]
async fn a_refused_first_request_of_a_chat_creates_nothing() {
    let dir = tempdir();
    let keys = Signer::new(dir.path(), "secret");
    let secret = keys.path();
    let gw = Gateway::start(&dir.path().join("data"), &["--jwt-secret-file", &secret]);
    let addr = gw.addr.as_str();
    let owner_t = keys.token("alice", json!({}));
    // A NUL in the prompt: refused (400) before its session is made.
    let r = post_json(
        addr,
        "/v1/ai-sdk/chat",
        &owner_t,
        chat_body("c1", "a\u{0}b"),
    )
    .await;
    assert_eq!(r.status, 400, "{}", String::from_utf8_lossy(&r.body));
    let r = post_json(addr, "/v1/ag-ui", &owner_t, run_body("t1", "a\u{0}b")).await;
    assert_eq!(r.status, 400, "{}", String::from_utf8_lossy(&r.body));
    let mut owner = Client::connect(&ws_url(addr, &owner_t)).await;
    let list = owner
        .ok("session.list", json!({"include_closed": true}))
        .await;
    assert_eq!(list["sessions"], json!([]), "{list}");
    // The transcript routes see no chat either.
    let r = get(addr, "/v1/ai-sdk/chat/c1/messages", &owner_t).await;
    assert_eq!((r.status, r.json()), (200, json!([])));
}

#[tokio::test]
async fn a_tokens_limits_are_its_own_and_a_refused_token_installs_none() {
    let dir = tempdir();
    let keys = Signer::new(dir.path(), "secret");
    let secret = keys.path();
    let gw = Gateway::start(
        &dir.path().join("data"),
        &[
            "--jwt-secret-file",
            &secret,
            "--profile-limit",
            "alice:connections=6",
        ],
    );
    let addr = gw.addr.as_str();
    let plain = keys.token("alice", json!({}));
    let zero = keys.token("alice", json!({"limits": {"connections": 0}}));
    let _one = Client::connect(&ws_url(addr, &plain)).await;
    // Refused at the door on every route that opens a connection...
    assert_eq!(status(addr, &upgrade(addr, &zero)).await, 429);
    let r = post_json(addr, "/v1/ai-sdk/chat", &zero, chat_body("c0", "hi")).await;
    assert_eq!(r.status, 429, "{}", String::from_utf8_lossy(&r.body));
    let r = post_json(addr, "/v1/ag-ui", &zero, run_body("t0", "hi")).await;
    assert_eq!(r.status, 429, "{}", String::from_utf8_lossy(&r.body));
    // ...and the profile's other tokens keep the profile's six.
    let mut more = Vec::new();
    for _ in 0..4 {
        more.push(Client::connect(&ws_url(addr, &plain)).await);
    }
    // Nothing was created by the refused streams.
    let list = more[0].ok("session.list", json!({})).await;
    assert_eq!(list["sessions"], json!([]), "{list}");

    // A token's request rate is its own: one over it is refused, the
    // profile's other tokens are not.
    let slow = keys.token("alice", json!({"limits": {"requests_per_s": 1}}));
    let mut s = Client::connect(&ws_url(addr, &slow)).await;
    s.send_text(
        &json!([
            {"jsonrpc": "2.0", "id": 1, "method": "gateway.ping"},
            {"jsonrpc": "2.0", "id": 2, "method": "gateway.ping"},
        ])
        .to_string(),
    )
    .await;
    let batch = s.next_frame().await;
    let codes: Vec<&Value> = batch
        .as_array()
        .expect("a batch answer")
        .iter()
        .map(|a| &a["error"]["code"])
        .collect();
    assert_eq!(codes, vec![&Value::Null, &json!(4290)], "{batch}");
    for _ in 0..20 {
        more[1].ok("gateway.ping", json!({})).await;
    }
}

#[tokio::test]
async fn front_end_streams_are_connections_of_their_profile() {
    let dir = tempdir();
    let keys = Signer::new(dir.path(), "secret");
    let secret = keys.path();
    let gw = Gateway::start(
        &dir.path().join("data"),
        &[
            "--jwt-secret-file",
            &secret,
            "--profile-limit",
            "alice:connections=1",
        ],
    );
    let addr = gw.addr.as_str();
    let t = keys.token("alice", json!({}));
    let _full = Client::connect(&ws_url(addr, &t)).await;
    let r = post_json(addr, "/v1/ai-sdk/chat", &t, chat_body("c1", "hi")).await;
    assert_eq!(r.status, 429, "{}", String::from_utf8_lossy(&r.body));
    assert!(r.header("retry-after").is_some());
    let r = post_json(addr, "/v1/ag-ui", &t, run_body("t1", "hi")).await;
    assert_eq!(r.status, 429, "{}", String::from_utf8_lossy(&r.body));
    // A refused stream made no session.
    let list = rpc(
        addr,
        &t,
        json!({"jsonrpc": "2.0", "id": 1, "method": "session.list", "params": {}}),
    )
    .await
    .json();
    assert_eq!(list["result"]["sessions"], json!([]), "{list}");
}

/// Every method over `POST /rpc`, and every route, with `token`: each
/// must be refused at the door (401), whatever it names.
async fn every_door_refuses(addr: &str, token: &str, session: &str, why: &str) {
    for method in tether_protocol::METHODS {
        let params = params_for(method, session, token)
            .unwrap_or_else(|| panic!("{method} has no row in the gate's table: decide its rule"));
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let r = rpc(addr, token, body).await;
        assert_eq!(r.status, 401, "{method} with {why}");
    }
    assert_eq!(
        status(addr, &upgrade(addr, token)).await,
        401,
        "/ws with {why}"
    );
    for (path, body) in [
        ("/v1/ai-sdk/chat", chat_body("c", "hi")),
        ("/v1/ag-ui", run_body("c", "hi")),
        ("/v1/ai-sdk/chat/c/stop", json!({})),
        ("/v1/ag-ui/threads/c/stop", json!({})),
    ] {
        assert_eq!(
            post_json(addr, path, token, body).await.status,
            401,
            "{path} with {why}"
        );
    }
    for path in [
        format!("/v1/sessions/{session}/events"),
        "/v1/ai-sdk/chat/c/stream".into(),
        "/v1/ai-sdk/chat/c/messages".into(),
        "/v1/ag-ui/threads/c/events".into(),
        "/metrics".into(),
    ] {
        assert_eq!(
            get(addr, &path, token).await.status,
            401,
            "{path} with {why}"
        );
    }
}

#[tokio::test]
async fn expired_and_revoked_tokens_pass_no_door() {
    let dir = tempdir();
    let keys = Signer::new(dir.path(), "secret");
    let file = dir.path().join("tether.toml");
    let config = |tokens: &str| {
        format!(
            "token = [{tokens}]\njwt_secret_file = {:?}\njwt_leeway_s = 0\n",
            keys.path()
        )
    };
    std::fs::write(
        &file,
        config(r#""alice:alice-static", "alice:owner-static""#),
    )
    .expect("write");
    let path = file.to_string_lossy().into_owned();
    let gw = Gateway::start(&dir.path().join("data"), &["--config", &path]);
    let addr = gw.addr.as_str();
    let mut owner = Client::connect(&ws_url(addr, "owner-static")).await;
    let s = common::session(&mut owner).await;
    let before = state_of(&mut owner, &s).await;

    // Expired: a second ago.
    let expired = keys.sign(json!({"sub": "alice", "exp": mint::now() - 1}));
    every_door_refuses(addr, &expired, &s, "an expired token").await;

    // Revoked: a static token removed and the JWT key withdrawn; live
    // connections holding them are closed 4403.
    let jwt = keys.token("alice", json!({}));
    let mut by_static = Client::connect(&ws_url(addr, "alice-static")).await;
    let mut by_jwt = Client::connect(&ws_url(addr, &jwt)).await;
    std::fs::write(&file, config(r#""alice:owner-static""#)).expect("write");
    let _rotated = Signer::new(dir.path(), "secret");
    gw.signal("HUP");
    assert_eq!(by_static.expect_close().await, 4403);
    assert_eq!(by_jwt.expect_close().await, 4403);
    every_door_refuses(addr, "alice-static", &s, "a removed static token").await;
    every_door_refuses(addr, &jwt, &s, "a JWT whose key was withdrawn").await;

    // None of it changed the session, or made one.
    assert_eq!(state_of(&mut owner, &s).await, before);
    let list = owner
        .ok("session.list", json!({"include_closed": true}))
        .await;
    assert_eq!(list["sessions"].as_array().map(Vec::len), Some(1), "{list}");
}
