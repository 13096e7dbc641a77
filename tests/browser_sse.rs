//! A real browser's `EventSource` on the SSE endpoint (PROTOCOL 1.9):
//! headless Chromium opens `tests/browser/sse.html`, the test cuts the
//! stream's connection mid-turn, the browser reconnects on its own with
//! `Last-Event-ID`, and the page must end up with every seq exactly once.
//!
//! The test runs a tiny HTTP server that serves the page and a result
//! endpoint and forwards everything else, byte for byte, to the gateway.
//! So the page is same-origin with its event stream (no CORS, and the
//! gateway's Origin rule holds: the browser's `Origin`, if it sends one,
//! names the same host as its `Host`), and the test owns the connection it
//! cuts.
//!
//! Without `/usr/bin/chromium` the test is skipped with one `SKIPPED:` line
//! on stderr, unless `TETHER_REQUIRE_BROWSER=1` (CI) makes that a failure.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{seqs, submit, tempdir, turn_events, Client, Gateway};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::AbortHandle;

const CHROMIUM: &str = "/usr/bin/chromium";
const PAGE: &str = include_str!("browser/sse.html");
/// The text of the last turn: the page reports when it sees its complete.
const DONE: &str = "the-end";
/// Bounds every wait on the browser (start-up, its reconnect timer, the
/// result). Generous: Chromium starts slowly on a loaded 2-core machine.
const BROWSER_WAIT: Duration = Duration::from_secs(90);

/// Headless Chromium in a process group of its own, killed on drop.
struct Browser {
    child: Child,
    dir: tempfile::TempDir,
}

impl Browser {
    fn start(url: &str) -> Browser {
        let dir = tempdir();
        let log = std::fs::File::create(dir.path().join("chromium.log")).expect("log file");
        let child = Command::new(CHROMIUM)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                // A proxy from the environment would take the page's
                // requests away from the test's server.
                "--no-proxy-server",
            ])
            .arg(format!(
                "--user-data-dir={}",
                dir.path().join("profile").display()
            ))
            .arg(url)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log file"))
            .stderr(log)
            // Its renderer and helper processes share the group, so one
            // kill ends them all.
            .process_group(0)
            .spawn()
            .expect("start chromium");
        Browser { child, dir }
    }

    /// The end of Chromium's own output, for a failure message.
    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.path().join("chromium.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What the proxy has seen, shared with its connection tasks.
struct ProxyState {
    /// The piping tasks of every forwarded connection not yet cut.
    pipes: Mutex<Vec<AbortHandle>>,
    /// Event-stream requests forwarded so far (the first and reconnects).
    streams: watch::Sender<usize>,
    /// The highest `id:` forwarded to the browser.
    max_id: watch::Sender<u64>,
}

struct Proxy {
    addr: String,
    state: Arc<ProxyState>,
    results: mpsc::Receiver<String>,
}

impl Proxy {
    async fn start(gateway: String) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let (tx, results) = mpsc::channel(4);
        let state = Arc::new(ProxyState {
            pipes: Mutex::new(Vec::new()),
            streams: watch::channel(0).0,
            max_id: watch::channel(0).0,
        });
        let st = state.clone();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                tokio::spawn(serve_conn(tcp, st.clone(), gateway.clone(), tx.clone()));
            }
        });
        Proxy {
            addr,
            state,
            results,
        }
    }

    /// Cuts every forwarded connection: both sockets close at once, as when
    /// a network drops. Returns how many piping tasks were aborted.
    fn cut(&self) -> usize {
        let pipes = std::mem::take(&mut *self.state.pipes.lock().unwrap());
        for p in &pipes {
            p.abort();
        }
        pipes.len()
    }

    async fn wait_id(&self, id: u64, what: &str, browser: &Browser) {
        let mut rx = self.state.max_id.subscribe();
        let reached = tokio::time::timeout(BROWSER_WAIT, rx.wait_for(|m| *m >= id))
            .await
            .is_ok();
        if !reached {
            panic!(
                "{what}: id {id} never went through (got to {}); chromium said:\n{}",
                *rx.borrow(),
                browser.log_tail()
            );
        }
    }

    async fn wait_streams(&self, n: usize, what: &str, browser: &Browser) {
        let mut rx = self.state.streams.subscribe();
        let reached = tokio::time::timeout(BROWSER_WAIT, rx.wait_for(|s| *s >= n))
            .await
            .is_ok();
        if !reached {
            panic!("{what}; chromium said:\n{}", browser.log_tail());
        }
    }

    async fn result(&mut self, browser: &Browser) -> Value {
        match tokio::time::timeout(BROWSER_WAIT, self.results.recv()).await {
            Ok(Some(body)) => serde_json::from_str(&body).expect("result is JSON"),
            _ => panic!(
                "the page posted no result; chromium said:\n{}",
                browser.log_tail()
            ),
        }
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn content_length(head: &str) -> usize {
    head.lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0)
}

/// The largest complete `id: N` line in `bytes`.
fn max_id_in(bytes: &[u8]) -> Option<u64> {
    let text = String::from_utf8_lossy(bytes);
    text.split('\n')
        .collect::<Vec<_>>()
        .windows(2)
        // Only lines followed by another: the last may be cut short.
        .filter_map(|w| {
            w[0].trim_end_matches('\r')
                .strip_prefix("id: ")?
                .parse()
                .ok()
        })
        .max()
}

/// Serves `/page` and `/result`, and forwards any other connection to the
/// gateway as is.
async fn serve_conn(
    mut tcp: TcpStream,
    state: Arc<ProxyState>,
    gateway: String,
    results: mpsc::Sender<String>,
) {
    let mut buf = Vec::new();
    let head_end = loop {
        if let Some(p) = find(&buf, b"\r\n\r\n") {
            break p + 4;
        }
        let mut chunk = [0u8; 4096];
        match tcp.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut words = head.split_whitespace();
    let method = words.next().unwrap_or("").to_string();
    let target = words.next().unwrap_or("").to_string();

    if method == "GET" && (target == "/page" || target.starts_with("/page?")) {
        let resp = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\n\
             Content-Length: {}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n{PAGE}",
            PAGE.len()
        );
        let _ = tcp.write_all(resp.as_bytes()).await;
        let _ = tcp.shutdown().await;
        return;
    }
    if method == "POST" && target == "/result" {
        let len = content_length(&head);
        let mut body = buf[head_end..].to_vec();
        while body.len() < len {
            let mut chunk = [0u8; 4096];
            match tcp.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => body.extend_from_slice(&chunk[..n]),
            }
        }
        let _ = tcp
            .write_all(b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n")
            .await;
        let _ = tcp.shutdown().await;
        let _ = results
            .send(String::from_utf8_lossy(&body).into_owned())
            .await;
        return;
    }

    if target.starts_with("/v1/sessions/") {
        let last_event_id = head
            .lines()
            .find(|l| l.to_ascii_lowercase().starts_with("last-event-id:"))
            .unwrap_or("no Last-Event-ID");
        eprintln!("proxy: {method} {target} ({last_event_id})");
        state.streams.send_modify(|n| *n += 1);
    }
    let Ok(upstream) = TcpStream::connect(&gateway).await else {
        return;
    };
    let (mut client_r, mut client_w) = tcp.into_split();
    let (mut gw_r, mut gw_w) = upstream.into_split();
    let up = tokio::spawn(async move {
        if gw_w.write_all(&buf).await.is_ok() {
            let _ = tokio::io::copy(&mut client_r, &mut gw_w).await;
        }
        let _ = gw_w.shutdown().await;
    });
    let st = state.clone();
    let down = tokio::spawn(async move {
        // The recent bytes, so an `id:` line split across reads is seen.
        let mut tail: Vec<u8> = Vec::new();
        let mut chunk = vec![0u8; 8192];
        loop {
            let n = match gw_r.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if client_w.write_all(&chunk[..n]).await.is_err() {
                break;
            }
            tail.extend_from_slice(&chunk[..n]);
            if let Some(id) = max_id_in(&tail) {
                st.max_id.send_modify(|m| *m = (*m).max(id));
            }
            let keep = tail.len().saturating_sub(64);
            tail.drain(..keep);
        }
        let _ = client_w.shutdown().await;
    });
    state
        .pipes
        .lock()
        .unwrap()
        .extend([up.abort_handle(), down.abort_handle()]);
}

async fn run_turn(c: &mut Client, id: &str, text: &str) {
    let t = submit(c, id, text).await;
    let evs = turn_events(c, &t).await;
    let last = evs.last().expect("events");
    assert_eq!(last["payload"]["status"], "complete", "{last}");
}

async fn latest_seq(c: &mut Client, id: &str) -> u64 {
    c.ok(
        "session.events.since",
        json!({"session_id": id, "last_seen": 0, "limit": 10000}),
    )
    .await["latest_seq"]
        .as_u64()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_eventsource_gets_every_seq_exactly_once_across_a_cut_connection() {
    if !Path::new(CHROMIUM).exists() {
        common::skip(
            "the browser test tests/browser_sse.rs",
            &format!("{CHROMIUM} is not installed"),
            common::BROWSER_SETUP,
            "TETHER_REQUIRE_BROWSER",
        );
        return;
    }
    let dir = tempdir();
    // Replies stream one word per 40 ms, so a turn is still under way when
    // the test cuts the connection.
    let host = format!(
        "{} host --engine echo --delay-ms 40",
        env!("CARGO_BIN_EXE_tether")
    );
    let gw = Gateway::start(dir.path(), &["--host-command", &host]);
    let mut drv = gw.client().await;
    let r = drv
        .ok(
            "session.create",
            json!({"title": "browser", "messages": [
                {"role": "user", "text": "a seeded question"},
                {"role": "assistant", "text": "a seeded answer"}]}),
        )
        .await;
    let id = r["session"]["session_id"].as_str().unwrap().to_string();
    run_turn(&mut drv, &id, "before the browser came").await;
    let before = latest_seq(&mut drv, &id).await;

    let mut proxy = Proxy::start(gw.addr.clone()).await;
    let browser = Browser::start(&format!(
        "http://{}/page?session={id}&done={DONE}",
        proxy.addr
    ));
    proxy
        .wait_id(before, "the replay to the browser", &browser)
        .await;

    // A long turn streams live; the connection is cut in its middle.
    let long = "word ".repeat(40);
    let t = submit(&mut drv, &id, &long).await;
    let start = loop {
        let e = drv.next_event().await;
        if e["type"] == "message.start" && e["turn_id"] == t.as_str() {
            break e["seq"].as_u64().unwrap();
        }
    };
    proxy
        .wait_id(start, "the live turn to the browser", &browser)
        .await;
    let mut deltas = 0;
    while deltas < 3 {
        if drv.next_event().await["type"] == "message.delta" {
            deltas += 1;
        }
    }
    assert!(proxy.cut() >= 2, "the event stream was being forwarded");
    let evs = turn_events(&mut drv, &t).await;
    assert_eq!(evs.last().unwrap()["payload"]["text"], long.as_str());

    // More happens while the browser is away; it must get it by replay.
    run_turn(&mut drv, &id, "/tool ls {\"path\":\"/tmp\"}\nwhile away").await;
    proxy
        .wait_streams(2, "the browser did not reconnect", &browser)
        .await;
    // And the last turn arrives live on the new connection.
    run_turn(&mut drv, &id, DONE).await;

    let result = proxy.result(&browser).await;
    drop(browser);
    eprintln!("page: {result}");
    let latest = latest_seq(&mut drv, &id).await;
    assert_eq!(result["problems"], json!([]), "{result}");
    assert!(
        result["connection_errors"].as_u64().unwrap() >= 1,
        "the page never saw the cut: {result}"
    );
    assert!(result["opens"].as_u64().unwrap() >= 2, "{result}");
    let got: Vec<u64> = result["seqs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_u64().unwrap())
        .collect();
    assert_eq!(
        got,
        (1..=latest).collect::<Vec<_>>(),
        "every seq exactly once, in order"
    );
    // The same seqs the store holds.
    let all = drv
        .ok(
            "session.events.since",
            json!({"session_id": id, "last_seen": 0, "limit": 10000}),
        )
        .await;
    assert_eq!(seqs(all["events"].as_array().unwrap()), got);
}
