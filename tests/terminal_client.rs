//! The terminal client (`tether new | sessions | send | attach | hosts`), black-box:
//! the real gateway, the real client commands as a script would run them,
//! and assertions on what lands on stdout, stderr and in the exit status.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

use std::net::{Shutdown, TcpListener, TcpStream};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::terminal::{
    assert_no_duplicate_lines, count_lines, new_session, stderr, stdout, tether, Attached, WAIT,
};
use common::{tempdir, Gateway};
use serde_json::Value;

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

/// The parent pid of `pid`, from /proc.
fn parent_of(pid: &str) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid ...`; comm may hold spaces, so split after it.
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(1)?.parse().ok()
}

#[test]
fn hosts_lists_this_gateways_hosts_and_only_those() {
    let (dir_a, dir_b) = (tempdir(), tempdir());
    let a = Gateway::start(dir_a.path(), &["--hosts", "2"]);
    let b = Gateway::start(dir_b.path(), &["--hosts", "1"]);

    let pids = |gw: &Gateway, hosts: usize| -> Vec<String> {
        let deadline = Instant::now() + WAIT;
        loop {
            let out = tether(&gw.url(), &["hosts", "--pids"], None);
            assert_eq!(out.status.code(), Some(0), "hosts: {}", stderr(&out));
            let pids: Vec<String> = stdout(&out).lines().map(str::to_string).collect();
            // Right after the start a slot may still be spawning its host.
            if pids.len() == hosts {
                return pids;
            }
            assert!(Instant::now() < deadline, "hosts never all up: {pids:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let (of_a, of_b) = (pids(&a, 2), pids(&b, 1));
    for (gw, pids) in [(&a, &of_a), (&b, &of_b)] {
        for pid in pids.iter() {
            assert_eq!(
                parent_of(pid),
                gw.pid(),
                "host {pid} is a child of its own gateway"
            );
        }
    }

    // The table: one line per slot, no header off a terminal.
    let out = tether(&a.url(), &["hosts"], None);
    let table = stdout(&out);
    assert_eq!(table.lines().count(), 2, "{table}");
    for (line, pid) in table.lines().zip(&of_a) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(fields.get(1), Some(&pid.as_str()), "{table}");
        assert_eq!(fields.get(2), Some(&"up"), "{table}");
    }

    // Killing them (as the README does) crashes a running turn and only
    // this gateway's hosts: the other's keep their pids.
    let id = new_session(&a.url(), "crash");
    let mut hang = Command::new(env!("CARGO_BIN_EXE_tether"));
    hang.args(["send", "--url", &a.url(), &id, "/hang"]);
    let mut hang = Attached::spawn(hang);
    hang.wait_stdout("the hanging turn", |o| o.contains('…'));
    let killed = Command::new("sh")
        .args(["-c", "kill -9 $(tether hosts --pids)"])
        .env("PATH", path_with_tether())
        .env("TETHER_URL", a.url())
        .status()
        .expect("sh");
    assert!(killed.success());
    assert_eq!(hang.finish(), Some(1), "{}", hang.stderr());
    assert!(hang.stderr().contains("host"), "{}", hang.stderr());
    assert_eq!(pids(&b, 1), of_b, "the other gateway's host is untouched");
    let out = tether(&a.url(), &["send", &id, "after the crash"], None);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "after the crash\n");
}

/// `PATH` with the binary under test first, as `tether`.
fn path_with_tether() -> String {
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_tether"));
    let dir = bin.parent().expect("the binary's directory");
    format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}
