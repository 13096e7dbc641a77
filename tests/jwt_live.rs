//! Tokens on live connections (docs/AUTHENTICATION.md), black-box: a
//! WebSocket is told `gateway.token_expiring` before its token's `exp`, and
//! `gateway.refresh_token` extends it keeping its attachments (another
//! profile's token or an invalid one is 4003 and changes nothing); at
//! `exp` it is closed with 4401 after every frame queued for it; an SSE
//! stream ends at `exp` with an event that says why; SIGHUP reloads the
//! tokens, closing (4403) only the connections whose token was removed.
//!
//! Expiry is in whole seconds (`exp` is), so these tests wait a few.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;
#[path = "jwt/support.rs"]
mod support;

use std::time::Duration;

use common::{tempdir, Client, Gateway};
use serde_json::{json, Value};
use support::{now, spec, status, upgrade, ws_url, Keys};

/// A gateway taking HMAC tokens, without leeway, warning `warn_s` ahead.
fn start(dir: &std::path::Path, keys: &Keys, warn_s: &str) -> Gateway {
    let secret = keys.secret_file();
    Gateway::start(
        dir,
        &[
            "--jwt-secret-file",
            &secret,
            "--jwt-leeway-s",
            "0",
            "--token-expiring-s",
            warn_s,
        ],
    )
}

/// An HS256 token of `sub` that expires at `exp`.
fn expiring(sub: &str, exp: u64) -> Value {
    json!({"alg": "HS256", "key": "secret", "claims": {"sub": sub, "exp": exp, "iat": now()}})
}

/// Sleeps until the wall clock is past `exp` (seconds since the epoch).
async fn until_past(exp: u64) {
    while now() <= exp {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn token_expiring_then_a_refresh_keeps_the_connection_and_its_attachments() {
    let Some(keys) = Keys::new("jwt_live::token_expiring_then_a_refresh") else {
        return;
    };
    let dir = tempdir();
    let gw = start(dir.path(), &keys, "3");
    // Room for a loaded machine: the refresh must come before `exp`.
    let exp = now() + 6;
    let tokens = keys.mint(&[
        expiring("alice", exp),
        spec("HS256", "secret", "alice"),
        spec("HS256", "secret", "bob"),
        // Signed with another secret.
        json!({"forge_hmac_with": "rsa", "claims": {"sub": "alice", "exp": now() + 600}}),
    ]);
    let (short, long, bob, forged) = (&tokens[0], &tokens[1], &tokens[2], &tokens[3]);
    let mut c = Client::connect(&ws_url(&gw, short)).await;
    let id = common::session(&mut c).await;

    // Told ahead of `exp`.
    let warned = loop {
        let f = c.next_frame().await;
        if f["method"] == "gateway.token_expiring" {
            break f;
        }
        c.inbox.push_back(f);
    };
    assert_eq!(warned["params"]["expires_at"], exp, "{warned}");

    // Another profile's token, or one the gateway does not accept: 4003,
    // and the connection keeps its token.
    for refused in [bob, forged, &"not-a-token".to_string()] {
        let e = c
            .err("gateway.refresh_token", json!({"token": refused}))
            .await;
        assert_eq!(e["code"], 4003, "{e}");
    }
    let r = c.ok("gateway.refresh_token", json!({"token": long})).await;
    assert!(
        r["expires_at"].as_u64().is_some_and(|e| e > exp + 60),
        "{r}"
    );

    // Past the first token's `exp` the connection is still open and still
    // attached: a turn another connection starts reaches it.
    until_past(exp + 1).await;
    let mut other = Client::connect(&ws_url(&gw, long)).await;
    other.ok("session.resume", json!({"session_id": id})).await;
    let turn = common::submit(&mut other, &id, "still here").await;
    let events = common::turn_events(&mut c, &turn).await;
    assert_eq!(common::complete(&events)["text"], "still here");
    c.ok("gateway.ping", json!({})).await;
}

#[tokio::test]
async fn an_expired_connection_is_closed_with_4401_after_its_queued_frames() {
    let Some(keys) = Keys::new("jwt_live::an_expired_connection_is_closed_with_4401") else {
        return;
    };
    let dir = tempdir();
    let gw = start(dir.path(), &keys, "0");
    // The turn (2 s) must end before `exp`, with room for a loaded machine.
    let exp = now() + 6;
    let token = keys.one(expiring("alice", exp));
    let mut c = Client::connect(&ws_url(&gw, &token)).await;
    let id = common::session(&mut c).await;
    // A turn that ends shortly before `exp`; nothing is read until after it.
    let r = c
        .ok(
            "prompt.submit",
            json!({"session_id": id, "text": "/sleep 2000"}),
        )
        .await;
    let turn = r["turn_id"].as_str().expect("turn_id").to_string();
    until_past(exp + 1).await;
    // Every frame of the turn arrives, through its message.complete, and
    // only then the close.
    let mut saw_complete = false;
    let code = loop {
        match c.next_or_close().await {
            Ok(f) => {
                if f["params"]["turn_id"] == turn.as_str()
                    && f["params"]["type"] == "message.complete"
                {
                    saw_complete = true;
                }
            }
            Err(code) => break code,
        }
    };
    assert!(saw_complete, "the turn's frames came before the close");
    assert_eq!(code, 4401);
    // The token opens nothing more.
    assert_eq!(status(&gw.addr, &upgrade(&gw.addr, &token)).await, 401);
}

#[tokio::test]
async fn an_sse_stream_ends_at_exp_with_an_event_saying_why() {
    let Some(keys) = Keys::new("jwt_live::an_sse_stream_ends_at_exp") else {
        return;
    };
    let dir = tempdir();
    let gw = start(dir.path(), &keys, "0");
    let exp = now() + 5;
    let tokens = keys.mint(&[spec("HS256", "secret", "alice"), expiring("alice", exp)]);
    let mut c = Client::connect(&ws_url(&gw, &tokens[0])).await;
    let id = common::session(&mut c).await;
    let mut sse = common::http::sse(
        &gw.addr,
        &format!("/v1/sessions/{id}/events?last_seen=0&token={}", tokens[1]),
        &[],
    )
    .await;
    let ended = loop {
        let e = sse.event().await;
        if e.event.as_deref() == Some("gateway.closed") {
            break e;
        }
    };
    assert!(now() >= exp, "not before exp");
    assert_eq!(ended.params()["code"], 4401, "{}", ended.data);
    sse.expect_end().await;
}

#[tokio::test]
async fn sighup_reloads_tokens_and_closes_only_the_revoked_connections() {
    let Some(keys) = Keys::new("jwt_live::sighup_reloads_tokens") else {
        return;
    };
    let dir = tempdir();
    let file = dir.path().join("tether.toml");
    let secret = keys.secret_file();
    let config = |tokens: &str| format!("token = [{tokens}]\njwt_secret_file = {secret:?}\n");
    std::fs::write(&file, config(r#""alice:alice-tok", "bob:bob-tok""#)).expect("write");
    let path = file.to_string_lossy().into_owned();
    let data = dir.path().join("data");
    let gw = Gateway::start(&data, &["--config", &path]);
    let carol_t = keys.one(spec("HS256", "secret", "carol"));
    let mut alice = Client::connect(&ws_url(&gw, "alice-tok")).await;
    let mut bob = Client::connect(&ws_url(&gw, "bob-tok")).await;
    let mut carol = Client::connect(&ws_url(&gw, &carol_t)).await;
    let id = common::session(&mut alice).await;

    // Bob's token is removed; Dave's added.
    std::fs::write(&file, config(r#""alice:alice-tok", "dave:dave-tok""#)).expect("write");
    gw.signal("HUP");
    assert_eq!(bob.expect_close().await, 4403);
    // The others keep their connections and attachments.
    alice.ok("gateway.ping", json!({})).await;
    let turn = common::submit(&mut alice, &id, "after the reload").await;
    common::turn_events(&mut alice, &turn).await;
    carol.ok("gateway.ping", json!({})).await;
    let addr = gw.addr.as_str();
    assert_eq!(status(addr, &upgrade(addr, "bob-tok")).await, 401);
    assert_eq!(status(addr, &upgrade(addr, "dave-tok")).await, 101);

    // A file that no longer parses changes nothing.
    std::fs::write(&file, "token = [").expect("write");
    gw.signal("HUP");
    let again = Client::connect(&ws_url(&gw, "dave-tok")).await;
    assert_eq!(again.ready["profile"], "dave");
    alice.ok("gateway.ping", json!({})).await;
}
