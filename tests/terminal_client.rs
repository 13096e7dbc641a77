//! The terminal client (`tether new | sessions | send | attach`), black-box:
//! the real gateway, the real client commands as a script would run them,
//! and assertions on what lands on stdout, stderr and in the exit status.

mod common;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{tempdir, Gateway};
use serde_json::Value;

/// Generous: the machine running the tests may be loaded.
const WAIT: Duration = Duration::from_secs(30);

/// Runs `tether ARGS` against `url` and waits for it.
fn tether(url: &str, args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tether"))
        .args(args)
        .env("TETHER_URL", url)
        .env_remove("TETHER_TOKEN")
        .env_remove("TETHER_PROFILE")
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start tether");
    if let Some(text) = stdin {
        let mut pipe = child.stdin.take().expect("stdin");
        pipe.write_all(text.as_bytes()).expect("write stdin");
    }
    child.wait_with_output().expect("wait for tether")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `tether new --title TITLE`, asserting success; the id it printed.
fn new_session(url: &str, title: &str) -> String {
    let out = tether(url, &["new", "--title", title], None);
    assert_eq!(out.status.code(), Some(0), "new: {}", stderr(&out));
    let id = stdout(&out);
    assert!(
        id.starts_with("s_") && id.ends_with('\n') && id.trim().len() == id.len() - 1,
        "new prints only the id: {id:?}"
    );
    id.trim().to_string()
}

#[test]
fn send_streams_the_reply_and_exits_by_the_turns_outcome() {
    let dir = tempdir();
    let gw = Gateway::start(dir.path(), &[]);
    let url = gw.url();
    let id = new_session(&url, "x");

    let out = tether(&url, &["send", &id, "hello world"], None);
    assert_eq!(out.status.code(), Some(0), "send: {}", stderr(&out));
    assert_eq!(stdout(&out), "hello world\n");

    // The prompt from stdin, final newline dropped.
    let out = tether(&url, &["send", &id, "-"], Some("from stdin\n"));
    assert_eq!(out.status.code(), Some(0), "send -: {}", stderr(&out));
    assert_eq!(stdout(&out), "from stdin\n");

    // Tool events are reported on stderr; stdout keeps only the reply.
    let out = tether(
        &url,
        &["send", &id, "/tool lookup {\"q\":1}\nfound it"],
        None,
    );
    assert_eq!(out.status.code(), Some(0), "send /tool: {}", stderr(&out));
    assert_eq!(stdout(&out), "found it\n");
    assert!(
        stderr(&out).contains("[tool lookup"),
        "tool events on stderr: {}",
        stderr(&out)
    );

    // A failing turn: status 1, the engine's message on stderr.
    let out = tether(&url, &["send", &id, "/error boom"], None);
    assert_eq!(out.status.code(), Some(1), "stderr: {}", stderr(&out));
    assert!(stderr(&out).contains("boom"), "stderr: {}", stderr(&out));
    assert_eq!(stdout(&out), "");

    // An unknown session: the gateway answered (4001), so status 1.
    let out = tether(&url, &["send", "s_nonexistent", "hi"], None);
    assert_eq!(out.status.code(), Some(1), "stderr: {}", stderr(&out));
    assert!(
        stderr(&out).contains("no such session"),
        "stderr: {}",
        stderr(&out)
    );

    // Nothing listening: status 2.
    let out = tether("ws://127.0.0.1:1/ws", &["send", &id, "hi"], None);
    assert_eq!(out.status.code(), Some(2), "stderr: {}", stderr(&out));
    assert!(
        stderr(&out).contains("cannot connect"),
        "stderr: {}",
        stderr(&out)
    );
}

#[test]
fn a_wrong_or_missing_token_is_a_clear_status_2() {
    let dir = tempdir();
    let gw = Gateway::start(dir.path(), &["--token", "alice:alice-secret"]);
    let url = gw.url();

    let out = tether(&url, &["new", "--token", "wrong"], None);
    assert_eq!(out.status.code(), Some(2), "stderr: {}", stderr(&out));
    assert!(
        stderr(&out).contains("refused the token"),
        "stderr: {}",
        stderr(&out)
    );
    assert_eq!(stdout(&out), "");

    let out = tether(&url, &["send", "s_x", "hi"], None);
    assert_eq!(out.status.code(), Some(2), "stderr: {}", stderr(&out));
    assert!(
        stderr(&out).contains("wants a token"),
        "stderr: {}",
        stderr(&out)
    );

    // The right token works, through the environment too.
    let out = Command::new(env!("CARGO_BIN_EXE_tether"))
        .args(["new", "--url", &url])
        .env("TETHER_TOKEN", "alice-secret")
        .output()
        .expect("run tether new");
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    let id = stdout(&out).trim().to_string();
    let out = tether(
        &url,
        &["send", "--token", "alice-secret", &id, "authorized"],
        None,
    );
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    assert_eq!(stdout(&out), "authorized\n");
}

#[test]
fn sessions_lists_every_session_as_text_or_json() {
    let dir = tempdir();
    let gw = Gateway::start(dir.path(), &[]);
    let url = gw.url();
    let a = new_session(&url, "first one");
    let b = new_session(&url, "second one");

    let out = tether(&url, &["sessions"], None);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines.len(),
        2,
        "one line per session, no header off a tty: {text}"
    );
    assert!(
        lines[0].starts_with(&b) && lines[0].ends_with("second one"),
        "{text}"
    );
    assert!(
        lines[1].starts_with(&a) && lines[1].ends_with("first one"),
        "{text}"
    );

    let out = tether(&url, &["sessions", "--json"], None);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    let listed: Vec<Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON object per line"))
        .collect();
    let ids: Vec<&str> = listed
        .iter()
        .map(|s| s["session_id"].as_str().expect("session_id"))
        .collect();
    assert_eq!(ids, [b.as_str(), a.as_str()]);
    assert_eq!(listed[0]["title"], "second one");
}

/// A running `tether attach`: its stdin, and what it wrote so far.
struct Attached {
    child: Child,
    stdin: Option<ChildStdin>,
    out: Arc<Mutex<String>>,
    err: Arc<Mutex<String>>,
}

impl Attached {
    fn start(url: &str, session: &str) -> Attached {
        let mut child = Command::new(env!("CARGO_BIN_EXE_tether"))
            .args(["attach", "--url", url, session])
            .env_remove("TETHER_TOKEN")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start tether attach");
        let stdin = child.stdin.take();
        let out = collect(child.stdout.take().expect("stdout"));
        let err = collect(child.stderr.take().expect("stderr"));
        Attached {
            child,
            stdin,
            out,
            err,
        }
    }

    fn line(&mut self, text: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{text}").expect("write a prompt");
        stdin.flush().expect("flush");
    }

    fn stdout(&self) -> String {
        self.out.lock().expect("lock").clone()
    }

    fn stderr(&self) -> String {
        self.err.lock().expect("lock").clone()
    }

    /// Waits until stdout satisfies `cond`; panics with both streams after
    /// [`WAIT`].
    fn wait_stdout(&self, what: &str, cond: impl Fn(&str) -> bool) {
        self.wait(what, || cond(&self.stdout()));
    }

    fn wait_stderr(&self, what: &str, cond: impl Fn(&str) -> bool) {
        self.wait(what, || cond(&self.stderr()));
    }

    fn wait(&self, what: &str, cond: impl Fn() -> bool) {
        let deadline = Instant::now() + WAIT;
        while !cond() {
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}\n--- stdout:\n{}\n--- stderr:\n{}",
                self.stdout(),
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Closes stdin and waits for the exit status.
    fn finish(&mut self) -> Option<i32> {
        self.stdin = None;
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status.code();
            }
            assert!(
                Instant::now() < deadline,
                "attach did not exit after stdin closed\n--- stdout:\n{}\n--- stderr:\n{}",
                self.stdout(),
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Attached {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Appends everything `pipe` yields to a shared string, on a thread.
fn collect(mut pipe: impl Read + Send + 'static) -> Arc<Mutex<String>> {
    let text = Arc::new(Mutex::new(String::new()));
    let sink = text.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = pipe.read(&mut buf) {
            if n == 0 {
                break;
            }
            let chunk = String::from_utf8_lossy(&buf[..n]).into_owned();
            sink.lock().expect("lock").push_str(&chunk);
        }
    });
    text
}

fn count_lines(text: &str, line: &str) -> usize {
    text.lines().filter(|l| *l == line).count()
}

fn assert_no_duplicate_lines(text: &str) {
    let mut seen = std::collections::HashSet::new();
    for l in text.lines() {
        assert!(seen.insert(l), "line {l:?} printed twice:\n{text}");
    }
}

#[test]
fn attach_through_a_pipe_reconnects_across_a_gateway_restart() {
    let dir = tempdir();
    let mut gw = Gateway::start(dir.path(), &[]);
    let url = gw.url();
    let id = new_session(&url, "pipe");
    let out = tether(&url, &["send", &id, "said before"], None);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));

    let mut at = Attached::start(&url, &id);
    at.wait_stdout("the transcript", |o| {
        count_lines(o, "> said before") == 1 && count_lines(o, "said before") == 1
    });
    at.line("hello one");
    at.wait_stdout("the first reply", |o| count_lines(o, "hello one") == 1);

    gw.restart_same_port();
    at.wait_stderr("the reconnect", |e| e.contains("[reconnected"));
    assert!(at.stderr().contains("reconnecting"), "{}", at.stderr());

    at.line("hello two");
    at.wait_stdout("the second reply", |o| count_lines(o, "hello two") == 1);
    assert_eq!(at.finish(), Some(0), "stderr: {}", at.stderr());

    let out = at.stdout();
    for line in [
        "> said before",
        "said before",
        "> hello one",
        "hello one",
        "> hello two",
        "hello two",
    ] {
        assert_eq!(count_lines(&out, line), 1, "{line:?} once in:\n{out}");
    }
    assert_no_duplicate_lines(&out);
}

/// A TCP relay whose connections the test can cut, to drop a client's
/// connection while the gateway (and the turn) go on.
struct Relay {
    addr: String,
    open: Arc<Mutex<Vec<TcpStream>>>,
}

impl Relay {
    fn start(upstream: String) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind relay");
        let addr = listener.local_addr().expect("relay addr").to_string();
        let open: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let conns = open.clone();
        std::thread::spawn(move || {
            for down in listener.incoming() {
                let Ok(down) = down else { break };
                let Ok(up) = TcpStream::connect(&upstream) else {
                    continue;
                };
                let pairs = [
                    (down.try_clone(), up.try_clone()),
                    (up.try_clone(), down.try_clone()),
                ];
                let mut held = conns.lock().expect("lock");
                held.push(down);
                held.push(up);
                for pair in pairs {
                    if let (Ok(mut from), Ok(mut to)) = pair {
                        std::thread::spawn(move || {
                            let _ = std::io::copy(&mut from, &mut to);
                            let _ = to.shutdown(Shutdown::Both);
                        });
                    }
                }
            }
        });
        Relay { addr, open }
    }

    /// Cuts every connection relayed so far.
    fn cut(&self) {
        for s in self.open.lock().expect("lock").drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

#[test]
fn a_connection_dropped_mid_turn_resumes_without_repeating_text() {
    let dir = tempdir();
    let host = format!(
        "{} host --engine echo --delay-ms 150",
        env!("CARGO_BIN_EXE_tether")
    );
    let gw = Gateway::start(dir.path(), &["--host-command", &host]);
    let id = new_session(&gw.url(), "mid-turn");
    let relay = Relay::start(gw.addr.clone());

    let words: Vec<String> = (1..=30).map(|i| format!("w{i}")).collect();
    let prompt = words.join(" ");
    let mut at = Attached::start(&format!("ws://{}/ws", relay.addr), &id);
    at.line(&prompt);
    at.wait_stdout("the first words", |o| o.contains("\nw1 w2 "));
    relay.cut();
    at.wait_stderr("the reconnect", |e| e.contains("[reconnected"));
    assert_eq!(
        count_lines(&at.stdout(), &prompt),
        0,
        "the turn ended before the reconnect, so this run proves nothing"
    );
    assert_eq!(at.finish(), Some(0), "stderr: {}", at.stderr());

    let out = at.stdout();
    assert_eq!(
        count_lines(&out, &prompt),
        1,
        "the reply once, whole:\n{out}"
    );
    assert_eq!(count_lines(&out, &format!("> {prompt}")), 1, "{out}");
    assert_no_duplicate_lines(&out);
}

#[test]
fn ctrl_c_interrupts_the_running_turn_and_a_second_one_quits() {
    let dir = tempdir();
    let gw = Gateway::start(dir.path(), &[]);
    let id = new_session(&gw.url(), "hang");
    let mut at = Attached::start(&gw.url(), &id);
    at.line("/hang");
    at.wait_stdout("the turn's first delta", |o| o.contains('…'));

    let pid = at.child.id().to_string();
    let sigint = || {
        Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .expect("kill -INT");
    };
    sigint();
    at.wait_stdout("the interrupted turn", |o| o.contains("[interrupted]"));
    assert!(at.stderr().contains("[interrupting"), "{}", at.stderr());

    // The turn is over (and this is the second Ctrl-C): attach quits, 130.
    sigint();
    let deadline = Instant::now() + WAIT;
    let code = loop {
        if let Some(status) = at.child.try_wait().expect("try_wait") {
            break status.code();
        }
        assert!(Instant::now() < deadline, "attach did not quit on Ctrl-C");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(code, Some(130));
}
