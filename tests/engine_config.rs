//! Engine pins and profile configs: what reaches the compute
//! host as `turn.start`'s `config`, seen through the echo engine's
//! `/config` directive (it replies with the config it was given).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

use common::Backend;

use std::time::{Duration, Instant};

use common::{tempdir, Client, Gateway};
use serde_json::{json, Value};

/// Runs `/config` on the session and returns the config the host saw.
async fn config_seen(c: &mut Client, id: &str) -> Value {
    let t = c
        .ok(
            "prompt.submit",
            json!({"session_id": id, "text": "/config"}),
        )
        .await;
    loop {
        let e = c.next_event().await;
        if e["type"] == "message.complete" && e["turn_id"] == t["turn_id"] {
            let text = e["payload"]["text"].as_str().expect("text");
            return serde_json::from_str(text).expect("the reply is the config as JSON");
        }
    }
}

async fn create(c: &mut Client, params: Value) -> String {
    let r = c.ok("session.create", params).await;
    assert_eq!(c.next_event().await["type"], "session.created");
    r["session"]["session_id"].as_str().unwrap().to_string()
}

async fn a_sessions_engine_pin_reaches_the_host_and_survives_a_restart(b: Backend) {
    let dir = tempdir();
    let mut gw = Gateway::start_on(&b, dir.path(), &[]);
    let mut c = gw.client().await;
    let pin = json!({"model": "m-1", "temperature": 0.5, "tools": ["a", "b"]});
    let id = create(&mut c, json!({"title": "pinned", "engine": pin})).await;
    let plain = create(&mut c, json!({"title": "plain"})).await;
    assert_eq!(config_seen(&mut c, &id).await, pin);
    assert_eq!(config_seen(&mut c, &plain).await, json!({}));

    drop(c);
    gw.restart();
    let mut c = gw.client().await;
    c.ok(
        "session.resume",
        json!({"session_id": id, "omit_messages": true}),
    )
    .await;
    assert_eq!(config_seen(&mut c, &id).await, pin);
}

async fn a_session_following_its_profile_picks_up_a_reloaded_config(b: Backend) {
    let dir = tempdir();
    let file = dir.path().join("tether.toml");
    let write = |model: &str| {
        std::fs::write(
            &file,
            format!("[profiles.default.engine]\nmodel = \"{model}\"\nmax_tokens = 100\n"),
        )
        .unwrap()
    };
    write("first");
    let mut gw = Gateway::start_on(&b, dir.path(), &["--config", file.to_str().unwrap()]);
    let mut c = gw.client().await;
    let id = create(
        &mut c,
        json!({"title": "follows", "follow_profile_config": true, "engine": {"model": "pinned"}}),
    )
    .await;
    let pinned = create(
        &mut c,
        json!({"title": "pinned", "engine": {"model": "pinned"}}),
    )
    .await;
    assert_eq!(
        config_seen(&mut c, &id).await,
        json!({"model": "first", "max_tokens": 100}),
        "the profile's config wins over a pin when following"
    );

    // Change the file and tell the gateway: the next turn uses it.
    write("second");
    gw.signal("HUP");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let seen = config_seen(&mut c, &id).await;
        if seen["model"] == "second" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the reload never applied: {seen}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        config_seen(&mut c, &pinned).await,
        json!({"model": "pinned"})
    );

    // Following survives a restart (the flag is stored with the session).
    drop(c);
    gw.restart();
    let mut c = gw.client().await;
    c.ok(
        "session.resume",
        json!({"session_id": id, "omit_messages": true}),
    )
    .await;
    assert_eq!(config_seen(&mut c, &id).await["model"], "second");
}

backends!(
    a_sessions_engine_pin_reaches_the_host_and_survives_a_restart,
    a_session_following_its_profile_picks_up_a_reloaded_config,
);
