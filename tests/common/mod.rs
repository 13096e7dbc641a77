//! Test harness: starts the real `tether` binary and speaks its protocol.
//!
//! Suites that touch the store run on both backends: a test written as
//! `async fn name(b: Backend)` and listed in its file's `backends!(...)`
//! becomes `sqlite::name` and `postgres::name`, and starts its gateways with
//! [`Gateway::start_on`]. On PostgreSQL each gateway gets a throwaway
//! database on the server `TETHER_TEST_POSTGRES` names (kept across its
//! restarts, dropped with it); without that variable the PostgreSQL runs
//! are skipped, loudly, unless `TETHER_REQUIRE_POSTGRES=1` (CI).
#![allow(dead_code)]

pub mod http;
pub mod proxy;
pub mod terminal;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// How long a test waits for any single frame before failing.
pub const FRAME_WAIT: Duration = Duration::from_secs(10);

/// Which store a test's gateways use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backend {
    /// SQLite in the gateway's data directory (the default).
    Sqlite,
    /// A database of its own on this PostgreSQL server.
    Postgres(String),
}

impl Backend {
    /// PostgreSQL, if a server is configured (see the module doc).
    pub fn postgres() -> Option<Backend> {
        tether_store::testing::postgres_server().map(Backend::Postgres)
    }
}

/// Runs each named `async fn(Backend)` as a test on SQLite and on PostgreSQL.
#[macro_export]
macro_rules! backends {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::common::Backend::Sqlite).await
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    if let Some(b) = $crate::common::Backend::postgres() {
                        super::$name(b).await
                    }
                }
            )*
        }
    };
}

/// A running `tether serve` on 127.0.0.1:0 with its own data dir.
pub struct Gateway {
    child: Option<Child>,
    pub addr: String,
    pub data_dir: PathBuf,
    extra: Vec<String>,
    /// The PostgreSQL database of a gateway started on PostgreSQL; dropped
    /// (after the process) with the gateway.
    database: Option<tether_store::testing::TestDatabase>,
}

/// Set to a host command (`--host-command`'s value) to run the suites with
/// another compute host than the built-in echo engine: `.ci/run` runs
/// `tests/turns.rs` once more with the Python library's echo host
/// (clients/python/examples/echo_host.py). Tests that pass their own
/// `--host-command` keep it.
pub const HOST_COMMAND_ENV: &str = "TETHER_TEST_HOST_COMMAND";

impl Gateway {
    /// A gateway on SQLite in `data_dir`.
    pub fn start(data_dir: &Path, extra: &[&str]) -> Gateway {
        Gateway::start_on(&Backend::Sqlite, data_dir, extra)
    }

    /// A gateway on `backend` (a fresh database on PostgreSQL), with
    /// `data_dir` for everything else.
    pub fn start_on(backend: &Backend, data_dir: &Path, extra: &[&str]) -> Gateway {
        let mut extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        if let Ok(host) = std::env::var(HOST_COMMAND_ENV) {
            if !host.trim().is_empty() && !extra.iter().any(|a| a == "--host-command") {
                extra.extend(["--host-command".to_string(), host]);
            }
        }
        let database = match backend {
            Backend::Sqlite => None,
            Backend::Postgres(server) => {
                let db = tether_store::testing::TestDatabase::create_blocking(server);
                extra.push("--database-url".into());
                extra.push(db.url.clone());
                Some(db)
            }
        };
        let (child, addr) = spawn(data_dir, &extra);
        Gateway {
            child: Some(child),
            addr,
            data_dir: data_dir.to_path_buf(),
            extra,
            database,
        }
    }

    /// The PostgreSQL database's URL, for a gateway on PostgreSQL.
    pub fn database_url(&self) -> Option<&str> {
        self.database.as_ref().map(|db| db.url.as_str())
    }

    /// The gateway process's pid (while it runs).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn url(&self) -> String {
        format!("ws://{}/ws", self.addr)
    }

    pub async fn client(&self) -> Client {
        Client::connect(&self.url()).await
    }

    /// SIGKILL: no drain, no flush (the crash case).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM and wait for a clean exit; returns the exit status code.
    pub fn terminate(&mut self) -> Option<i32> {
        let mut c = self.child.take()?;
        let _ = Command::new("kill")
            .args(["-TERM", &c.id().to_string()])
            .status();
        for _ in 0..200 {
            if let Ok(Some(status)) = c.try_wait() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = c.kill();
        panic!("gateway did not exit within 10 s of SIGTERM");
    }

    /// Sends a signal (`HUP`, `TERM`, ...) to the gateway process.
    pub fn signal(&self, name: &str) {
        if let Some(c) = &self.child {
            let _ = Command::new("kill")
                .args([&format!("-{name}"), &c.id().to_string()])
                .status();
        }
    }

    /// SIGKILL, then a new gateway process on the same data dir, flags and
    /// address: for clients that reconnect by themselves to the URL they
    /// were given (the port is free again at once: the gateway binds with
    /// `SO_REUSEADDR`).
    pub fn restart_same_port(&mut self) {
        self.kill();
        let (child, addr) = spawn_on(&self.data_dir, &self.addr, &self.extra);
        self.child = Some(child);
        self.addr = addr;
    }

    /// Starts a new gateway process on the same data dir and flags.
    pub fn restart(&mut self) {
        self.kill();
        let (child, addr) = spawn(&self.data_dir, &self.extra);
        self.child = Some(child);
        self.addr = addr;
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.kill();
    }
}

fn spawn(data_dir: &Path, extra: &[String]) -> (Child, String) {
    spawn_on(data_dir, "127.0.0.1:0", extra)
}

fn spawn_on(data_dir: &Path, listen: &str, extra: &[String]) -> (Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tether"))
        .arg("serve")
        .arg("--listen")
        .arg(listen)
        .arg("--data-dir")
        .arg(data_dir)
        .args(extra)
        // `TETHER_TEST_GATEWAY_LOG=info` (any RUST_LOG filter) shows why a
        // gateway under test did what it did.
        .env(
            "RUST_LOG",
            std::env::var("TETHER_TEST_GATEWAY_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start tether");
    let stdout = child.stdout.take().expect("stdout");
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("read start-up line");
    let addr = line
        .trim()
        .strip_prefix("tether listening on http://")
        .unwrap_or_else(|| panic!("unexpected start-up line {line:?}"))
        .to_string();
    (child, addr)
}

/// A WebSocket JSON-RPC client that keeps events and replies apart.
pub struct Client {
    ws: WebSocketStream<MaybeTlsStream<TcpStream>>,
    next_id: u64,
    /// Frames received but not yet consumed.
    pub inbox: std::collections::VecDeque<Value>,
    pub ready: Value,
}

impl Client {
    pub async fn connect(url: &str) -> Client {
        let (ws, _) = tokio_tungstenite::connect_async_with_config(url, None, true)
            .await
            .expect("websocket connect");
        let mut c = Client {
            ws,
            next_id: 1,
            inbox: Default::default(),
            ready: Value::Null,
        };
        let ready = c.next_frame().await;
        assert_eq!(
            ready["params"]["type"], "gateway.ready",
            "first frame: {ready}"
        );
        c.ready = ready["params"]["payload"].clone();
        c
    }

    pub fn epoch(&self) -> String {
        self.ready["epoch"].as_str().expect("epoch").to_string()
    }

    pub async fn send_text(&mut self, text: &str) {
        self.ws
            .send(Message::Text(text.into()))
            .await
            .expect("send");
    }

    pub async fn send_binary(&mut self, data: Vec<u8>) {
        self.ws
            .send(Message::Binary(data.into()))
            .await
            .expect("send");
    }

    /// Next frame from the socket (not the inbox). Panics on close or timeout.
    pub async fn next_frame(&mut self) -> Value {
        loop {
            let msg = tokio::time::timeout(FRAME_WAIT, self.ws.next())
                .await
                .expect("timed out waiting for a frame")
                .expect("connection ended")
                .expect("websocket error");
            match msg {
                Message::Text(t) => return serde_json::from_str(&t).expect("frame is JSON"),
                Message::Close(f) => panic!("connection closed: {f:?}"),
                _ => continue,
            }
        }
    }

    /// Next text frame exactly as sent, unparsed: for what a `Value` cannot
    /// show (an integer id beyond u64). Panics on close or timeout.
    pub async fn next_text(&mut self) -> String {
        loop {
            let msg = tokio::time::timeout(FRAME_WAIT, self.ws.next())
                .await
                .expect("timed out waiting for a frame")
                .expect("connection ended")
                .expect("websocket error");
            match msg {
                Message::Text(t) => return t.as_str().to_owned(),
                Message::Close(f) => panic!("connection closed: {f:?}"),
                _ => continue,
            }
        }
    }

    /// Next text frame from the socket, or the close code once the gateway
    /// closed (1005 without one). Panics on timeout.
    pub async fn next_or_close(&mut self) -> Result<Value, u16> {
        loop {
            let msg = tokio::time::timeout(FRAME_WAIT, self.ws.next())
                .await
                .expect("timed out waiting for a frame or a close");
            match msg {
                Some(Ok(Message::Text(t))) => {
                    return Ok(serde_json::from_str(&t).expect("frame is JSON"))
                }
                Some(Ok(Message::Close(Some(f)))) => return Err(f.code.into()),
                Some(Ok(Message::Close(None))) | None | Some(Err(_)) => return Err(1005),
                Some(Ok(_)) => continue,
            }
        }
    }

    /// Sends unless the connection is gone; whether it was sent.
    pub async fn try_send_text(&mut self, text: &str) -> bool {
        self.ws.send(Message::Text(text.into())).await.is_ok()
    }

    /// Reads until the close frame; returns its code.
    pub async fn expect_close(&mut self) -> u16 {
        loop {
            let msg = tokio::time::timeout(FRAME_WAIT, self.ws.next())
                .await
                .expect("timed out waiting for close");
            match msg {
                Some(Ok(Message::Close(Some(f)))) => return f.code.into(),
                Some(Ok(Message::Close(None))) | None | Some(Err(_)) => return 1005,
                Some(Ok(_)) => continue,
            }
        }
    }

    /// Sends a request and returns its reply (events meanwhile go to the inbox).
    pub async fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let frame = json!({"jsonrpc":"2.0","id":id,"method":method,"params":params});
        self.send_text(&frame.to_string()).await;
        self.reply_to(json!(id)).await
    }

    /// Waits for the reply with this id.
    pub async fn reply_to(&mut self, id: Value) -> Value {
        if let Some(pos) = self
            .inbox
            .iter()
            .position(|f| f.get("id") == Some(&id) && f.get("method").is_none())
        {
            return self.inbox.remove(pos).expect("present");
        }
        loop {
            let f = self.next_frame().await;
            if f.get("id") == Some(&id) && f.get("method").is_none() {
                return f;
            }
            self.inbox.push_back(f);
        }
    }

    /// `call`, asserting success; returns `result`.
    pub async fn ok(&mut self, method: &str, params: Value) -> Value {
        let r = self.call(method, params).await;
        assert!(r.get("error").is_none(), "{method} failed: {r}");
        r["result"].clone()
    }

    /// `call`, asserting an error; returns `error`.
    pub async fn err(&mut self, method: &str, params: Value) -> Value {
        let r = self.call(method, params).await;
        assert!(r.get("result").is_none(), "{method} should fail: {r}");
        r["error"].clone()
    }

    /// Next event notification (from the inbox first).
    pub async fn next_event(&mut self) -> Value {
        if let Some(pos) = self.inbox.iter().position(|f| f["method"] == "event") {
            return self.inbox.remove(pos).expect("present")["params"].clone();
        }
        loop {
            let f = self.next_frame().await;
            if f["method"] == "event" {
                return f["params"].clone();
            }
            self.inbox.push_back(f);
        }
    }

    /// The next `n` events.
    pub async fn events(&mut self, n: usize) -> Vec<Value> {
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            v.push(self.next_event().await);
        }
        v
    }

    /// Asserts no frame arrives within `wait`.
    pub async fn expect_silence(&mut self, wait: Duration) {
        assert!(self.inbox.is_empty(), "unexpected frames: {:?}", self.inbox);
        if let Ok(Some(Ok(Message::Text(t)))) = tokio::time::timeout(wait, self.ws.next()).await {
            panic!("unexpected frame: {t}");
        }
    }

    pub async fn close(mut self) {
        let _ = self.ws.close(None).await;
    }
}

/// Submits a prompt on session `id`; the new turn's id.
pub async fn submit(c: &mut Client, id: &str, text: &str) -> String {
    let r = c
        .ok("prompt.submit", json!({"session_id": id, "text": text}))
        .await;
    r["turn_id"].as_str().expect("turn_id").to_string()
}

/// The events of one turn, through its `message.complete` (events of other
/// turns are skipped).
pub async fn turn_events(c: &mut Client, turn_id: &str) -> Vec<Value> {
    let mut out = Vec::new();
    loop {
        let e = c.next_event().await;
        if e["turn_id"] != turn_id {
            continue;
        }
        let done = e["type"] == "message.complete";
        out.push(e);
        if done {
            return out;
        }
    }
}

/// The payload of the `message.complete` that ends `events`.
pub fn complete(events: &[Value]) -> &Value {
    let last = events.last().expect("events");
    assert_eq!(last["type"], "message.complete");
    &last["payload"]
}

pub fn seqs(events: &[Value]) -> Vec<u64> {
    events
        .iter()
        .map(|e| e["seq"].as_u64().expect("seq"))
        .collect()
}

/// What the browser tests need, as docs/TESTING.md names it.
pub const BROWSER_SETUP: &str =
    "apt-get install -y chromium nodejs npm && npm ci --prefix tests/browser";

/// A test that cannot run on this machine: under `require` (a variable CI
/// sets to 1) that is a failure; otherwise one loud line, written straight
/// to the process's stderr because libtest captures `eprintln!` of a
/// passing test, and a skip nobody sees reads as a pass.
pub fn skip(test: &str, why: &str, setup: &str, require: &str) {
    if std::env::var(require).as_deref() == Ok("1") {
        panic!("{require}=1 but {test} cannot run: {why}");
    }
    use std::io::Write as _;
    let _ = writeln!(
        std::io::stderr().lock(),
        "SKIPPED: {test} did not run: {why} (to run it: {setup})"
    );
}

pub fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().expect("tempdir")
}

/// Creates a session (titled "t") that `c` attaches to, reads its
/// `session.created`, and returns its id.
pub async fn session(c: &mut Client) -> String {
    session_with(c, json!({"title": "t"})).await
}

/// As [`session`], with these `session.create` params (which must attach).
pub async fn session_with(c: &mut Client, params: Value) -> String {
    let r = c.ok("session.create", params).await;
    assert_eq!(c.next_event().await["type"], "session.created");
    r["session"]["session_id"]
        .as_str()
        .expect("session_id")
        .to_string()
}

/// Every durable event of `id` as `c`'s gateway reads it, oldest first
/// (`session.events.since` 0).
pub async fn all_events(c: &mut Client, id: &str) -> Vec<Value> {
    let r = c
        .ok(
            "session.events.since",
            json!({"session_id": id, "last_seen": 0}),
        )
        .await;
    r["events"].as_array().expect("events").clone()
}

/// Every stored event of `id` from seq 1, paged as a client reads a long
/// history, and the `latest_seq` of the last page; `None` if the session
/// is not there (any error).
pub async fn stored_events(c: &mut Client, id: &str) -> Option<(Vec<Value>, u64)> {
    let mut events: Vec<Value> = Vec::new();
    let mut last = 0;
    loop {
        let page = c
            .call(
                "session.events.since",
                json!({"session_id": id, "last_seen": last, "limit": 10000}),
            )
            .await;
        let r = page.get("result")?;
        events.extend(r["events"].as_array()?.iter().cloned());
        last = events
            .last()
            .and_then(|e| e["seq"].as_u64())
            .unwrap_or(last);
        if r["has_more"] != true {
            return Some((events, r["latest_seq"].as_u64()?));
        }
    }
}

/// Every `message.complete` session `id` has on disk, oldest first.
pub async fn completes_of(c: &mut Client, id: &str) -> Vec<Value> {
    all_events(c, id)
        .await
        .into_iter()
        .filter(|e| e["type"] == "message.complete")
        .collect()
}
