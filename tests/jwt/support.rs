//! What the JWT suites share: keys and tokens minted by PyJWT
//! (`tests/jwt/mint.py`, pinned in `tests/jwt/requirements.txt`), a JWKS
//! served by a small HTTP server that counts its fetches and can rotate
//! its keys, and raw HTTP probes that see a 401 before any frame.
//!
//! Without PyJWT in `clients/python/.venv` the suites are skipped with one
//! loud line, unless `TETHER_REQUIRE_CLIENTS=1` (CI).
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn python() -> PathBuf {
    Path::new(ROOT).join("clients/python/.venv/bin/python")
}

fn mint_py() -> PathBuf {
    Path::new(ROOT).join("tests/jwt/mint.py")
}

/// Keys made for one test, in a directory of their own.
pub struct Keys {
    pub dir: tempfile::TempDir,
}

impl Keys {
    /// New keys, or `None` (the test then returns) when PyJWT is missing.
    pub fn new(test: &str) -> Option<Keys> {
        let ok = Command::new(python())
            .args(["-c", "import jwt, cryptography"])
            .output()
            .is_ok_and(|o| o.status.success());
        if !ok {
            crate::common::skip(
                test,
                "PyJWT is not installed in clients/python/.venv",
                "python3 -m venv clients/python/.venv && clients/python/.venv/bin/pip install -r tests/jwt/requirements.txt",
                "TETHER_REQUIRE_CLIENTS",
            );
            return None;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let status = Command::new(python())
            .arg(mint_py())
            .arg("keys")
            .arg(dir.path())
            .status()
            .expect("run mint.py");
        assert!(status.success(), "mint.py keys failed");
        Some(Keys { dir })
    }

    pub fn path(&self, name: &str) -> String {
        self.dir.path().join(name).to_string_lossy().into_owned()
    }

    /// The HMAC secret's file.
    pub fn secret_file(&self) -> String {
        self.path("secret")
    }

    /// A public key's PEM file (`rsa`, `ec256`, `ec384`, `ed25519`).
    pub fn public_pem(&self, name: &str) -> String {
        self.path(&format!("{name}.pub"))
    }

    /// One token per spec (see mint.py).
    pub fn mint(&self, specs: &[Value]) -> Vec<String> {
        let mut child = Command::new(python())
            .arg(mint_py())
            .arg("tokens")
            .arg(self.dir.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("run mint.py");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(Value::from(specs.to_vec()).to_string().as_bytes())
            .expect("write specs");
        let out = child.wait_with_output().expect("mint.py output");
        assert!(out.status.success(), "mint.py tokens failed");
        serde_json::from_slice(&out.stdout).expect("a list of tokens")
    }

    /// One token.
    pub fn one(&self, spec: Value) -> String {
        self.mint(&[spec]).remove(0)
    }

    /// A JWKS of the named keys, each with its `kid` (and `alg`, if given).
    pub fn jwks(&self, keys: &[(&str, &str)]) -> String {
        let keys: Vec<Value> = keys
            .iter()
            .map(|(name, kid)| {
                let text =
                    std::fs::read_to_string(self.path(&format!("{name}.jwk"))).expect("read jwk");
                let mut jwk: Value = serde_json::from_str(&text).expect("jwk");
                jwk["kid"] = json!(kid);
                jwk["use"] = json!("sig");
                jwk
            })
            .collect();
        json!({ "keys": keys }).to_string()
    }
}

/// Seconds since the Unix epoch.
pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs()
}

/// A spec: `alg` signed with `key`, for profile `sub`, valid for an hour.
pub fn spec(alg: &str, key: &str, sub: &str) -> Value {
    json!({"alg": alg, "key": key, "claims": {"sub": sub, "exp": now() + 3600, "iat": now()}})
}

/// A JWKS over HTTP that counts its fetches; its document can be replaced.
pub struct JwksServer {
    pub url: String,
    fetches: Arc<AtomicUsize>,
    body: Arc<Mutex<String>>,
}

impl JwksServer {
    pub fn start(body: String) -> JwksServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}/jwks.json", listener.local_addr().expect("addr"));
        let fetches = Arc::new(AtomicUsize::new(0));
        let body = Arc::new(Mutex::new(body));
        let (f, b) = (fetches.clone(), body.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    match conn.read(&mut byte) {
                        Ok(1) => head.push(byte[0]),
                        _ => break,
                    }
                }
                f.fetch_add(1, Ordering::SeqCst);
                let body = b.lock().expect("body").clone();
                let _ = write!(
                    conn,
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        JwksServer { url, fetches, body }
    }

    pub fn fetches(&self) -> usize {
        self.fetches.load(Ordering::SeqCst)
    }

    /// Serves another document from the next fetch on (key rotation).
    pub fn set(&self, body: String) {
        *self.body.lock().expect("body") = body;
    }
}

/// The HTTP status a raw request head gets, and whether anything beyond
/// the head came (a WebSocket frame after a 101).
pub async fn status(addr: &str, head: &str) -> u16 {
    let mut tcp = TcpStream::connect(addr).await.expect("connect");
    tcp.write_all(head.as_bytes()).await.expect("write");
    let mut buf = vec![0u8; 1024];
    let n = tokio::time::timeout(crate::common::FRAME_WAIT, tcp.read(&mut buf))
        .await
        .expect("an answer")
        .expect("read");
    let text = String::from_utf8_lossy(&buf[..n]);
    text.split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {text:?}"))
}

/// The WebSocket upgrade with this token as a bearer header.
pub fn upgrade(addr: &str, token: &str) -> String {
    format!(
        "GET /ws HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\
         Authorization: Bearer {token}\r\n\r\n"
    )
}

/// `POST /rpc` of `gateway.ping` with this token.
pub fn post_ping(addr: &str, token: &str) -> String {
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"gateway.ping"}"#;
    format!(
        "POST /rpc HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Authorization: Bearer {token}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// The WebSocket URL with this token.
pub fn ws_url(gw: &crate::common::Gateway, token: &str) -> String {
    format!("{}?token={token}", gw.url())
}
