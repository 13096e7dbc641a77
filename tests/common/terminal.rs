//! The terminal client as a script or a person runs it: `tether ARGS`
//! run to the end, and a long-running `tether attach` whose output is
//! watched while the test drives it. Shared by the client's black-box
//! tests (tests/terminal_client.rs, tests/terminal_outcomes.rs) and the
//! README tour (tests/readme_tour.rs).

use std::io::{Read, Write};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Generous: the machine running the tests may be loaded.
pub const WAIT: Duration = Duration::from_secs(30);

/// Runs `tether ARGS` against `url` and waits for it.
pub fn tether(url: &str, args: &[&str], stdin: Option<&str>) -> Output {
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

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `tether new --title TITLE`, asserting success; the id it printed.
pub fn new_session(url: &str, title: &str) -> String {
    let out = tether(url, &["new", "--title", title], None);
    assert_eq!(out.status.code(), Some(0), "new: {}", stderr(&out));
    let id = stdout(&out);
    assert!(
        id.starts_with("s_") && id.ends_with('\n') && id.trim().len() == id.len() - 1,
        "new prints only the id: {id:?}"
    );
    id.trim().to_string()
}

/// A running `tether attach`: its stdin, and what it wrote so far.
pub struct Attached {
    pub child: Child,
    stdin: Option<ChildStdin>,
    out: Arc<Mutex<String>>,
    err: Arc<Mutex<String>>,
}

impl Attached {
    pub fn start(url: &str, session: &str) -> Attached {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tether"));
        cmd.args(["attach", "--url", url, session])
            .env_remove("TETHER_TOKEN");
        Attached::spawn(cmd)
    }

    /// Runs `cmd` (an attach, however it is spelled) with its three
    /// streams piped to the test.
    pub fn spawn(mut cmd: Command) -> Attached {
        let mut child = cmd
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

    pub fn line(&mut self, text: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{text}").expect("write a prompt");
        stdin.flush().expect("flush");
    }

    pub fn stdout(&self) -> String {
        self.out.lock().expect("lock").clone()
    }

    pub fn stderr(&self) -> String {
        self.err.lock().expect("lock").clone()
    }

    /// Waits until stdout satisfies `cond`; panics with both streams after
    /// [`WAIT`].
    pub fn wait_stdout(&self, what: &str, cond: impl Fn(&str) -> bool) {
        self.wait(what, || cond(&self.stdout()));
    }

    pub fn wait_stderr(&self, what: &str, cond: impl Fn(&str) -> bool) {
        self.wait(what, || cond(&self.stderr()));
    }

    pub fn wait(&self, what: &str, cond: impl Fn() -> bool) {
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

    /// Ctrl-C, as a terminal sends it.
    pub fn interrupt(&self) {
        let status = Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status()
            .expect("kill -INT");
        assert!(status.success(), "kill -INT {}", self.child.id());
    }

    /// Closes stdin and waits for the exit status.
    pub fn finish(&mut self) -> Option<i32> {
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
pub fn collect(mut pipe: impl Read + Send + 'static) -> Arc<Mutex<String>> {
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

pub fn count_lines(text: &str, line: &str) -> usize {
    text.lines().filter(|l| *l == line).count()
}

pub fn assert_no_duplicate_lines(text: &str) {
    let mut seen = std::collections::HashSet::new();
    for l in text.lines() {
        assert!(seen.insert(l), "line {l:?} printed twice:\n{text}");
    }
}
