//! Connection and attachment limits, black-box: `--max-peers-per-session`,
//! `--max-connections`, the handshake timeout and the WebSocket idle
//! timeout ("Limits").
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

use common::Backend;

use std::time::Duration;

use common::{tempdir, Client, Gateway};
use serde_json::json;

/// (opcode, payload) of each frame a server sent (unmasked, RFC 6455).
fn server_frames(mut b: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut out = Vec::new();
    while b.len() >= 2 {
        let op = b[0] & 0x0f;
        let (len, at) = match b[1] & 0x7f {
            126 => (u16::from_be_bytes([b[2], b[3]]) as usize, 4),
            127 => (
                u64::from_be_bytes(b[2..10].try_into().unwrap()) as usize,
                10,
            ),
            n => (n as usize, 2),
        };
        out.push((op, b[at..at + len].to_vec()));
        b = &b[at + len..];
    }
    out
}
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Bounds waits for something the gateway does on its own.
const WAIT: Duration = Duration::from_secs(30);

async fn a_session_takes_at_most_max_peers_per_session(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &["--max-peers-per-session", "2"]);
    let mut a = gw.client().await;
    let r = a.ok("session.create", json!({"title": "t"})).await;
    let id = r["session"]["session_id"].as_str().unwrap().to_string();
    let mut b = gw.client().await;
    b.ok("session.resume", json!({"session_id": id})).await;

    let mut c = gw.client().await;
    let e = c.err("session.resume", json!({"session_id": id})).await;
    assert_eq!(e["code"], 4009, "{e}");
    // Not attached: a resume without attach still reads the session.
    let r = c
        .ok("session.resume", json!({"session_id": id, "attach": false}))
        .await;
    assert_eq!(r["session"]["peers"], 2);

    // A place frees up when a peer leaves.
    b.close().await;
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let r = c.call("session.resume", json!({"session_id": id})).await;
        if r.get("result").is_some() {
            assert_eq!(r["result"]["session"]["peers"], 2);
            break;
        }
        assert_eq!(r["error"]["code"], 4009);
        assert!(
            tokio::time::Instant::now() < deadline,
            "the place never freed up"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Status code of a WebSocket handshake that the server refused.
async fn refused_status(url: &str) -> Option<u16> {
    match tokio_tungstenite::connect_async(url).await {
        Ok(_) => None,
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => Some(resp.status().as_u16()),
        Err(e) => panic!("unexpected connect error: {e}"),
    }
}

async fn connections_over_max_connections_get_503_until_one_closes(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &["--max-connections", "2"]);
    let a = gw.client().await;
    let mut b = gw.client().await;
    assert_eq!(refused_status(&gw.url()).await, Some(503));
    // The ones inside the cap are unaffected.
    b.ok("gateway.ping", json!({})).await;

    a.close().await;
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        match tokio_tungstenite::connect_async(gw.url()).await {
            Ok(_) => break,
            Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => {
                assert_eq!(resp.status().as_u16(), 503);
            }
            Err(e) => panic!("unexpected connect error: {e}"),
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the place never freed up"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Reads until the server closes the connection; whatever it sent first.
async fn read_to_close(tcp: &mut TcpStream) -> Vec<u8> {
    let mut got = Vec::new();
    tokio::time::timeout(WAIT, tcp.read_to_end(&mut got))
        .await
        .expect("the server should close a connection that never finished its handshake")
        .ok();
    got
}

async fn a_connection_that_never_finishes_its_handshake_is_closed(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &["--handshake-timeout-s", "1"]);

    // Silent from the start.
    let mut silent = TcpStream::connect(&gw.addr).await.unwrap();
    read_to_close(&mut silent).await;

    // A request head that never ends (slowloris).
    let mut slow = TcpStream::connect(&gw.addr).await.unwrap();
    slow.write_all(b"GET /ws HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    read_to_close(&mut slow).await;

    // Clients that do finish are served.
    let mut c = gw.client().await;
    c.ok("gateway.ping", json!({})).await;
}

async fn a_silent_websocket_is_pinged_and_one_that_never_answers_is_closed(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(
        &b,
        dir.path(),
        &["--heartbeat-s", "1", "--idle-timeout-s", "3"],
    );

    // A client that keeps reading answers pings on its own and stays.
    let mut live = gw.client().await;
    let until = tokio::time::Instant::now() + Duration::from_secs(5);
    while let Some(left) = until.checked_duration_since(tokio::time::Instant::now()) {
        // Returns early on each ping (answered while reading).
        live.expect_silence(left).await;
    }
    live.ok("gateway.ping", json!({})).await;

    // A client that does not read sends no pong: it is closed. Read at
    // the TCP level afterwards (a WebSocket library would try to answer
    // the queued pings on the dead socket and fail before the close).
    let mut tcp = TcpStream::connect(&gw.addr).await.unwrap();
    let head = format!(
        "GET /ws HTTP/1.1\r\nHost: {}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
        gw.addr
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let bytes = read_to_close(&mut tcp).await;
    let text = String::from_utf8_lossy(&bytes);
    let body = &bytes[text.find("\r\n\r\n").expect("a 101 response") + 4..];
    let frames = server_frames(body);
    let pings = frames.iter().filter(|(op, _)| *op == 0x9).count();
    assert!(
        pings >= 1,
        "the gateway pinged before giving up: {frames:?}"
    );
    let (op, payload) = frames.last().expect("frames");
    assert_eq!(*op, 0x8, "the last frame is a close: {frames:?}");
    assert_eq!(u16::from_be_bytes([payload[0], payload[1]]), 1001);
    assert_eq!(&payload[2..], b"idle timeout");
    let _ = Client::connect(&gw.url()).await;
}

backends!(
    a_session_takes_at_most_max_peers_per_session,
    connections_over_max_connections_get_503_until_one_closes,
    a_connection_that_never_finishes_its_handshake_is_closed,
    a_silent_websocket_is_pinged_and_one_that_never_answers_is_closed,
);
