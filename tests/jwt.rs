//! Signed tokens (docs/AUTHENTICATION.md), black-box: JWTs minted by PyJWT
//! name the profile; every algorithm family verifies; every bad token is a
//! 401 before any frame; keys rotate through a JWKS with no restart, and a
//! flood of unknown `kid`s fetches it at most once per interval; a token
//! may be limited to sessions; two profiles from two JWTs are isolated on
//! the WebSocket, `POST /rpc` and SSE.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;
#[path = "jwt/support.rs"]
mod support;

use common::{tempdir, Client, Gateway};
use serde_json::{json, Value};
use support::{now, post_ping, spec, status, upgrade, ws_url, JwksServer, Keys};

/// A gateway that takes HMAC tokens (secret file) and the JWKS `jwks`.
fn hmac_and_jwks(dir: &std::path::Path, keys: &Keys, jwks: &JwksServer, extra: &[&str]) -> Gateway {
    let secret = keys.secret_file();
    let mut args = vec![
        "--jwt-secret-file",
        secret.as_str(),
        "--jwt-jwks-url",
        jwks.url.as_str(),
        "--jwt-leeway-s",
        "5",
    ];
    args.extend_from_slice(extra);
    Gateway::start(dir, &args)
}

#[tokio::test]
async fn every_algorithm_family_names_its_profile() {
    let Some(keys) = Keys::new("jwt::every_algorithm_family_names_its_profile") else {
        return;
    };
    let jwks = JwksServer::start(keys.jwks(&[
        ("rsa", "r1"),
        ("ec256", "e256"),
        ("ec384", "e384"),
        ("ed25519", "ed"),
    ]));
    let dir = tempdir();
    let gw = hmac_and_jwks(dir.path(), &keys, &jwks, &[]);
    let cases = [
        ("HS256", "secret", None),
        ("HS384", "secret", None),
        ("HS512", "secret", None),
        ("RS256", "rsa", Some("r1")),
        ("RS384", "rsa", Some("r1")),
        ("RS512", "rsa", Some("r1")),
        ("ES256", "ec256", Some("e256")),
        ("ES384", "ec384", Some("e384")),
        ("EdDSA", "ed25519", Some("ed")),
    ];
    let specs: Vec<Value> = cases
        .iter()
        .map(|(alg, key, kid)| {
            let mut s = spec(alg, key, &format!("user-{alg}"));
            if let Some(kid) = kid {
                s["headers"] = json!({ "kid": kid });
            }
            s
        })
        .collect();
    let tokens = keys.mint(&specs);
    for ((alg, _, _), token) in cases.iter().zip(&tokens) {
        let c = Client::connect(&ws_url(&gw, token)).await;
        assert_eq!(c.ready["profile"], format!("user-{alg}"), "{alg}");
        c.close().await;
        assert_eq!(
            status(&gw.addr, &post_ping(&gw.addr, token)).await,
            200,
            "{alg}"
        );
    }
    // A token without `kid` is tried with each key of its family.
    let no_kid = keys.one(spec("ES256", "ec256", "nokid"));
    let c = Client::connect(&ws_url(&gw, &no_kid)).await;
    assert_eq!(c.ready["profile"], "nokid");

    // A PEM public key instead of a JWKS.
    let dir = tempdir();
    let pem = keys.public_pem("ed25519");
    let gw = Gateway::start(dir.path(), &["--jwt-public-key-file", &pem]);
    let token = keys.one(spec("EdDSA", "ed25519", "pem-user"));
    let c = Client::connect(&ws_url(&gw, &token)).await;
    assert_eq!(c.ready["profile"], "pem-user");
    let rsa = keys.one(spec("RS256", "rsa", "pem-user"));
    assert_eq!(status(&gw.addr, &upgrade(&gw.addr, &rsa)).await, 401);
}

#[tokio::test]
async fn every_bad_token_is_401_before_any_frame() {
    let Some(keys) = Keys::new("jwt::every_bad_token_is_401_before_any_frame") else {
        return;
    };
    // RSA from a PEM file, RS256 only, with an issuer and an audience.
    let dir = tempdir();
    let pem = keys.public_pem("rsa");
    let gw = Gateway::start(
        dir.path(),
        &[
            "--jwt-public-key-file",
            &pem,
            "--jwt-algorithms",
            "RS256",
            "--jwt-issuer",
            "https://id.example",
            "--jwt-audience",
            "tether",
            "--jwt-leeway-s",
            "5",
        ],
    );
    let t = now();
    let good = json!({"sub": "alice", "exp": t + 600, "iat": t, "iss": "https://id.example", "aud": "tether"});
    let with = |changes: Value| {
        let mut claims = good.clone();
        for (k, v) in changes.as_object().expect("object") {
            if v.is_null() {
                claims.as_object_mut().expect("object").remove(k);
            } else {
                claims[k] = v.clone();
            }
        }
        claims
    };
    let rs = |claims: Value| json!({"alg": "RS256", "key": "rsa", "claims": claims});
    let cases: Vec<(&str, Value)> = vec![
        (
            "wrong signature",
            json!({"alg": "RS256", "key": "rsa_other", "claims": good}),
        ),
        (
            "alg not configured",
            json!({"alg": "RS512", "key": "rsa", "claims": good}),
        ),
        ("alg none", json!({"alg": "none", "claims": good})),
        (
            "HMAC with the public key",
            json!({"forge_hmac_with": "rsa", "claims": good}),
        ),
        ("expired", rs(with(json!({"exp": t - 60})))),
        ("not yet valid", rs(with(json!({"nbf": t + 60})))),
        ("issued in the future", rs(with(json!({"iat": t + 60})))),
        ("no exp", rs(with(json!({"exp": null})))),
        (
            "wrong iss",
            rs(with(json!({"iss": "https://evil.example"}))),
        ),
        ("no iss", rs(with(json!({"iss": null})))),
        ("wrong aud", rs(with(json!({"aud": "other"})))),
        ("no aud", rs(with(json!({"aud": null})))),
        ("missing profile claim", rs(with(json!({"sub": null})))),
        ("empty profile claim", rs(with(json!({"sub": ""})))),
        ("profile claim not a string", rs(with(json!({"sub": 42})))),
        ("sessions not a list", rs(with(json!({"sessions": "s_1"})))),
        ("unknown limit", rs(with(json!({"limits": {"turns": 3}})))),
    ];
    let specs: Vec<Value> = cases.iter().map(|(_, s)| s.clone()).collect();
    let tokens = keys.mint(&specs);
    let addr = gw.addr.as_str();
    for ((why, _), token) in cases.iter().zip(&tokens) {
        assert_eq!(
            status(addr, &upgrade(addr, token)).await,
            401,
            "WebSocket: {why}"
        );
        assert_eq!(
            status(addr, &post_ping(addr, token)).await,
            401,
            "/rpc: {why}"
        );
        let sse =
            format!("GET /v1/sessions/s_x/events?token={token} HTTP/1.1\r\nHost: {addr}\r\n\r\n");
        assert_eq!(status(addr, &sse).await, 401, "SSE: {why}");
    }
    // The good one, and one with known limits and a list of sessions, pass.
    let ok = keys.mint(&[
        rs(good.clone()),
        rs(with(
            json!({"limits": {"running_turns": 1}, "sessions": ["s_1"]}),
        )),
    ]);
    for token in &ok {
        assert_eq!(status(addr, &upgrade(addr, token)).await, 101);
    }
}

#[tokio::test]
async fn keys_rotate_through_the_jwks_without_a_restart() {
    let Some(keys) = Keys::new("jwt::keys_rotate_through_the_jwks_without_a_restart") else {
        return;
    };
    let jwks = JwksServer::start(keys.jwks(&[("rsa", "old")]));
    let dir = tempdir();
    let gw = Gateway::start(
        dir.path(),
        &["--jwt-jwks-url", &jwks.url, "--jwt-jwks-refetch-s", "1"],
    );
    assert_eq!(jwks.fetches(), 1, "fetched once at start");
    let mut old = spec("RS256", "rsa", "alice");
    old["headers"] = json!({"kid": "old"});
    let mut new = spec("ES256", "ec256", "alice");
    new["headers"] = json!({"kid": "new"});
    let tokens = keys.mint(&[old, new]);
    let c = Client::connect(&ws_url(&gw, &tokens[0])).await;
    assert_eq!(c.ready["profile"], "alice");

    // The provider rotates: the new key is published, the old one withdrawn.
    jwks.set(keys.jwks(&[("ec256", "new")]));
    // Past the refetch interval, the first token with the new kid fetches.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let c = Client::connect(&ws_url(&gw, &tokens[1])).await;
    assert_eq!(c.ready["profile"], "alice");
    assert_eq!(jwks.fetches(), 2);
    // The withdrawn key is gone from the cache with the refetch.
    assert_eq!(status(&gw.addr, &upgrade(&gw.addr, &tokens[0])).await, 401);
}

#[tokio::test]
async fn a_flood_of_unknown_kids_fetches_the_jwks_at_most_once_per_interval() {
    let Some(keys) = Keys::new("jwt::a_flood_of_unknown_kids") else {
        return;
    };
    let jwks = JwksServer::start(keys.jwks(&[("rsa", "real")]));
    let dir = tempdir();
    let gw = Gateway::start(
        dir.path(),
        &["--jwt-jwks-url", &jwks.url, "--jwt-jwks-refetch-s", "3600"],
    );
    assert_eq!(jwks.fetches(), 1);
    let specs: Vec<Value> = (0..40)
        .map(|i| {
            let mut s = spec("RS256", "rsa", "mallory");
            s["headers"] = json!({"kid": format!("bogus-{i}")});
            s
        })
        .collect();
    let tokens = keys.mint(&specs);
    let addr = gw.addr.clone();
    let probes = tokens.into_iter().map(|t| {
        let addr = addr.clone();
        tokio::spawn(async move { status(&addr, &upgrade(&addr, &t)).await })
    });
    for p in futures::future::join_all(probes).await {
        assert_eq!(p.expect("probe"), 401);
    }
    // The start-up fetch was within the interval: none more.
    assert_eq!(jwks.fetches(), 1);
    // And the real key still works.
    let mut real = spec("RS256", "rsa", "alice");
    real["headers"] = json!({"kid": "real"});
    let token = keys.one(real);
    assert_eq!(status(&addr, &upgrade(&addr, &token)).await, 101);
}

#[tokio::test]
async fn a_token_limited_to_one_session_reaches_only_it() {
    let Some(keys) = Keys::new("jwt::a_token_limited_to_one_session_reaches_only_it") else {
        return;
    };
    let dir = tempdir();
    let secret = keys.secret_file();
    let gw = Gateway::start(dir.path(), &["--jwt-secret-file", &secret]);
    let owner = keys.one(spec("HS256", "secret", "alice"));
    let mut a = Client::connect(&ws_url(&gw, &owner)).await;
    let shared = common::session(&mut a).await;
    let other = common::session(&mut a).await;

    let mut link = spec("HS256", "secret", "alice");
    link["claims"]["sessions"] = json!([shared]);
    let link = keys.one(link);
    let mut guest = Client::connect(&ws_url(&gw, &link)).await;
    assert_eq!(guest.ready["profile"], "alice");
    guest
        .ok(
            "session.resume",
            json!({"session_id": shared, "last_seen": 0}),
        )
        .await;
    let turn = common::submit(&mut guest, &shared, "hello").await;
    common::turn_events(&mut guest, &turn).await;
    for (method, params) in [
        ("session.resume", json!({"session_id": other})),
        (
            "session.events.since",
            json!({"session_id": other, "last_seen": 0}),
        ),
        ("prompt.submit", json!({"session_id": other, "text": "x"})),
        ("session.close", json!({"session_id": other})),
        ("session.create", json!({"title": "mine"})),
        // Profile-wide methods name sessions it may not reach.
        ("session.events.stats", json!({})),
        ("handoff.claim", json!({"target": "t"})),
    ] {
        let e = guest.err(method, params).await;
        assert_eq!(e["code"], 4001, "{method}: {e}");
    }
    // The same answer as for a session that is not there at all.
    let e = guest
        .err(
            "session.resume",
            json!({"session_id": "s_01JNOTTHERE0000000000000000"}),
        )
        .await;
    assert_eq!(e["code"], 4001);
    let list = guest.ok("session.list", json!({})).await;
    let ids: Vec<&str> = list["sessions"]
        .as_array()
        .expect("sessions")
        .iter()
        .map(|s| s["session_id"].as_str().expect("id"))
        .collect();
    assert_eq!(ids, vec![shared.as_str()]);
    // Over /rpc and SSE alike.
    let r = common::http::http(
        &gw.addr,
        "POST",
        "/rpc",
        &[
            ("Authorization", &format!("Bearer {link}")),
            ("Content-Type", "application/json"),
        ],
        json!({"jsonrpc": "2.0", "id": 1, "method": "session.events.since",
               "params": {"session_id": other, "last_seen": 0}})
        .to_string()
        .as_bytes(),
    )
    .await;
    assert_eq!(r.json()["error"]["code"], 4001, "{}", r.json());
    let refused = common::http::Sse::open(
        &gw.addr,
        &format!("/v1/sessions/{other}/events?token={link}"),
        &[],
    )
    .await;
    assert_eq!(refused.err().map(|r| r.status), Some(404));
    common::http::sse(
        &gw.addr,
        &format!("/v1/sessions/{shared}/events?token={link}"),
        &[],
    )
    .await;
}

#[tokio::test]
async fn two_profiles_from_two_jwts_are_isolated_on_every_transport() {
    let Some(keys) = Keys::new("jwt::two_profiles_from_two_jwts_are_isolated") else {
        return;
    };
    let jwks = JwksServer::start(keys.jwks(&[("ed25519", "k")]));
    let dir = tempdir();
    let gw = hmac_and_jwks(dir.path(), &keys, &jwks, &[]);
    let mut bob = spec("EdDSA", "ed25519", "bob");
    bob["headers"] = json!({"kid": "k"});
    let tokens = keys.mint(&[spec("HS256", "secret", "alice"), bob]);
    let (alice_t, bob_t) = (&tokens[0], &tokens[1]);
    let mut alice = Client::connect(&ws_url(&gw, alice_t)).await;
    let mut bob = Client::connect(&ws_url(&gw, bob_t)).await;
    assert_eq!(alice.ready["profile"], "alice");
    assert_eq!(bob.ready["profile"], "bob");
    let a_id = common::session(&mut alice).await;
    let b_id = common::session(&mut bob).await;

    // WebSocket: neither sees nor reaches the other's session, even naming
    // the other's profile.
    for (c, other) in [(&mut alice, &b_id), (&mut bob, &a_id)] {
        let e = c.err("session.resume", json!({"session_id": other})).await;
        assert_eq!(e["code"], 4001);
        let e = c
            .err("prompt.submit", json!({"session_id": other, "text": "x"}))
            .await;
        assert_eq!(e["code"], 4001);
        let list = c.ok("session.list", json!({})).await;
        assert_eq!(list["sessions"].as_array().expect("sessions").len(), 1);
    }
    let e = bob
        .err(
            "session.resume",
            json!({"session_id": a_id, "profile": "alice"}),
        )
        .await;
    assert_eq!(e["code"], 4001);

    // POST /rpc.
    let rpc = |token: &str, id: &str| {
        let auth = format!("Bearer {token}");
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "session.events.since",
                          "params": {"session_id": id, "last_seen": 0}})
        .to_string();
        let addr = gw.addr.clone();
        async move {
            common::http::http(
                &addr,
                "POST",
                "/rpc",
                &[
                    ("Authorization", &auth),
                    ("Content-Type", "application/json"),
                ],
                body.as_bytes(),
            )
            .await
            .json()
        }
    };
    assert_eq!(rpc(bob_t, &a_id).await["error"]["code"], 4001);
    assert!(rpc(alice_t, &a_id).await.get("result").is_some());

    // SSE.
    let open = |token: &str, id: &str| {
        let path = format!("/v1/sessions/{id}/events?token={token}");
        let addr = gw.addr.clone();
        async move {
            common::http::Sse::open(&addr, &path, &[])
                .await
                .err()
                .map(|r| r.status)
        }
    };
    assert_eq!(open(bob_t, &a_id).await, Some(404));
    assert_eq!(open(alice_t, &b_id).await, Some(404));
    assert_eq!(open(alice_t, &a_id).await, None);
}

#[test]
fn unusable_jwt_settings_exit_64() {
    let dir = tempdir();
    let run = |args: &[&str], env: &[(&str, &str)]| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_tether"));
        cmd.arg("serve")
            .arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--data-dir")
            .arg(dir.path())
            .args(args)
            .env_remove("TETHER_JWT_SECRET");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().expect("run tether");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let bad_pem = dir.path().join("bad.pem");
    std::fs::write(&bad_pem, "not a key").expect("write");
    let bad_pem = bad_pem.to_string_lossy().into_owned();
    let secret = dir.path().join("secret");
    std::fs::write(&secret, "s3cret\n").expect("write");
    let secret = secret.to_string_lossy().into_owned();
    for (args, env, says) in [
        (
            vec!["--jwt-public-key-file", bad_pem.as_str()],
            vec![],
            "PEM",
        ),
        (
            vec![
                "--jwt-algorithms",
                "HS256",
                "--jwt-public-key-file",
                bad_pem.as_str(),
            ],
            vec![],
            "PEM",
        ),
        (vec!["--jwt-issuer", "x"], vec![], "without a key"),
        (
            vec![
                "--jwt-secret-file",
                secret.as_str(),
                "--jwt-algorithms",
                "RS256",
            ],
            vec![],
            "RS256",
        ),
        (
            vec![
                "--jwt-secret-file",
                secret.as_str(),
                "--jwt-algorithms",
                "none",
            ],
            vec![],
            "none",
        ),
        (
            vec!["--jwt-secret-file", secret.as_str()],
            vec![("TETHER_JWT_SECRET", "x")],
            "not both",
        ),
    ] {
        let (code, err) = run(&args, &env);
        assert_eq!(code, Some(64), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}
