//! A token's clock and its revocation, the same on every door
//! (docs/AUTHENTICATION.md), black-box: the instant a token ends (`exp`
//! plus the leeway) both refuses the upgrade and closes the live
//! connection; a time claim with a fraction is honoured and one that is
//! not a number refuses the token; `crit` naming an extension refuses it;
//! and the front-end streams end at their token's expiry or revocation,
//! first saying why in their own protocol.
//!
//! `exp` is in seconds, so these tests wait a few.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;
#[path = "gate/mint.rs"]
mod mint;
#[path = "gate/stream.rs"]
mod stream;
#[path = "jwt/support.rs"]
mod support;

use common::{tempdir, Client, Gateway};
use mint::{now, ws_url, Signer};
use serde_json::{json, Value};
use stream::Stream;
use support::{status, upgrade};

/// A gateway taking HMAC tokens with `leeway_s`, its echo engine slow
/// enough (40 ms a word) that a turn outlives a token.
fn start(dir: &std::path::Path, secret: &str, leeway_s: &str, extra: &[&str]) -> Gateway {
    let host = format!(
        "{} host --engine echo --delay-ms 40",
        env!("CARGO_BIN_EXE_tether")
    );
    let mut args = vec![
        "--host-command",
        host.as_str(),
        "--jwt-secret-file",
        secret,
        "--jwt-leeway-s",
        leeway_s,
        "--token-expiring-s",
        "0",
    ];
    args.extend_from_slice(extra);
    Gateway::start(&dir.join("data"), &args)
}

#[tokio::test]
async fn the_upgrade_is_refused_from_the_instant_the_live_connection_is_closed() {
    let dir = tempdir();
    let keys = Signer::new(dir.path(), "secret");
    let gw = start(dir.path(), &keys.path(), "2", &[]);
    let addr = gw.addr.as_str();
    let exp = now() + 2;
    let token = keys.sign(json!({"sub": "alice", "exp": exp}));
    let mut c = Client::connect(&ws_url(addr, &token)).await;
    assert_eq!(c.expect_close().await, 4401);
    // The leeway held the connection open past `exp`; it is over now,
    // at the door too: a client reconnecting with it is refused.
    assert!(now() >= exp + 2, "closed before exp + leeway");
    assert_eq!(status(addr, &upgrade(addr, &token)).await, 401);
}

#[tokio::test]
async fn a_fractional_exp_is_honoured_on_the_door_the_refresh_and_the_clock() {
    let dir = tempdir();
    let keys = Signer::new(dir.path(), "secret");
    let gw = start(dir.path(), &keys.path(), "0", &[]);
    let addr = gw.addr.as_str();
    let exp = now() + 3;
    let first = keys.sign(json!({"sub": "alice", "exp": exp as f64 + 0.5}));
    let mut c = Client::connect(&ws_url(addr, &first)).await;
    let again = keys.sign(json!({"sub": "alice", "exp": exp as f64 + 0.25}));
    let r = c.ok("gateway.refresh_token", json!({"token": again})).await;
    assert_eq!(r["expires_at"], exp, "{r}");
    assert_eq!(c.expect_close().await, 4401);
    // Already past: refused at the door.
    let past = keys.sign(json!({"sub": "alice", "exp": now() as f64 - 0.5}));
    assert_eq!(status(addr, &upgrade(addr, &past)).await, 401);
}

#[tokio::test]
async fn time_claims_that_are_not_numbers_and_unknown_crit_refuse_the_token() {
    let dir = tempdir();
    let keys = Signer::new(dir.path(), "secret");
    let gw = start(dir.path(), &keys.path(), "0", &[]);
    let addr = gw.addr.as_str();
    let exp = now() + 3600;
    for (why, token) in [
        (
            "string nbf",
            keys.sign(json!({"sub": "a", "exp": exp, "nbf": "0"})),
        ),
        (
            "string iat",
            keys.sign(json!({"sub": "a", "exp": exp, "iat": "0"})),
        ),
        (
            "string exp",
            keys.sign(json!({"sub": "a", "exp": exp.to_string()})),
        ),
        (
            "null nbf",
            keys.sign(json!({"sub": "a", "exp": exp, "nbf": null})),
        ),
        (
            "crit",
            keys.sign_with(
                json!({"crit": ["b64"], "b64": true}),
                json!({"sub": "a", "exp": exp}),
            ),
        ),
        (
            "crit unknown",
            keys.sign_with(
                json!({"crit": ["x-tether-none"]}),
                json!({"sub": "a", "exp": exp}),
            ),
        ),
    ] {
        assert_eq!(status(addr, &upgrade(addr, &token)).await, 401, "{why}");
    }
    for (why, token) in [
        ("plain", keys.sign(json!({"sub": "a", "exp": exp}))),
        ("fractions", keys.sign(json!({"sub": "a", "exp": exp as f64 + 0.5, "iat": now() as f64 - 0.5, "nbf": now() as f64 - 0.5}))),
        ("empty crit", keys.sign_with(json!({"crit": []}), json!({"sub": "a", "exp": exp}))),
    ] {
        assert_eq!(status(addr, &upgrade(addr, &token)).await, 101, "{why}");
    }
}

/// A prompt long enough to outlive the tests' tokens (40 ms a word).
fn long_prompt() -> String {
    (0..400)
        .map(|i| format!("w{i}"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn chat_body(id: &str) -> Value {
    json!({"id": id, "messages": [{"id": "m1", "role": "user", "parts": [{"type": "text", "text": long_prompt()}]}]})
}

fn run_body(thread: &str) -> Value {
    json!({"threadId": thread, "runId": "r1", "messages": [{"id": "m1", "role": "user", "content": long_prompt()}],
           "tools": [], "context": [], "state": {}, "forwardedProps": {}})
}

/// Reads a stream until it shows `what` (some text arrived), then the rest.
async fn started_then_rest(s: &mut Stream, started: impl Fn(&Value) -> bool) -> Vec<Value> {
    loop {
        let d = s.data().await.expect("the stream ended before any text");
        if started(&d) {
            break;
        }
    }
    s.rest().await
}

fn is_ai_text(d: &Value) -> bool {
    d["type"] == "text-delta"
}

fn is_ag_text(d: &Value) -> bool {
    d["type"] == "TEXT_MESSAGE_CONTENT"
}

#[tokio::test]
async fn front_end_streams_end_at_their_tokens_expiry_saying_so() {
    let dir = tempdir();
    let keys = Signer::new(dir.path(), "secret");
    let gw = start(dir.path(), &keys.path(), "0", &[]);
    let addr = gw.addr.as_str();
    // Room for both streams to start on a loaded machine.
    let token = keys.sign(json!({"sub": "alice", "exp": now() + 5}));
    let mut ai = Stream::open(addr, "POST", "/v1/ai-sdk/chat", &token, &chat_body("c1")).await;
    assert_eq!(ai.status, 200);
    let mut ag = Stream::open(addr, "POST", "/v1/ag-ui", &token, &run_body("t1")).await;
    assert_eq!(ag.status, 200);
    let rest = started_then_rest(&mut ai, is_ai_text).await;
    let last = rest.last().expect("an ending");
    assert_eq!(last["type"], "error", "{rest:?}");
    assert!(
        last["errorText"]
            .as_str()
            .unwrap_or("")
            .starts_with("token_expired"),
        "{last}"
    );
    assert!(!rest.iter().any(|d| d["type"] == "finish"), "{rest:?}");
    let rest = started_then_rest(&mut ag, is_ag_text).await;
    let last = rest.last().expect("an ending");
    assert_eq!(
        (&last["type"], &last["code"]),
        (&json!("RUN_ERROR"), &json!("token_expired")),
        "{rest:?}"
    );
}

#[tokio::test]
async fn a_reload_that_revokes_a_token_ends_its_front_end_streams_saying_so() {
    let dir = tempdir();
    let keys = Signer::new(dir.path(), "secret");
    let file = dir.path().join("tether.toml");
    std::fs::write(&file, format!("jwt_secret_file = {:?}\n", keys.path())).expect("config");
    let config = file.to_string_lossy().into_owned();
    // The secret through the config file, so a reload reads it anew.
    let host = format!(
        "{} host --engine echo --delay-ms 40",
        env!("CARGO_BIN_EXE_tether")
    );
    let gw = Gateway::start(
        &dir.path().join("data"),
        &["--host-command", &host, "--config", &config],
    );
    let addr = gw.addr.as_str();
    let token = keys.token("alice", json!({}));
    let mut ai = Stream::open(addr, "POST", "/v1/ai-sdk/chat", &token, &chat_body("c1")).await;
    assert_eq!(ai.status, 200);
    let mut ag = Stream::open(addr, "POST", "/v1/ag-ui", &token, &run_body("t1")).await;
    assert_eq!(ag.status, 200);
    // Both are streaming text; then the key is withdrawn.
    loop {
        if is_ai_text(&ai.data().await.expect("text")) {
            break;
        }
    }
    loop {
        if is_ag_text(&ag.data().await.expect("text")) {
            break;
        }
    }
    let _new = Signer::new(dir.path(), "secret");
    gw.signal("HUP");
    let rest = ai.rest().await;
    let last = rest.last().expect("an ending");
    assert_eq!(last["type"], "error", "{rest:?}");
    assert!(
        last["errorText"]
            .as_str()
            .unwrap_or("")
            .starts_with("token_revoked"),
        "{last}"
    );
    assert!(!rest.iter().any(|d| d["type"] == "finish"), "{rest:?}");
    let rest = ag.rest().await;
    let last = rest.last().expect("an ending");
    assert_eq!(
        (&last["type"], &last["code"]),
        (&json!("RUN_ERROR"), &json!("token_revoked")),
        "{rest:?}"
    );
}
