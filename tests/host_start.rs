//! A gateway whose compute hosts cannot start says so at once, and loudly:
//! the host command's own error is on the gateway's stderr, `/readyz` is
//! not ready, and `tether serve` exits 69 with a message naming the
//! problem, when no host said hello within `--host-start-deadline-s` or
//! sooner, when every slot is past its restart intensity before any did.
//! And the README's `--host-command "tether host …"` works with a PATH
//! that has no `tether` on it: a first word `tether` is the gateway's own
//! executable.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{session, tempdir, Client};
use serde_json::json;

/// A host command no shell finds.
const MISSING: &str = "tether-no-such-agent-4c1f host --engine echo";

/// A running `tether serve` with its stderr kept.
struct Serve {
    child: Child,
    addr: Option<String>,
    stderr: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Serve {
    /// `tether serve ARGS` on a free port, with `path` as its PATH (`None`:
    /// the test's own); waits for the listening line.
    fn start(dir: &std::path::Path, args: &[&str], path: Option<&str>) -> Serve {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tether"));
        cmd.args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir)
            .args(args)
            .env("RUST_LOG", "warn")
            .env_remove("TETHER_HOST_COMMAND")
            .env_remove("TETHER_HOST_START_DEADLINE_S")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(path) = path {
            cmd.env("PATH", path);
        }
        let mut child = cmd.spawn().expect("start tether serve");
        let stderr = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let mut pipe = child.stderr.take().expect("stderr");
        let kept = stderr.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                let text = String::from_utf8_lossy(&buf[..n]).into_owned();
                kept.lock().expect("stderr").push_str(&text);
            }
        });
        let mut line = String::new();
        let _ = BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line);
        let addr = line
            .trim()
            .strip_prefix("tether listening on http://")
            .map(str::to_string);
        Serve {
            child,
            addr,
            stderr,
        }
    }

    fn addr(&self) -> &str {
        self.addr.as_deref().unwrap_or_else(|| {
            panic!(
                "no listening line; stderr: {}",
                self.stderr.lock().expect("stderr")
            )
        })
    }

    fn stderr(&self) -> String {
        self.stderr.lock().expect("stderr").clone()
    }

    /// The exit status within `bound`, or `None` if it still runs.
    fn exit_within(&mut self, bound: Duration) -> Option<i32> {
        let until = Instant::now() + bound;
        while Instant::now() < until {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status.code().unwrap_or(-1));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `GET /readyz`: status and body.
fn readyz(addr: &str) -> (u16, String) {
    use std::io::Write as _;
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    write!(
        s,
        "GET /readyz HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .expect("request");
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    let status = out
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = out.split("\r\n\r\n").nth(1).unwrap_or_default().to_string();
    (status, body)
}

#[test]
fn a_host_command_that_cannot_start_is_told_and_serve_exits_69_at_the_deadline() {
    let dir = tempdir();
    // Restarted without end (no rest), so only the deadline ends it.
    let mut gw = Serve::start(
        dir.path(),
        &[
            "--hosts",
            "1",
            "--host-command",
            MISSING,
            "--host-restarts",
            "1000",
            "--host-start-deadline-s",
            "3",
        ],
        None,
    );
    let (status, body) = readyz(gw.addr());
    assert_eq!(status, 503, "ready with no host: {body}");
    assert!(body.contains("no compute host up"), "{body}");
    let code = gw.exit_within(Duration::from_secs(20));
    let stderr = gw.stderr();
    assert_eq!(code, Some(69), "serve's exit; stderr:\n{stderr}");
    assert!(
        stderr.contains("tether-no-such-agent-4c1f: not found"),
        "the host command's own error: {stderr}"
    );
    assert!(
        stderr.contains("no compute host said hello within 3 s")
            && stderr.contains("--host-start-deadline-s")
            && stderr.contains("the last host to die: "),
        "serve says why it exits: {stderr}"
    );
}

#[test]
fn with_the_default_settings_a_missing_host_command_ends_serve_as_soon_as_every_slot_gave_up() {
    let dir = tempdir();
    let mut gw = Serve::start(dir.path(), &["--host-command", MISSING], None);
    let (status, _) = readyz(gw.addr());
    assert_eq!(status, 503);
    // Three restarts per slot (250 ms, 500 ms, 1 s of backoff), then both
    // slots rest: well before the 30 s deadline.
    let code = gw.exit_within(Duration::from_secs(20));
    let stderr = gw.stderr();
    assert_eq!(code, Some(69), "serve's exit; stderr:\n{stderr}");
    assert!(
        stderr.contains("no compute host could start")
            && stderr.contains("the last host to die: ")
            && stderr.contains("--host-command"),
        "serve says why it exits: {stderr}"
    );
}

#[test]
fn a_host_that_never_says_hello_ends_serve_at_the_deadline() {
    let dir = tempdir();
    let mut gw = Serve::start(
        dir.path(),
        &[
            "--hosts",
            "1",
            "--host-command",
            "sleep 600",
            "--host-start-deadline-s",
            "2",
        ],
        None,
    );
    assert_eq!(readyz(gw.addr()).0, 503);
    let code = gw.exit_within(Duration::from_secs(15));
    let stderr = gw.stderr();
    assert_eq!(code, Some(69), "serve's exit; stderr:\n{stderr}");
    assert!(
        stderr.contains("no compute host said hello within 2 s"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readmes_tether_host_command_runs_without_tether_on_path() {
    let dir = tempdir();
    // A PATH with a shell and python but no tether.
    let gw = Serve::start(
        dir.path(),
        &[
            "--hosts",
            "1",
            "--host-command",
            "tether host --engine echo",
        ],
        Some("/usr/local/bin:/usr/bin:/bin"),
    );
    let mut c = Client::connect(&format!("ws://{}/ws", gw.addr())).await;
    let id = session(&mut c).await;
    let r = c
        .ok(
            "prompt.submit",
            json!({"session_id": id, "text": "no PATH needed"}),
        )
        .await;
    let turn = r["turn_id"].as_str().expect("a turn").to_string();
    let done = loop {
        let e = c.next_event().await;
        if e["type"] == "message.complete" && e["turn_id"] == turn.as_str() {
            break e;
        }
    };
    assert_eq!(
        done["payload"]["status"],
        "complete",
        "{done}; stderr: {}",
        gw.stderr()
    );
    assert_eq!(done["payload"]["text"], "no PATH needed");
    assert_eq!(readyz(gw.addr()).0, 200);
}
