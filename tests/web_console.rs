//! The web console at `/` (docs/CONSOLE.md), as a person uses it: real
//! `tether serve` with a token, headless Chromium driven by Playwright
//! (`tests/browser/driver.mjs`), two pages on one session.
//!
//! Page A talks to the gateway directly; page B goes through a forwarding
//! proxy owned by this test, so the test can cut B's socket from outside the
//! page, as a network does, and keep it down while turns run. B must come
//! back by itself and end with every durable event drawn exactly once (each
//! carries `data-seq`), the same seqs the store holds, and the same replies
//! as A.
//!
//! Without Chromium, node or `tests/browser/node_modules` the browser test
//! is skipped with one `SKIPPED:` line on stderr, unless
//! `TETHER_REQUIRE_BROWSER=1` (CI) makes that a failure.
//! `.ci/run` installs all three.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

#[path = "web_console/browser.rs"]
mod browser;
#[path = "web_console/cut_proxy.rs"]
mod cut_proxy;

use std::collections::BTreeSet;
use std::path::Path;

use browser::{missing_prerequisite, Browser};
use common::{seqs, tempdir, Client, Gateway};
use cut_proxy::CutProxy;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const TOKEN: &str = "console-secret";

fn words(prefix: &str, n: usize) -> String {
    (1..=n)
        .map(|i| format!("{prefix}{i}"))
        .collect::<Vec<_>>()
        .join(" ")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_pages_share_a_session_and_a_cut_page_catches_up_exactly_once() {
    if let Some(why) = missing_prerequisite() {
        common::skip(
            "the browser test tests/web_console.rs",
            &why,
            common::BROWSER_SETUP,
            "TETHER_REQUIRE_BROWSER",
        );
        return;
    }
    let dir = tempdir();
    // One word per 40 ms: a turn is still streaming when the test acts.
    let host = format!(
        "{} host --engine echo --delay-ms 40",
        env!("CARGO_BIN_EXE_tether")
    );
    let token = format!("default:{TOKEN}");
    let gw = Gateway::start(dir.path(), &["--token", &token, "--host-command", &host]);
    let mut store = Client::connect(&format!("{}?token={TOKEN}", gw.url())).await;
    let proxy = CutProxy::start(gw.addr.clone()).await;
    let mut b = Browser::start().await;

    // Page A creates the session from the console's form.
    b.open("a", &format!("http://{}/?token={TOKEN}", gw.addr))
        .await;
    b.conn_state("a", "open").await;
    b.fill("a", "#new-title", "console test").await;
    b.click("a", "#create").await;
    let id = b
        .wait(
            "a",
            "() => document.querySelector('#session-view').dataset.sessionId",
        )
        .await;
    let id = id.as_str().expect("session id").to_string();
    b.wait(
        "a",
        "() => document.querySelector('#watermark').textContent === '1'",
    )
    .await;
    // An empty session has nothing to compress: the button says so
    // instead of writing a summary of nothing.
    b.wait(
        "a",
        "() => { const c = document.querySelector('#compress'); \
         return c.disabled && c.title === 'Nothing to compress yet'; }",
    )
    .await;

    // Page B finds it in the list (its link keeps the token) and opens it.
    b.open("b", &format!("http://{}/?token={TOKEN}", proxy.addr))
        .await;
    let item = format!("#sessions li[data-session-id=\"{id}\"] a");
    let href = b
        .wait(
            "b",
            &format!("() => document.querySelector('{item}')?.getAttribute('href')"),
        )
        .await;
    assert_eq!(
        href,
        json!(format!("/?token={TOKEN}#session={id}")),
        "a session link keeps the token"
    );
    b.click("b", &item).await;
    b.wait(
        "b",
        "() => document.querySelector('#watermark').textContent === '1'",
    )
    .await;
    // Who is attached: both pages by peer id and transport, B's marked.
    let mut own = Vec::new();
    for page in ["a", "b"] {
        own.push(
            b.eval(
                page,
                "() => document.querySelector('#gateway-meta').dataset.peerId",
            )
            .await,
        );
    }
    let attached = b
        .wait(
            "b",
            "() => { const li = [...document.querySelectorAll('#info-attached li')]; \
             return document.querySelector('#info-peer-count').textContent === '2' && li.length === 2 \
               && li.map(e => ({id: e.dataset.peerId, transport: e.dataset.transport, \
                                self: e.classList.contains('self'), text: e.textContent})); }",
        )
        .await;
    let listed: Vec<&Value> = attached.as_array().expect("peers").iter().collect();
    let mut ids: Vec<&Value> = listed.iter().map(|p| &p["id"]).collect();
    ids.sort_by_key(|v| v.as_str().map(str::to_string));
    let mut want: Vec<&Value> = own.iter().collect();
    want.sort_by_key(|v| v.as_str().map(str::to_string));
    assert_eq!(ids, want, "both pages are attached: {attached}");
    for p in &listed {
        assert_eq!(p["transport"], "ws", "{attached}");
        let is_b = p["id"] == own[1];
        assert_eq!(p["self"], is_b, "page B marks itself: {attached}");
        assert_eq!(
            p["text"]
                .as_str()
                .is_some_and(|t| t.ends_with("(this page)")),
            is_b,
            "{attached}"
        );
    }

    // A prompt from A: the same reply in both pages.
    b.send_prompt("a", "hello from page A").await;
    b.reply("a", "hello from page A").await;
    b.reply("b", "hello from page A").await;

    // A long turn streams; B's socket is cut in its middle and kept down
    // while that turn ends and two more run (a tool, todos).
    let long = words("w", 80);
    b.send_prompt("a", &long).await;
    b.streaming_words("b", 3).await;
    assert!(proxy.cut() >= 1, "page B's socket went through the proxy");
    b.conn_state("b", "reconnecting").await;
    // Nothing can be sent while disconnected; what is typed stays.
    let offline = b
        .eval(
            "b",
            "() => ['#send', '#interrupt', '#compress', '#prompt']\
             .map(s => document.querySelector(s).disabled)",
        )
        .await;
    assert_eq!(
        offline,
        json!([true, true, true, false]),
        "send, interrupt and compress are disabled, the prompt box is not"
    );
    b.reply("a", &long).await;
    b.send_prompt("a", "/tool ls {\"path\":\"/tmp\"}\nwhile away")
        .await;
    b.reply("a", "while away").await;
    // The last one is under way when B may come back.
    let last = words("z", 150);
    b.send_prompt("a", &format!("/todo first; second\n{last}"))
        .await;
    b.streaming_words("a", 5).await;
    proxy.restore();
    b.conn_state("b", "open").await;
    b.wait("b", "() => !document.querySelector('#send').disabled")
        .await;
    b.reply("a", &last).await;
    b.reply("b", &last).await;

    // B's buttons act for both: an interrupt ends A's hanging turn, and a
    // compression shows in both transcripts.
    b.send_prompt("a", "/hang").await;
    b.streaming_words("b", 0).await;
    b.click("b", "#interrupt").await;
    let interrupted =
        "() => document.querySelector('#transcript li.msg.assistant.status-interrupted')";
    b.wait("a", interrupted).await;
    b.wait("b", interrupted).await;
    // A failed turn's footer says what happened and whether to send it
    // again (gateway/src/console/endings.js; every reason: tests/ending_words.rs).
    b.send_prompt("a", "/crash").await;
    let told = "() => [...document.querySelectorAll('#transcript li.msg.assistant.status-error .foot')]\
                .some((f) => f.textContent === 'turn failed: the compute host died (host_crash); send it again')";
    b.wait("a", told).await;
    b.wait("b", told).await;
    // Compress asks first: declined, nothing happens; accepted, one
    // summary.
    b.dialogs("b", &[false, true]).await;
    b.click("b", "#compress").await;
    let asked = b.wait_dialogs("b", 1).await;
    assert!(
        asked[0].starts_with("Compress this session?"),
        "the question: {asked:?}"
    );
    b.click("b", "#compress").await;
    b.wait_dialogs("b", 2).await;
    let compacted = "() => document.querySelector('#transcript li.compacted')";
    b.wait("a", compacted).await;
    b.wait("b", compacted).await;

    // Both pages hold every durable event once: the store's seqs.
    let all = store
        .ok(
            "session.events.since",
            json!({"session_id": id, "last_seen": 0, "limit": 10000}),
        )
        .await;
    let events = all["events"].as_array().expect("events");
    let stored = seqs(events);
    let latest = all["latest_seq"].as_u64().expect("latest_seq");
    assert_eq!(stored, (1..=latest).collect::<Vec<_>>());
    let compactions = events
        .iter()
        .filter(|e| e["type"] == "session.compacted")
        .count();
    assert_eq!(compactions, 1, "one compression: the accepted one");
    let replies: Vec<Value> = events
        .iter()
        .filter(|e| e["type"] == "message.complete")
        .map(|e| e["payload"]["text"].clone())
        .collect();
    for page in ["a", "b"] {
        let shown = b.drawn(page, latest).await;
        eprintln!(
            "page {page}: {} elements with a seq, {} duplicate frames dropped",
            shown["seqs"].as_array().map_or(0, Vec::len),
            shown["duplicates_dropped"]
        );
        let got: Vec<u64> = shown["seqs"]
            .as_array()
            .expect("seqs")
            .iter()
            .map(|s| s.as_u64().expect("a seq"))
            .collect();
        let distinct: BTreeSet<u64> = got.iter().copied().collect();
        assert_eq!(got.len(), distinct.len(), "page {page} drew a seq twice");
        assert_eq!(
            distinct.into_iter().collect::<Vec<_>>(),
            stored,
            "page {page} drew exactly the stored seqs"
        );
        assert_eq!(
            shown["replies"],
            json!(replies),
            "page {page}'s replies are the stored ones"
        );
        assert_eq!(shown["mismatches"], 0, "page {page}'s streams were whole");
        assert_eq!(shown["streaming"], 0, "page {page} has no turn left open");
    }

    let shot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("console.png");
    b.screenshot("b", &shot).await;
    eprintln!("screenshot: {}", shot.display());
    b.quit().await;
}

/// A plain GET; returns (status, head lowercased, body).
async fn get(addr: &str, path: &str, extra: &str) -> (u16, String, String) {
    let mut tcp = TcpStream::connect(addr).await.expect("connect");
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n{extra}\r\n");
    tcp.write_all(req.as_bytes()).await.expect("write");
    let mut raw = Vec::new();
    tokio::time::timeout(common::FRAME_WAIT, tcp.read_to_end(&mut raw))
        .await
        .expect("answer in time")
        .expect("read");
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, head.to_ascii_lowercase(), body.to_string())
}

/// The status of a WebSocket upgrade (the answer's first line only: a
/// socket that opens stays open).
async fn upgrade_status(addr: &str, path: &str, headers: &str) -> u16 {
    let mut tcp = TcpStream::connect(addr).await.expect("connect");
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n{headers}\r\n");
    tcp.write_all(req.as_bytes()).await.expect("write");
    let mut buf = vec![0u8; 512];
    let n = tokio::time::timeout(common::FRAME_WAIT, tcp.read(&mut buf))
        .await
        .expect("answer in time")
        .expect("read");
    String::from_utf8_lossy(&buf[..n])
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

fn header<'a>(head: &'a str, name: &str) -> &'a str {
    head.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}: ")))
        .unwrap_or("")
}

#[tokio::test]
async fn the_console_is_served_without_a_token_with_its_types_and_a_strict_csp() {
    let dir = tempdir();
    let gw = Gateway::start(dir.path(), &["--token", &format!("default:{TOKEN}")]);
    let addr = gw.addr.as_str();

    let (status, head, body) = get(addr, "/", "").await;
    assert_eq!(status, 200, "{head}");
    assert_eq!(header(&head, "content-type"), "text/html; charset=utf-8");
    let csp = header(&head, "content-security-policy");
    for part in [
        "default-src 'none'",
        "script-src 'self'",
        "connect-src 'self'",
        "frame-ancestors 'none'",
    ] {
        assert!(csp.contains(part), "CSP {csp:?} lacks {part}");
    }
    assert!(!csp.contains("unsafe"), "{csp}");
    assert_eq!(header(&head, "referrer-policy"), "no-referrer");
    assert!(body.contains("src=\"/console/console.js\""), "{body}");

    // Every module the page loads, and every module they import (paths
    // relative to the importing module, so the client library's directory
    // too), is served as JavaScript.
    let mut todo = vec!["console.js".to_string()];
    let mut seen = BTreeSet::new();
    while let Some(name) = todo.pop() {
        if !seen.insert(name.clone()) {
            continue;
        }
        let (status, head, js) = get(addr, &format!("/console/{name}"), "").await;
        assert_eq!(status, 200, "{name}: {head}");
        assert_eq!(
            header(&head, "content-type"),
            "text/javascript; charset=utf-8",
            "{name}"
        );
        let dir = name.rsplit_once('/').map_or("", |(d, _)| d);
        for import in js.split("from \"./").skip(1) {
            if let Some((file, _)) = import.split_once('"') {
                todo.push(if dir.is_empty() {
                    file.to_string()
                } else {
                    format!("{dir}/{file}")
                });
            }
        }
    }
    assert!(
        seen.contains("tether-client/gateway.js"),
        "the console loads the client library: {seen:?}"
    );
    assert!(seen.len() >= 10, "the modules: {seen:?}");
    let (status, head, _) = get(addr, "/console/console.css", "").await;
    assert_eq!(status, 200);
    assert_eq!(header(&head, "content-type"), "text/css; charset=utf-8");
    let (status, _, _) = get(addr, "/console/nothing.js", "").await;
    assert_eq!(status, 404);

    // The page is public, the socket is not; the Origin rule holds on both.
    let upgrade = "Upgrade: websocket\r\nConnection: Upgrade\r\n\
        Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n";
    assert_eq!(
        upgrade_status(addr, "/ws", upgrade).await,
        401,
        "the WebSocket still needs the token"
    );
    let own = format!("Origin: http://{addr}\r\n{upgrade}");
    assert_eq!(
        upgrade_status(addr, &format!("/ws?token={TOKEN}"), &own).await,
        101,
        "the page's own origin may open the socket with the page's token"
    );
    let (status, _, _) = get(addr, "/", "Origin: http://evil.example\r\n").await;
    assert_eq!(status, 403);
}
