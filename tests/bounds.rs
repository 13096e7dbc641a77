//! Bounds on what one client can make the gateway do, black-box:
//! titles and `session.list` replies are bounded in bytes,
//! `session.events.stats` shows only the caller's profile, a dripped
//! `POST /rpc` body is cut, the descriptor limit is raised at start, and a
//! gateway out of descriptors or connections still answers (503, and
//! `/healthz` stays 200 at `--max-connections`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{tempdir, Client, Gateway};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Bounds waits for something the gateway does on its own.
const WAIT: Duration = Duration::from_secs(30);

async fn create(c: &mut Client, title: &str) -> String {
    let r = c
        .ok("session.create", json!({"title": title, "attach": false}))
        .await;
    r["session"]["session_id"].as_str().unwrap().to_string()
}

fn listed_ids(list: &Value) -> Vec<String> {
    list["sessions"]
        .as_array()
        .expect("sessions")
        .iter()
        .map(|s| s["session_id"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn a_title_over_max_title_bytes_is_refused_and_nothing_is_created() {
    let dir = tempdir();
    let gw = Gateway::start(dir.path(), &["--hosts", "1"]);
    let mut c = gw.client().await;
    // The bound is in bytes, not characters: 512 × "é" is 1024 bytes.
    let at_bound = "é".repeat(512);
    let parent = create(&mut c, &at_bound).await;
    let over = "x".repeat(1025);
    let e = c
        .err("session.create", json!({"title": over, "attach": false}))
        .await;
    assert_eq!(e["code"], -32602, "{e}");
    assert_eq!(e["data"]["field"], "title", "{e}");
    let e = c
        .err(
            "session.create",
            json!({"title": "é".repeat(513), "messages": [{"role": "user", "text": "hi"}]}),
        )
        .await;
    assert_eq!(
        (e["code"].clone(), e["data"]["field"].clone()),
        (json!(-32602), json!("title"))
    );
    let e = c
        .err(
            "session.branch",
            json!({"session_id": parent, "title": over}),
        )
        .await;
    assert_eq!(e["code"], -32602, "{e}");
    assert_eq!(e["data"]["field"], "title", "{e}");
    let list = c.ok("session.list", json!({"include_closed": true})).await;
    assert_eq!(
        listed_ids(&list),
        vec![parent.clone()],
        "nothing was created"
    );

    // A branch named after a parent whose title is at the bound gets a
    // title within it (the parent's part is shortened, never the number).
    let b = c.ok("session.branch", json!({"session_id": parent})).await;
    let title = b["session"]["title"].as_str().unwrap();
    assert!(title.len() <= 1024, "{} bytes", title.len());
    assert!(title.ends_with(" (branch 1)"), "{title}");
    let b = c.ok("session.branch", json!({"session_id": parent})).await;
    assert!(
        b["session"]["title"]
            .as_str()
            .unwrap()
            .ends_with(" (branch 2)"),
        "the shortened titles still count: {}",
        b["session"]["title"]
    );
}

#[tokio::test]
async fn max_title_bytes_is_a_flag() {
    let dir = tempdir();
    let gw = Gateway::start(dir.path(), &["--hosts", "0", "--max-title-bytes", "8"]);
    let mut c = gw.client().await;
    create(&mut c, "12345678").await;
    let e = c.err("session.create", json!({"title": "123456789"})).await;
    assert_eq!(e["data"]["field"], "title", "{e}");
}

/// Every page of `session.list` until `next_cursor` is null.
async fn all_pages(c: &mut Client, params: Value) -> Vec<Value> {
    let mut pages = Vec::new();
    let mut cursor = Value::Null;
    loop {
        let mut p = params.clone();
        p["cursor"] = cursor;
        let page = c.ok("session.list", p).await;
        cursor = page["next_cursor"].clone();
        pages.push(page);
        if cursor.is_null() {
            return pages;
        }
        assert!(pages.len() < 1000, "paging does not end");
    }
}

#[tokio::test]
async fn list_pages_end_early_at_max_list_bytes_and_the_cursor_goes_on_exactly() {
    let dir = tempdir();
    let gw = Gateway::start(
        dir.path(),
        &[
            "--hosts",
            "0",
            "--max-list-bytes",
            "8192",
            "--max-title-bytes",
            "20000",
        ],
    );
    let mut c = gw.client().await;
    let mut created = Vec::new();
    for i in 0..20 {
        let title = format!("{i:02}{}", "t".repeat(998));
        created.push(create(&mut c, &title).await);
    }
    let pages = all_pages(&mut c, json!({"limit": 500})).await;
    assert!(pages.len() > 1, "one page of 20 × 1000-byte titles");
    let mut seen = Vec::new();
    for page in &pages {
        let bytes = serde_json::to_string(page).unwrap().len();
        assert!(bytes <= 8192, "a page of {bytes} bytes");
        let ids = listed_ids(page);
        assert!(!ids.is_empty(), "an empty page: {page}");
        seen.extend(ids);
    }
    assert_eq!(seen.len(), 20, "each session once: {seen:?}");
    assert_eq!(
        seen.iter().collect::<HashSet<_>>(),
        created.iter().collect::<HashSet<_>>()
    );
    // Newest first across pages, as without the bound.
    let mut newest_first = created.clone();
    newest_first.reverse();
    assert_eq!(seen, newest_first);

    // `limit` still bounds a page too.
    let pages = all_pages(&mut c, json!({"limit": 3})).await;
    assert!(pages.iter().all(|p| listed_ids(p).len() <= 3));
    assert_eq!(pages.iter().map(|p| listed_ids(p).len()).sum::<usize>(), 20);

    // A session larger than the bound on its own still gets a page of its
    // own: paging always moves on.
    let big = create(&mut c, &"b".repeat(10_000)).await;
    let pages = all_pages(&mut c, json!({"limit": 500})).await;
    assert_eq!(listed_ids(&pages[0]), vec![big]);
    assert_eq!(pages.iter().map(|p| listed_ids(p).len()).sum::<usize>(), 21);
}

async fn as_user(gw: &Gateway, token: &str) -> Client {
    Client::connect(&format!("{}?token={token}", gw.url())).await
}

fn host_turns(stats: &Value) -> u64 {
    stats["hosts"]
        .as_array()
        .expect("hosts")
        .iter()
        .map(|h| h["active_turns"].as_u64().unwrap())
        .sum()
}

#[tokio::test]
async fn stats_show_only_the_callers_profile() {
    let dir = tempdir();
    let gw = Gateway::start(
        dir.path(),
        &["--hosts", "1", "--token", "alice:ta", "--token", "bob:tb"],
    );
    let mut alice = as_user(&gw, "ta").await;
    let r = alice.ok("session.create", json!({"title": "a"})).await;
    let id = r["session"]["session_id"].as_str().unwrap().to_string();
    alice
        .ok("prompt.submit", json!({"session_id": id, "text": "/hang"}))
        .await;
    // Wait until the turn is on the host.
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let s = alice.ok("session.events.stats", json!({})).await;
        // A turn held for a slot that is still starting counts on it too:
        // wait for the host itself to be up.
        let up = s["hosts"][0]["state"] == "up";
        if s["active_turns"].as_array().unwrap().len() == 1 && host_turns(&s) == 1 && up {
            assert_eq!(s["sessions_live"], 1, "{s}");
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{s}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut bob = as_user(&gw, "tb").await;
    let s = bob.ok("session.events.stats", json!({})).await;
    assert_eq!(s["active_turns"], json!([]), "{s}");
    assert_eq!(s["sessions_live"], 0, "{s}");
    assert_eq!(s["peers"], 1, "only bob himself: {s}");
    assert_eq!(s["ring"]["sessions"], 0, "{s}");
    assert_eq!(host_turns(&s), 0, "alice's turn shows in bob's hosts: {s}");
    // What every profile may see of the hosts: that they are there.
    let hosts = s["hosts"].as_array().unwrap();
    assert_eq!(hosts.len(), 1, "{s}");
    assert!(hosts[0]["pid"].is_u64(), "{s}");
    assert_eq!(hosts[0]["state"], "up", "{s}");
    alice
        .ok("session.interrupt", json!({"session_id": id}))
        .await;
}

/// The status of an HTTP answer, and whether the server then closed.
async fn status_and_close(tcp: &mut TcpStream, within: Duration) -> (u16, bool) {
    let mut got = Vec::new();
    let closed = tokio::time::timeout(within, tcp.read_to_end(&mut got))
        .await
        .is_ok();
    let text = String::from_utf8_lossy(&got);
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, closed)
}

#[tokio::test]
async fn a_post_body_dripped_byte_by_byte_is_cut_with_408() {
    let dir = tempdir();
    let gw = Gateway::start(
        dir.path(),
        &[
            "--hosts",
            "0",
            "--token",
            "p:tok",
            "--handshake-timeout-s",
            "2",
        ],
    );
    let mut tcp = TcpStream::connect(&gw.addr).await.unwrap();
    let head = format!(
        "POST /rpc HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer tok\r\n\
         Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n",
        gw.addr
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    let (mut read, mut write) = tcp.into_split();
    let drip = tokio::spawn(async move {
        for _ in 0..1000 {
            if write.write_all(b" ").await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    });
    let mut got = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(20), read.read_to_end(&mut got))
        .await
        .is_ok();
    drip.abort();
    let text = String::from_utf8_lossy(&got);
    assert!(closed, "the dripped body is still being read: {text:?}");
    assert!(text.starts_with("HTTP/1.1 408"), "{text:?}");

    // A body that arrives in time is served as before.
    let mut tcp = TcpStream::connect(&gw.addr).await.unwrap();
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"gateway.ping"}"#;
    let req = format!(
        "POST /rpc HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer tok\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        gw.addr,
        body.len()
    );
    tcp.write_all(req.as_bytes()).await.unwrap();
    let (status, _) = status_and_close(&mut tcp, WAIT).await;
    assert_eq!(status, 200);
}

/// `tether serve` under `sh -c "ulimit ...; exec tether serve ..."`: the
/// child is the gateway itself (exec), with the descriptor limits given.
fn spawn_with_ulimit(dir: &Path, ulimit: &str, extra: &[&str]) -> (Child, String) {
    let mut script = format!(
        "ulimit {ulimit} && exec '{}' serve --listen 127.0.0.1:0 --data-dir '{}'",
        env!("CARGO_BIN_EXE_tether"),
        dir.display()
    );
    for a in extra {
        script.push_str(&format!(" '{a}'"));
    }
    let mut child = Command::new("sh")
        .args(["-c", &script])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start tether");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("read start-up line");
    let addr = line
        .trim()
        .strip_prefix("tether listening on http://")
        .unwrap_or_else(|| panic!("unexpected start-up line {line:?}"))
        .to_string();
    (child, addr)
}

/// (soft, hard) "Max open files" of a process.
fn nofile(pid: u32) -> (String, String) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .expect("Max open files");
    let mut parts = line["Max open files".len()..].split_whitespace();
    (
        parts.next().unwrap().to_string(),
        parts.next().unwrap().to_string(),
    )
}

#[test]
fn the_soft_descriptor_limit_is_raised_to_the_hard_one() {
    let dir = tempdir();
    let (mut child, _) = spawn_with_ulimit(dir.path(), "-Sn 256", &["--hosts", "0"]);
    let (soft, hard) = nofile(child.id());
    let _ = child.kill();
    let _ = child.wait();
    assert_ne!(hard, "256", "the test needs a hard limit above 256");
    // An unlimited hard limit raises the soft one to the kernel's ceiling.
    let want = if hard == "unlimited" {
        std::fs::read_to_string("/proc/sys/fs/nr_open")
            .unwrap()
            .trim()
            .to_string()
    } else {
        hard.clone()
    };
    assert_eq!(soft, want, "soft {soft}, hard {hard}");
}

#[tokio::test]
async fn a_gateway_out_of_descriptors_answers_503_instead_of_hanging() {
    let dir = tempdir();
    let (mut child, addr) = spawn_with_ulimit(
        dir.path(),
        "-n 96",
        &["--hosts", "0", "--handshake-timeout-s", "120"],
    );
    // Silent connections, each holding a descriptor of the gateway, until
    // it has none left; those beyond wait in the listen backlog.
    let mut held = Vec::new();
    for _ in 0..150 {
        held.push(TcpStream::connect(&addr).await.unwrap());
    }
    let mut probe = TcpStream::connect(&addr).await.unwrap();
    probe
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .unwrap();
    let (status, closed) = status_and_close(&mut probe, Duration::from_secs(15)).await;
    let _ = child.kill();
    let _ = child.wait();
    assert!(closed, "the connection hangs in the backlog");
    assert_eq!(status, 503);
    drop(held);
}

#[tokio::test]
async fn healthz_stays_200_when_connections_are_full() {
    let dir = tempdir();
    let gw = Gateway::start(dir.path(), &["--hosts", "0", "--max-connections", "1"]);
    let mut c = gw.client().await;
    for _ in 0..3 {
        let mut tcp = TcpStream::connect(&gw.addr).await.unwrap();
        tcp.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .await
            .unwrap();
        let (status, closed) = status_and_close(&mut tcp, WAIT).await;
        assert_eq!(status, 200);
        assert!(closed, "an over-capacity probe is answered and closed");
    }
    // Anything else over the cap is still 503.
    let mut tcp = TcpStream::connect(&gw.addr).await.unwrap();
    tcp.write_all(b"GET /readyz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(status_and_close(&mut tcp, WAIT).await.0, 503);
    c.ok("gateway.ping", json!({})).await;
}
