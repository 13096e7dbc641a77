//! The tour's state (the gateway, the two terminals, the commands still
//! running) and what each step does and checks. See tests/readme_tour.rs
//! for what is adapted and why.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::http::http;

use super::readme::Cmd;
use crate::common::terminal::{count_lines, Attached, WAIT};

/// The address the README's commands use.
pub(crate) const README_ADDR: &str = "127.0.0.1:7878";
const RESTART: &str = "[turn failed: the gateway stopped mid-turn and was restarted \
                       (gateway_restart); send it again]";

/// Which engine the running gateway's hosts have.
#[derive(PartialEq)]
pub(crate) enum Engine {
    Echo,
    Agent,
}

pub struct Run {
    /// Stands for the clone's root.
    pub(crate) root: tempfile::TempDir,
    /// The gateway's address, once it has one (it keeps it across restarts).
    pub(crate) addr: Option<String>,
    pub(crate) gateway: Option<Attached>,
    /// The previous gateway was killed hard (not stopped).
    pub(crate) killed: bool,
    pub(crate) engine: Engine,
    /// Shell variables the tour set (`S=$(…)`).
    pub(crate) vars: Vec<(String, String)>,
    pub(crate) a: Option<Attached>,
    pub(crate) b: Option<Attached>,
    /// The turn started with `… &`.
    pub(crate) background: Option<Attached>,
    /// `curl -N`.
    pub(crate) follower: Option<Attached>,
    /// The epoch before the gateway was killed.
    pub(crate) epoch: Option<String>,
    pub(crate) curl: bool,
    /// The steps done, checked at the end.
    pub(crate) done: BTreeSet<&'static str>,
}

impl Run {
    pub fn new() -> Run {
        let root = tempfile::tempdir().expect("tempdir");
        let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
        let copy = root.path().join("examples");
        std::fs::create_dir(&copy).expect("mkdir examples");
        for entry in std::fs::read_dir(&examples).expect("examples/") {
            let entry = entry.expect("an entry");
            if entry.file_type().is_ok_and(|t| t.is_file()) {
                std::fs::copy(entry.path(), copy.join(entry.file_name())).expect("copy");
            }
        }
        let curl = Command::new("curl")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        if !curl {
            crate::common::skip(
                "the README tour's curl steps",
                "curl is not installed",
                "apt-get install -y curl",
                "TETHER_REQUIRE_CURL",
            );
        }
        Run {
            root,
            addr: None,
            gateway: None,
            killed: false,
            engine: Engine::Echo,
            vars: Vec::new(),
            a: None,
            b: None,
            background: None,
            follower: None,
            epoch: None,
            curl,
            done: BTreeSet::new(),
        }
    }

    pub fn done(&mut self, step: &'static str) {
        self.done.insert(step);
    }

    pub(crate) fn addr(&self) -> &str {
        self.addr.as_deref().expect("a gateway was started")
    }

    /// `sh -c LINE` as the tour runs it: in its root, with `tether` on
    /// `PATH` and pointed at the gateway.
    pub(crate) fn sh(&self, line: &str) -> Command {
        let bin = Path::new(env!("CARGO_BIN_EXE_tether"));
        let dir = bin.parent().expect("the binary's directory");
        let path = format!(
            "{}:{}",
            dir.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(line)
            .current_dir(self.root.path())
            .env("PATH", path)
            .env("TETHER_ORPHAN_GRACE_S", "1")
            .env_remove("TETHER_TOKEN")
            .env_remove("TETHER_PROFILE")
            .env_remove("RUST_LOG");
        if let Some(addr) = &self.addr {
            cmd.env("TETHER_URL", format!("ws://{addr}/ws"));
        }
        for (k, v) in &self.vars {
            cmd.env(k, v);
        }
        cmd
    }

    /// The README's line with the gateway's real address.
    pub(crate) fn adapted(&self, c: &Cmd) -> String {
        c.line.replace(README_ADDR, self.addr())
    }

    /// Runs `line` to the end (stdin empty).
    pub(crate) fn output(&self, line: &str) -> Output {
        self.sh(line)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("sh -c {line:?}: {e}"))
    }

    /// Runs a long-running command of the tour, held by the test.
    pub(crate) fn start(&self, line: &str) -> Attached {
        Attached::spawn(self.sh(&format!("exec {line}")))
    }

    pub(crate) fn var(&self, name: &str) -> &str {
        self.vars
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .unwrap_or_else(|| panic!("${name} was never set"))
    }

    pub(crate) fn faces(&self) -> impl Iterator<Item = (char, &Attached)> {
        [('A', &self.a), ('B', &self.b)]
            .into_iter()
            .filter_map(|(n, f)| f.as_ref().map(|f| (n, f)))
    }

    /// `tether serve …`: the listening line as the README shows it, and
    /// the terminals back on the new gateway.
    pub fn serve(&mut self, c: &Cmd) {
        assert!(
            self.gateway.is_none(),
            "the tour starts a gateway while one runs: {:?}",
            c.line
        );
        if c.line.contains("python3") {
            let python = Command::new("python3").arg("--version").output();
            assert!(
                python.is_ok_and(|o| o.status.success()),
                "python3 is needed (the README names it for the tests)"
            );
        }
        let reconnects: Vec<usize> = self
            .faces()
            .map(|(_, f)| f.stderr().matches("[reconnected").count())
            .collect();
        let listen = self.addr.clone().unwrap_or_else(|| "127.0.0.1:0".into());
        let mut cmd = self.sh(&format!("exec {}", c.line));
        cmd.env("TETHER_LISTEN", listen);
        let gw = Attached::spawn(cmd);
        gw.wait_stdout("the listening line", |o| o.contains('\n'));
        let first = gw.stdout().lines().next().unwrap_or_default().to_string();
        let addr = first
            .strip_prefix("tether listening on http://")
            .unwrap_or_else(|| panic!("not a listening line: {first:?}; {}", gw.stderr()))
            .to_string();
        if let Some(shown) = c.output.first() {
            assert_eq!(
                first,
                shown.replace(README_ADDR, &addr),
                "tether serve prints what the README shows"
            );
        }
        self.addr = Some(addr);
        self.gateway = Some(gw);
        self.engine = if c.line.contains("agent.py") {
            Engine::Agent
        } else {
            Engine::Echo
        };
        for ((name, face), before) in self.faces().zip(reconnects) {
            face.wait_stderr(&format!("terminal {name} reconnecting"), |e| {
                e.matches("[reconnected").count() > before
            });
            if self.killed {
                // The README: "[reconnected, 1 missed event]", the end of
                // the turn the crash cut.
                assert!(
                    face.stderr().contains("[reconnected, 1 missed event]"),
                    "terminal {name}: {}",
                    face.stderr()
                );
                face.wait_stdout(&format!("terminal {name}: the cut turn's end"), |o| {
                    o.contains(RESTART)
                });
            }
        }
        self.killed = false;
        self.done("serve");
    }

    /// `S=$(tether new …)`: the variable, for the commands after it.
    pub fn assign(&mut self, c: &Cmd, var: &str) {
        let out = self.output(&format!("{}\nprintf '%s' \"${var}\"", c.line));
        let value = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success() && value.starts_with("s_"),
            "{}: {value:?} {}",
            c.line,
            String::from_utf8_lossy(&out.stderr)
        );
        self.vars.push((var.to_string(), value));
        self.done("new");
    }

    /// `tether attach $S` in terminal A or B: it starts with its banner.
    pub fn attach_face(&mut self, c: &Cmd, name: char) {
        let face = self.start(&c.line);
        face.wait_stderr(&format!("terminal {name}'s banner"), |e| {
            e.contains("[attached to")
        });
        let banner = face.stderr();
        let banner = banner.lines().next().unwrap_or_default();
        let s = self.var("S");
        assert!(
            banner.starts_with(&format!("[attached to {s} \"demo\" (idle, seq "))
                && banner.contains("press Enter to send")
                && banner.contains("Ctrl-C interrupts"),
            "terminal {name}'s banner: {banner}"
        );
        match name {
            'A' => self.a = Some(face),
            _ => self.b = Some(face),
        }
        self.done("attach");
    }

    /// "Type `TEXT` in A": both terminals show the prompt, and the reply
    /// (or, for `/hang`, its first delta).
    pub fn type_in_a(&mut self, text: &str) {
        let a = self.a.as_mut().expect("terminal A is attached");
        a.line(text);
        let prompt = format!("> {text}");
        for (name, face) in self.faces() {
            face.wait_stdout(&format!("terminal {name} shows {text:?}"), |o| {
                let mut lines = o.lines().rev();
                if text == "/hang" {
                    lines.next() == Some("…") && lines.next() == Some(prompt.as_str())
                } else {
                    count_lines(o, &prompt) == 1 && count_lines(o, text) == 1
                }
            });
        }
        self.done("type");
    }

    /// `kill -9 $(cat tether-data/tether.lock)`: exactly the gateway dies.
    pub fn kill_gateway(&mut self, c: &Cmd) {
        let s = self.var("S").to_string();
        let resume = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"session.resume","params":{{"session_id":"{s}","attach":false,"omit_messages":true}}}}"#
        );
        let (_, body) = http(self.addr(), "POST", "/rpc", &resume);
        let r: Value = serde_json::from_str(&body).expect("a JSON-RPC answer");
        self.epoch = r["result"]["epoch"].as_str().map(str::to_string);
        let out = self.output(&c.line);
        assert!(out.status.success(), "{}: {out:?}", c.line);
        let mut gw = self.gateway.take().expect("a gateway runs");
        assert_eq!(gw.finish(), None, "the gateway was killed by a signal");
        for (name, face) in self.faces() {
            face.wait_stderr(&format!("terminal {name} losing it"), |e| {
                e.contains("[connection lost")
            });
        }
        self.killed = true;
        self.done("kill gateway");
    }

    /// `tether send $S /hang &`: a turn that never ends, under way.
    pub fn send_hanging(&mut self, c: &Cmd) {
        let line = c.command.trim_end_matches('&').trim();
        let hang = self.start(line);
        hang.wait_stdout("the hanging turn's first delta", |o| o.contains('…'));
        self.background = Some(hang);
        self.done("send &");
    }

    /// `tether hosts`: one line per host, each up with a pid.
    pub fn hosts(&mut self, c: &Cmd) {
        let deadline = Instant::now() + WAIT;
        loop {
            let out = self.output(&c.line);
            assert!(out.status.success(), "{}: {out:?}", c.line);
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            let up = text.lines().all(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                f.get(2) == Some(&"up") && f.get(1).is_some_and(|p| p.parse::<u32>().is_ok())
            });
            if text.lines().count() == 2 && up {
                break;
            }
            assert!(Instant::now() < deadline, "hosts not up: {text}");
            std::thread::sleep(Duration::from_millis(50));
        }
        self.done("hosts");
    }

    fn host_pids(&self) -> Vec<String> {
        let out = self.output("tether hosts --pids");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// `kill -9 $(tether hosts --pids)`: the running turn fails with
    /// `host_crash`, the gateway lives on, and new hosts replace the dead.
    pub fn kill_hosts(&mut self, c: &Cmd) {
        let before = self.host_pids();
        let out = self.output(&c.line);
        assert!(out.status.success(), "{}: {out:?}", c.line);
        let mut hang = self
            .background
            .take()
            .expect("a turn runs in the background");
        assert_eq!(hang.finish(), Some(1), "send exits 1: {}", hang.stderr());
        for (name, face) in self.faces() {
            face.wait_stdout(&format!("terminal {name}: the crash"), |o| {
                o.lines().any(|l| {
                    l.starts_with("[turn failed: compute host ")
                        && l.ends_with("(host_crash); send it again]")
                })
            });
        }
        let gw = self.gateway.as_mut().expect("a gateway");
        assert!(
            gw.child.try_wait().expect("try_wait").is_none(),
            "the gateway survives its hosts' kill"
        );
        let deadline = Instant::now() + WAIT;
        loop {
            let now = self.host_pids();
            if now.len() == 2 && now.iter().all(|p| !before.contains(p)) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "no new hosts: {before:?} {now:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        self.done("kill hosts");
    }

    /// `tether send $S "TEXT"`: exit 0 and the reply on stdout.
    pub fn send(&mut self, c: &Cmd) {
        let text = c.command["tether send $S ".len()..].trim_matches('"');
        let out = self.output(&c.line);
        let reply = String::from_utf8_lossy(&out.stdout).into_owned();
        assert_eq!(out.status.code(), Some(0), "{}: {out:?}", c.line);
        match self.engine {
            Engine::Echo => assert_eq!(reply, format!("{text}\n"), "{}", c.line),
            Engine::Agent => assert!(
                reply.starts_with("Hello from agent.py.\n")
                    && reply.contains(&format!("You said: {text}\n")),
                "the example agent's reply: {reply}"
            ),
        }
        self.done("send");
    }

    /// `tether sessions`: the session, in the state the README's comment
    /// names (`idle`, `parked`); waited for, since parking takes the grace.
    pub fn sessions(&mut self, c: &Cmd) {
        let state = ["idle", "parked", "running"]
            .into_iter()
            .find(|s| c.comment.split_whitespace().any(|w| w == *s))
            .unwrap_or_else(|| panic!("which state? {:?}", c.line));
        let s = self.var("S").to_string();
        let deadline = Instant::now() + WAIT;
        loop {
            let out = self.output(&c.line);
            assert!(out.status.success(), "{}: {out:?}", c.line);
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            let line = text.lines().find(|l| l.starts_with(&s)).unwrap_or("");
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.get(1) == Some(&state) {
                assert_eq!(fields.last(), Some(&"demo"), "{text}");
                break;
            }
            assert!(Instant::now() < deadline, "never {state}: {text}");
            std::thread::sleep(Duration::from_millis(100));
        }
        self.done("sessions");
    }

    /// "Stop the gateway (Ctrl-C …)": it drains and exits 0.
    pub fn stop_gateway(&mut self) {
        let mut gw = self.gateway.take().expect("a gateway runs");
        gw.interrupt();
        assert_eq!(gw.finish(), Some(0), "the drain exits 0: {}", gw.stderr());
        assert!(
            !gw.stderr().contains('\x1b'),
            "no ANSI colours into a pipe: {}",
            gw.stderr()
        );
        self.done("stop");
    }

    /// "Close every client": Ctrl-D in the terminals (they exit 0), and
    /// `curl -N` ends.
    pub fn close_clients(&mut self) {
        for (name, face) in [('A', self.a.take()), ('B', self.b.take())] {
            let mut face = face.expect("the terminal is open");
            assert_eq!(face.finish(), Some(0), "terminal {name}: {}", face.stderr());
        }
        // Dropping it kills it, as Ctrl-C would.
        self.follower = None;
        self.done("close");
    }

    /// `tether attach $S` after walking away: the whole transcript.
    pub fn come_back(&mut self, c: &Cmd) {
        let out = self.output(&c.line);
        let shown = String::from_utf8_lossy(&out.stdout).into_owned();
        let notices = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(0), "{}: {notices}", c.line);
        for line in ["> hello from A", "hello from A", RESTART, "> hello agent"] {
            assert_eq!(count_lines(&shown, line), 1, "{line:?} in:\n{shown}");
        }
        assert!(shown.contains("You said: hello agent\n"), "{shown}");
        assert!(notices.contains("[attached to"), "the banner: {notices}");
        self.done("come back");
    }

    /// Every step of the tour ran (a README that drops one fails here:
    /// teach this test the new tour).
    pub fn finish(self) {
        let mut want = vec![
            "serve",
            "new",
            "attach",
            "type",
            "console",
            "kill gateway",
            "send &",
            "hosts",
            "kill hosts",
            "send",
            "sessions",
            "stop",
            "close",
            "come back",
        ];
        if self.curl {
            want.extend(["rpc", "follow", "metrics", "readyz"]);
        }
        let missing: Vec<&&str> = want.iter().filter(|s| !self.done.contains(*s)).collect();
        assert!(missing.is_empty(), "tour steps not run: {missing:?}");
    }
}
