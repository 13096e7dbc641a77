//! The WebSocket close handshake and protocol errors, at the byte level
//! (RFC 6455 §5.5.1, §7.1.5, §7.4): a client's Close is echoed with its
//! status code and the gateway then closes the TCP connection; a frame that
//! breaks the framing rules is answered with a Close 1002 (protocol error).
//!
//! Raw TCP on purpose: a WebSocket library would refuse to send the broken
//! frames, and would answer or hide the server's close on its own.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

use common::Backend;

use std::time::Duration;

use common::{tempdir, Gateway};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Bounds waits for something the gateway does on its own.
const WAIT: Duration = Duration::from_secs(30);

const OP_CONTINUE: u8 = 0x0;
const OP_TEXT: u8 = 0x1;
const OP_CLOSE: u8 = 0x8;
const OP_PING: u8 = 0x9;
const OP_PONG: u8 = 0xA;

const RSV1: u8 = 0x40;

/// A client frame: FIN (unless `fin` is false), the RSV bits in `rsv`,
/// `opcode`, and the payload masked (RFC 6455 §5.3) when `masked`.
fn frame(fin: bool, rsv: u8, opcode: u8, masked: bool, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![if fin { 0x80 } else { 0 } | rsv | opcode];
    let mask_bit = if masked { 0x80 } else { 0 };
    match payload.len() {
        n if n < 126 => f.push(mask_bit | n as u8),
        n if n <= 0xffff => {
            f.push(mask_bit | 126);
            f.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            f.push(mask_bit | 127);
            f.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    if masked {
        let mask = [0x37, 0xfa, 0x21, 0x3d];
        f.extend_from_slice(&mask);
        f.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    } else {
        f.extend_from_slice(payload);
    }
    f
}

/// A well-formed (final, masked) client frame.
fn masked(opcode: u8, payload: &[u8]) -> Vec<u8> {
    frame(true, 0, opcode, true, payload)
}

/// A Close payload: the status code, then the reason.
fn close_payload(code: u16, reason: &str) -> Vec<u8> {
    let mut p = code.to_be_bytes().to_vec();
    p.extend_from_slice(reason.as_bytes());
    p
}

/// (opcode, payload) of each complete frame a server sent (unmasked).
fn server_frames(mut b: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut out = Vec::new();
    while b.len() >= 2 {
        let op = b[0] & 0x0f;
        let (len, at) = match b[1] & 0x7f {
            126 if b.len() >= 4 => (u16::from_be_bytes([b[2], b[3]]) as usize, 4),
            127 if b.len() >= 10 => (
                u64::from_be_bytes(b[2..10].try_into().unwrap()) as usize,
                10,
            ),
            126 | 127 => break,
            n => (n as usize, 2),
        };
        if b.len() < at + len {
            break;
        }
        out.push((op, b[at..at + len].to_vec()));
        b = &b[at + len..];
    }
    out
}

/// Length of the first frame in `b` if it is complete.
fn first_frame_len(b: &[u8]) -> Option<usize> {
    if b.len() < 2 {
        return None;
    }
    let (len, at) = match b[1] & 0x7f {
        126 if b.len() >= 4 => (u16::from_be_bytes([b[2], b[3]]) as usize, 4),
        127 if b.len() >= 10 => (
            u64::from_be_bytes(b[2..10].try_into().unwrap()) as usize,
            10,
        ),
        126 | 127 => return None,
        n => (n as usize, 2),
    };
    (b.len() >= at + len).then_some(at + len)
}

/// A raw WebSocket connection past its upgrade and `gateway.ready`.
struct Raw {
    tcp: TcpStream,
    /// Bytes read past the last frame returned.
    buf: Vec<u8>,
}

impl Raw {
    async fn connect(addr: &str) -> Raw {
        Self::connect_with(TcpStream::connect(addr).await.unwrap(), addr).await
    }

    /// A connection whose receive buffer is `bytes`: the gateway's
    /// writes to it stop halfway through frames.
    async fn connect_narrow(addr: &str, bytes: u32) -> Raw {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(bytes).unwrap();
        let tcp = socket.connect(addr.parse().unwrap()).await.unwrap();
        Self::connect_with(tcp, addr).await
    }

    async fn connect_with(mut tcp: TcpStream, addr: &str) -> Raw {
        let head = format!(
            "GET /ws HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        );
        tcp.write_all(head.as_bytes()).await.unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let n = tokio::time::timeout(WAIT, tcp.read(&mut buf))
                .await
                .expect("the upgrade is answered")
                .unwrap();
            assert!(n > 0, "closed during the upgrade");
            got.extend_from_slice(&buf[..n]);
            let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") else {
                continue;
            };
            assert!(
                got.starts_with(b"HTTP/1.1 101"),
                "{:?}",
                String::from_utf8_lossy(&got)
            );
            let body = &got[end + 4..];
            if let Some(len) = first_frame_len(body) {
                let (op, payload) = &server_frames(&body[..len])[0];
                assert_eq!(*op, OP_TEXT);
                let ready: serde_json::Value = serde_json::from_slice(payload).unwrap();
                assert_eq!(ready["params"]["type"], "gateway.ready");
                let buf = body[len..].to_vec();
                return Raw { tcp, buf };
            }
        }
    }

    async fn send(&mut self, bytes: &[u8]) {
        self.tcp.write_all(bytes).await.unwrap();
    }

    /// The next text frame the server sends, as JSON.
    async fn next_text(&mut self) -> serde_json::Value {
        let mut chunk = [0u8; 4096];
        loop {
            if let Some(len) = first_frame_len(&self.buf) {
                let frame: Vec<u8> = self.buf.drain(..len).collect();
                let (op, payload) = &server_frames(&frame)[0];
                if *op == OP_TEXT {
                    return serde_json::from_slice(payload).unwrap();
                }
                assert_ne!(*op, OP_CLOSE, "closed: {payload:?}");
                continue;
            }
            let n = tokio::time::timeout(WAIT, self.tcp.read(&mut chunk))
                .await
                .expect("a frame")
                .unwrap();
            assert!(n > 0, "connection ended");
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// Everything the server sends until it closes the TCP connection.
    /// Fails if it keeps the connection open.
    async fn read_until_eof(&mut self) -> Vec<(u8, Vec<u8>)> {
        let mut rest = std::mem::take(&mut self.buf);
        let read = tokio::time::timeout(WAIT, self.tcp.read_to_end(&mut rest)).await;
        assert!(
            read.is_ok(),
            "the gateway kept the TCP connection open; it sent {:?}",
            server_frames(&rest)
        );
        server_frames(&rest)
    }

    /// The server's Close: (code, reason), after it closed the TCP
    /// connection; `None` for a Close without a status code.
    async fn close_frame(&mut self) -> Option<(u16, String)> {
        let frames = self.read_until_eof().await;
        let closes: Vec<_> = frames.iter().filter(|(op, _)| *op == OP_CLOSE).collect();
        assert_eq!(closes.len(), 1, "exactly one Close: {frames:?}");
        let (op, payload) = frames.last().expect("frames");
        assert_eq!(*op, OP_CLOSE, "the Close is the last frame: {frames:?}");
        if payload.is_empty() {
            return None;
        }
        let code = u16::from_be_bytes([payload[0], payload[1]]);
        Some((code, String::from_utf8_lossy(&payload[2..]).into_owned()))
    }
}

async fn a_clients_close_is_echoed_with_its_code_and_the_connection_closed(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &[]);
    for (code, reason) in [(1000, ""), (1001, "going away"), (4000, "bye")] {
        let mut c = Raw::connect(&gw.addr).await;
        c.send(&masked(OP_CLOSE, &close_payload(code, reason)))
            .await;
        let echoed = c.close_frame().await;
        assert_eq!(
            echoed.map(|(code, _)| code),
            Some(code),
            "the Close echoes the client's code"
        );
    }

    // A Close without a status code is answered by a Close (with none).
    let mut c = Raw::connect(&gw.addr).await;
    c.send(&masked(OP_CLOSE, &[])).await;
    let echoed = c.close_frame().await;
    assert!(
        echoed.is_none() || echoed.as_ref().map(|(c, _)| *c) == Some(1000),
        "{echoed:?}"
    );

    // A connection that was used, and is attached to a session.
    let mut c = Raw::connect(&gw.addr).await;
    let create = json!({"jsonrpc":"2.0","id":7,"method":"session.create",
        "params":{"title":"t"}})
    .to_string();
    c.send(&masked(OP_TEXT, create.as_bytes())).await;
    while c.next_text().await["id"] != 7 {}
    c.send(&masked(OP_CLOSE, &close_payload(1000, ""))).await;
    assert_eq!(c.close_frame().await.map(|(code, _)| code), Some(1000));

    // The gateway is fine.
    let mut ok = gw.client().await;
    ok.ok("gateway.ping", json!({})).await;
}

async fn a_frame_that_breaks_the_framing_rules_is_closed_with_1002(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &[]);
    let ping = json!({"jsonrpc":"2.0","id":1,"method":"gateway.ping"}).to_string();
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "an unmasked client frame",
            frame(true, 0, OP_TEXT, false, ping.as_bytes()),
        ),
        (
            "an RSV bit without an extension",
            frame(true, RSV1, OP_TEXT, true, ping.as_bytes()),
        ),
        ("a reserved data opcode", masked(0x3, b"x")),
        ("a reserved control opcode", masked(0xb, b"")),
        ("a ping of 126 bytes", masked(OP_PING, &[b'p'; 126])),
        ("a fragmented ping", frame(false, 0, OP_PING, true, b"p")),
        (
            "a continuation with nothing to continue",
            masked(OP_CONTINUE, b"x"),
        ),
        ("a Close with a one-byte payload", masked(OP_CLOSE, &[3])),
    ];
    for (what, bad) in cases {
        let mut c = Raw::connect(&gw.addr).await;
        c.send(&bad).await;
        let close = c.close_frame().await;
        assert_eq!(close.map(|(code, _)| code), Some(1002), "{what}");
    }

    // A data frame while a fragmented message is still open.
    let mut c = Raw::connect(&gw.addr).await;
    c.send(&frame(false, 0, OP_TEXT, true, b"{\"jsonrpc\""))
        .await;
    c.send(&masked(OP_TEXT, ping.as_bytes())).await;
    let close = c.close_frame().await;
    assert_eq!(
        close.map(|(code, _)| code),
        Some(1002),
        "a new message inside a fragmented one"
    );

    // The gateway and its other connections are fine.
    let mut ok = gw.client().await;
    ok.ok("gateway.ping", json!({})).await;
}

async fn fragments_and_control_frames_between_them_are_still_accepted(b: Backend) {
    // The 1002 cases above must not catch legal framing: a text message in
    // three fragments with a ping between them is answered normally.
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &[]);
    let mut c = Raw::connect(&gw.addr).await;
    let ping = json!({"jsonrpc":"2.0","id":9,"method":"gateway.ping"}).to_string();
    let (a, rest) = ping.as_bytes().split_at(5);
    let (b, tail) = rest.split_at(10);
    c.send(&frame(false, 0, OP_TEXT, true, a)).await;
    c.send(&masked(OP_PING, b"hi")).await;
    c.send(&frame(false, 0, OP_CONTINUE, true, b)).await;
    c.send(&frame(true, 0, OP_CONTINUE, true, tail)).await;
    let reply = c.next_text().await;
    assert_eq!(reply["id"], 9, "{reply}");
    assert_eq!(reply["result"]["ok"], true, "{reply}");
    c.send(&masked(OP_CLOSE, &close_payload(1000, ""))).await;
    assert_eq!(c.close_frame().await.map(|(code, _)| code), Some(1000));
}

async fn pings_during_a_long_stream_are_answered_between_whole_frames(b: Backend) {
    // Text frames go to the socket beside tungstenite, which answers pings
    // on its own: a pong must never land inside a frame. The client reads
    // in small bites while it pings, so the gateway's writes stop halfway
    // through frames while pings wait to be answered.
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &[]);
    let mut c = Raw::connect_narrow(&gw.addr, 4096).await;
    let request = |id: u64, method: &str, params: serde_json::Value| {
        masked(
            OP_TEXT,
            json!({"jsonrpc":"2.0","id":id,"method":method,"params":params})
                .to_string()
                .as_bytes(),
        )
    };
    c.send(&request(1, "session.create", json!({"title": "pings"})))
        .await;
    let reply = loop {
        // The session's first event may come before the reply.
        let f = c.next_text().await;
        if f["id"] == 1 {
            break f;
        }
    };
    let sid = reply["result"]["session"]["session_id"]
        .as_str()
        .expect("session_id")
        .to_string();
    c.send(&request(
        2,
        "prompt.submit",
        json!({"session_id": sid, "text": "/big 3000000"}),
    ))
    .await;

    let mut bytes = std::mem::take(&mut c.buf);
    let mut parsed = 0;
    let mut chunk = [0u8; 1024];
    let mut pings = Vec::new();
    let mut pongs = Vec::new();
    let mut completed = false;
    let deadline = tokio::time::Instant::now() + WAIT;
    while !completed || pongs.last() != pings.last() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "pings {pings:?}, pongs {pongs:?}, completed {completed}"
        );
        if pings.len() < 200 && (parsed % 7 == 0 || completed) {
            let payload = format!("p{}", pings.len()).into_bytes();
            c.send(&masked(OP_PING, &payload)).await;
            pings.push(payload);
        }
        let n = tokio::time::timeout(WAIT, c.tcp.read(&mut chunk))
            .await
            .expect("the gateway goes on writing")
            .unwrap();
        assert!(n > 0, "connection ended");
        bytes.extend_from_slice(&chunk[..n]);
        while let Some(len) = first_frame_len(&bytes) {
            let frame: Vec<u8> = bytes.drain(..len).collect();
            let (op, payload) = server_frames(&frame).remove(0);
            parsed += 1;
            match op {
                OP_TEXT => {
                    let v: serde_json::Value =
                        serde_json::from_slice(&payload).unwrap_or_else(|e| {
                            panic!("frame {parsed} is not JSON ({e}): a pong inside it?")
                        });
                    if v["params"]["type"] == "message.complete" {
                        completed = true;
                    }
                }
                OP_PONG => pongs.push(payload),
                other => panic!("frame {parsed}: opcode {other:#x}"),
            }
        }
    }
    // RFC 6455 §5.5.3: a pong answers the ping it echoes, and an endpoint
    // may answer only the latest of several pings.
    let mut expected = pings.iter();
    for pong in &pongs {
        assert!(
            expected.any(|p| p == pong),
            "pong {pong:?} out of order: pings {pings:?}, pongs {pongs:?}"
        );
    }
    assert!(pongs.len() > 1, "pongs {pongs:?}");
    c.send(&masked(OP_CLOSE, &close_payload(1000, ""))).await;
    assert_eq!(c.close_frame().await.map(|(code, _)| code), Some(1000));
}

backends!(
    a_clients_close_is_echoed_with_its_code_and_the_connection_closed,
    a_frame_that_breaks_the_framing_rules_is_closed_with_1002,
    fragments_and_control_frames_between_them_are_still_accepted,
    pings_during_a_long_stream_are_answered_between_whole_frames,
);
