//! Tokens and profiles (PROTOCOL 1.1), black-box: a token fixes
//! the caller's profile, a missing or wrong one is 401 before any frame,
//! and without tokens the gateway will not listen beyond loopback.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

use common::Backend;

use std::process::{Command, Stdio};

use common::{tempdir, Client, Gateway};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

const ALICE: &str = "alice-token-1";
const BOB: &str = "bob-token-2";

fn tokens() -> Vec<String> {
    vec![
        "--token".into(),
        format!("alice:{ALICE}"),
        "--token".into(),
        format!("bob:{BOB}"),
    ]
}

fn start(dir: &std::path::Path) -> Gateway {
    let args = tokens();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Gateway::start(dir, &args)
}

async fn as_user(gw: &Gateway, token: &str) -> Client {
    Client::connect(&format!("{}?token={token}", gw.url())).await
}

/// The HTTP status of a raw request (head only).
async fn status(addr: &str, head: &str) -> u16 {
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    tcp.write_all(head.as_bytes()).await.unwrap();
    let mut buf = vec![0u8; 512];
    let n = tcp.read(&mut buf).await.unwrap();
    let text = String::from_utf8_lossy(&buf[..n]);
    text.split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn upgrade(addr: &str, path: &str, extra: &str) -> String {
    format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n{extra}\r\n"
    )
}

fn ids(list: &Value) -> Vec<String> {
    list["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["session_id"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn two_tokens_see_disjoint_sessions_and_cannot_reach_each_other() {
    let dir = tempdir();
    let gw = start(dir.path());
    let mut alice = as_user(&gw, ALICE).await;
    let mut bob = as_user(&gw, BOB).await;
    assert_eq!(alice.ready["profile"], "alice");
    assert_eq!(bob.ready["profile"], "bob");

    let a = alice.ok("session.create", json!({"title": "a"})).await;
    let a_id = a["session"]["session_id"].as_str().unwrap().to_string();
    assert_eq!(a["session"]["profile"], "alice");
    let b = bob.ok("session.create", json!({"title": "b"})).await;
    let b_id = b["session"]["session_id"].as_str().unwrap().to_string();

    assert_eq!(
        ids(&alice.ok("session.list", json!({})).await),
        vec![a_id.clone()]
    );
    assert_eq!(
        ids(&bob.ok("session.list", json!({})).await),
        vec![b_id.clone()]
    );
    // Another's id is as unknown as a made-up one, for every method.
    for (method, params) in [
        ("session.resume", json!({"session_id": a_id})),
        (
            "session.events.since",
            json!({"session_id": a_id, "last_seen": 0}),
        ),
        ("prompt.submit", json!({"session_id": a_id, "text": "x"})),
        ("session.close", json!({"session_id": a_id})),
    ] {
        let e = bob.err(method, params).await;
        assert_eq!(e["code"], 4001, "{method}: {e}");
    }
    // Naming the other profile is no escalation: nothing is visible.
    let e = bob
        .err(
            "session.resume",
            json!({"session_id": a_id, "profile": "alice"}),
        )
        .await;
    assert_eq!(e["code"], 4001);
    let l = bob.ok("session.list", json!({"profile": "alice"})).await;
    assert!(ids(&l).is_empty());
    // Alice's session is untouched.
    let r = alice
        .ok("session.resume", json!({"session_id": a_id}))
        .await;
    assert_eq!(r["session"]["status"], "idle");
}

#[tokio::test]
async fn a_missing_or_wrong_token_is_401_before_any_frame() {
    let dir = tempdir();
    let gw = start(dir.path());
    let addr = gw.addr.as_str();
    assert_eq!(status(addr, &upgrade(addr, "/ws", "")).await, 401);
    assert_eq!(
        status(addr, &upgrade(addr, "/ws?token=nope", "")).await,
        401
    );
    assert_eq!(
        status(
            addr,
            &upgrade(addr, "/ws", "Authorization: Bearer nope\r\n")
        )
        .await,
        401
    );
    let post = |auth: &str| {
        format!(
            "POST /rpc HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n{auth}\
             Content-Length: 2\r\n\r\n{{}}"
        )
    };
    assert_eq!(status(addr, &post("")).await, 401);
    assert_eq!(
        status(addr, &post("Authorization: Bearer nope\r\n")).await,
        401
    );
    let sse = format!("GET /v1/sessions/s_x/events HTTP/1.1\r\nHost: {addr}\r\n\r\n");
    assert_eq!(status(addr, &sse).await, 401);

    // The right one, as a header or in the query, is served.
    assert_eq!(
        status(
            addr,
            &upgrade(addr, "/ws", &format!("Authorization: Bearer {ALICE}\r\n"))
        )
        .await,
        101
    );
    assert_eq!(
        status(addr, &upgrade(addr, &format!("/ws?token={BOB}"), "")).await,
        101
    );
    assert_eq!(
        status(addr, &post(&format!("Authorization: Bearer {BOB}\r\n"))).await,
        200
    );
    let mut req = gw.url().into_client_request().unwrap();
    req.headers_mut()
        .insert("authorization", format!("Bearer {ALICE}").parse().unwrap());
    let (_ws, resp) = tokio_tungstenite::connect_async(req).await.unwrap();
    assert_eq!(resp.status().as_u16(), 101);
}

#[tokio::test]
async fn sse_takes_the_token_and_its_profile() {
    let dir = tempdir();
    let gw = start(dir.path());
    let mut alice = as_user(&gw, ALICE).await;
    let a = alice.ok("session.create", json!({"title": "a"})).await;
    let id = a["session"]["session_id"].as_str().unwrap();
    let addr = gw.addr.as_str();
    let get = |q: &str| {
        format!("GET /v1/sessions/{id}/events?last_seen=0{q} HTTP/1.1\r\nHost: {addr}\r\n\r\n")
    };
    assert_eq!(status(addr, &get(&format!("&token={ALICE}"))).await, 200);
    // Bob's token does not see Alice's session, and cannot ask for her profile.
    assert_eq!(status(addr, &get(&format!("&token={BOB}"))).await, 404);
    assert_eq!(
        status(addr, &get(&format!("&token={BOB}&profile=alice"))).await,
        404
    );
}

#[test]
fn without_tokens_a_non_loopback_listen_exits_64_and_with_one_it_starts() {
    let dir = tempdir();
    let out = Command::new(env!("CARGO_BIN_EXE_tether"))
        .args([
            "serve",
            "--listen",
            "0.0.0.0:0",
            "--hosts",
            "0",
            "--data-dir",
        ])
        .arg(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .expect("run tether");
    assert_eq!(out.status.code(), Some(64));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("non-loopback") && err.contains("--token"),
        "{err}"
    );

    let mut child = Command::new(env!("CARGO_BIN_EXE_tether"))
        .args([
            "serve",
            "--listen",
            "0.0.0.0:0",
            "--hosts",
            "0",
            "--token",
            "p:t",
            "--data-dir",
        ])
        .arg(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("run tether");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        line.starts_with("tether listening on http://0.0.0.0:"),
        "{line}"
    );
}

async fn a_config_file_may_give_the_token_as_its_sha256(b: Backend) {
    use sha2::Digest;
    let dir = tempdir();
    let digest = format!("{:x}", sha2::Sha256::digest(b"file-secret"));
    let file = dir.path().join("tether.toml");
    std::fs::write(&file, format!("token = [\"carol:sha256:{digest}\"]\n")).unwrap();
    let gw = Gateway::start_on(&b, dir.path(), &["--config", file.to_str().unwrap()]);
    let c = as_user(&gw, "file-secret").await;
    assert_eq!(c.ready["profile"], "carol");
    let addr = gw.addr.as_str();
    assert_eq!(
        status(addr, &upgrade(addr, &format!("/ws?token={digest}"), "")).await,
        401,
        "the digest itself is not a token"
    );
}

/// `tether serve ARGS` with `env`, until it prints its start-up line or
/// exits: `Ok(line)` or `Err((status, stderr))`.
fn start_or_exit(
    dir: &std::path::Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> Result<String, (Option<i32>, String)> {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tether"));
    cmd.args([
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--hosts",
        "0",
        "--data-dir",
    ])
    .arg(dir)
    .args(args)
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("run tether");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    if line.starts_with("tether listening on ") {
        let _ = child.kill();
        let _ = child.wait();
        return Ok(line);
    }
    let out = child.wait_with_output().expect("wait for tether");
    Err((
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

#[test]
fn empty_and_whitespace_tokens_are_refused_with_64() {
    for spec in [
        "alice:   ",
        "alice:\t",
        "   :secret",
        "alice:",
        "alice: secret",
        "alice:secret ",
    ] {
        let dir = tempdir();
        match start_or_exit(dir.path(), &["--token", spec], &[]) {
            Ok(line) => panic!("{spec:?} was accepted: {line}"),
            Err((code, err)) => {
                assert_eq!(code, Some(64), "{spec:?}: {err}");
                assert!(err.contains("token"), "{spec:?}: {err}");
            }
        }
    }
    // The same from the environment and the file.
    let dir = tempdir();
    let err = start_or_exit(dir.path(), &[], &[("TETHER_TOKEN", "alice:  ")]).unwrap_err();
    assert_eq!(err.0, Some(64), "{}", err.1);
    let file = dir.path().join("tether.toml");
    std::fs::write(&file, "token = [\"alice: \"]\n").unwrap();
    let err = start_or_exit(dir.path(), &["--config", file.to_str().unwrap()], &[]).unwrap_err();
    assert_eq!(err.0, Some(64), "{}", err.1);
}

#[test]
fn empty_tether_variables_count_as_unset() {
    let dir = tempdir();
    let started = start_or_exit(
        dir.path(),
        &[],
        &[
            ("TETHER_TOKEN", ""),
            ("TETHER_MAX_QUEUED", ""),
            ("TETHER_ALLOW_ORIGIN", ""),
            ("TETHER_LOG_FORMAT", ""),
        ],
    );
    assert!(started.is_ok(), "{started:?}");
    // A variable that is set still counts.
    let err = start_or_exit(dir.path(), &[], &[("TETHER_MAX_QUEUED", "x")]).unwrap_err();
    assert_ne!(err.0, Some(0), "{}", err.1);
}

backends!(a_config_file_may_give_the_token_as_its_sha256,);
