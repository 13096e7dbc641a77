//! Runs the scenarios of tests/frontends/*.mjs, which drive the real
//! front-end packages (the AI SDK's `ai`, AG-UI's `@ag-ui/client`, pinned
//! in tests/frontends/package-lock.json) against a gateway started by the
//! test. Without node, or without `npm ci --prefix tests/frontends`, a test
//! is skipped with one loud line, unless `TETHER_REQUIRE_CLIENTS=1` (CI)
//! makes that a failure.
// Each suite that includes this uses part of it.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;

/// How long a scenario may take to print its next line.
const LINE_WAIT: Duration = Duration::from_secs(90);

pub fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/frontends")
}

/// Whether the scenarios can run here; skips (loudly) or, in CI, fails
/// when they cannot.
pub fn available(test: &str) -> bool {
    let node = Command::new("node").arg("--version").output();
    let why = if !node.is_ok_and(|o| o.status.success()) {
        Some("node is not installed")
    } else if !dir().join("node_modules/ai/package.json").exists()
        || !dir()
            .join("node_modules/@ag-ui/client/package.json")
            .exists()
    {
        Some("tests/frontends/node_modules is missing")
    } else {
        None
    };
    match why {
        None => true,
        Some(why) => {
            crate::common::skip(
                test,
                why,
                "npm ci --prefix tests/frontends",
                "TETHER_REQUIRE_CLIENTS",
            );
            false
        }
    }
}

/// A running scenario.
pub struct Scenario {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    name: String,
}

impl Scenario {
    /// `node SCRIPT SCENARIO` with `env` (TETHER_URL and the like).
    pub fn start(script: &str, scenario: &str, env: &[(&str, &str)]) -> Scenario {
        let mut child = Command::new("node")
            // The library under test (tether-client) is linked into
            // node_modules; its imports resolve from here.
            .arg("--preserve-symlinks")
            .arg(dir().join(script))
            .arg(scenario)
            .envs(env.iter().copied())
            .current_dir(dir())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start node");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Scenario {
            stdin: child.stdin.take(),
            child,
            lines,
            name: format!("{script} {scenario}"),
        }
    }

    /// The next line the scenario printed, as JSON.
    pub fn line(&mut self) -> Value {
        let line = self
            .lines
            .recv_timeout(LINE_WAIT)
            .unwrap_or_else(|e| panic!("{}: no line within {LINE_WAIT:?}: {e}", self.name));
        serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("{}: not JSON ({e}): {line}", self.name))
    }

    /// Waits for `{"event": name}`.
    pub fn expect_event(&mut self, name: &str) {
        let line = self.line();
        assert_eq!(line["event"], name, "{}: {line}", self.name);
    }

    /// Tells the scenario to go on.
    pub fn go(&mut self) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "go").expect("write to the scenario");
        stdin.flush().expect("flush");
    }

    /// The scenario's result (it fails the test if the scenario failed).
    pub fn result(mut self) -> Value {
        let line = self.line();
        let _ = self.child.wait();
        match line.get("result") {
            Some(r) => r.clone(),
            None => panic!(
                "{} failed: {}",
                self.name,
                line["failed"].as_str().unwrap_or(&line.to_string())
            ),
        }
    }
}

impl Drop for Scenario {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs a scenario to its result.
pub fn run(script: &str, scenario: &str, env: &[(&str, &str)]) -> Value {
    Scenario::start(script, scenario, env).result()
}

/// The text of a UI message (AI SDK: its text parts, in order).
pub fn text_of(message: &Value) -> String {
    message["parts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["type"] == "text")
        .filter_map(|p| p["text"].as_str())
        .collect()
}

/// `n` words `w0 w1 ...`: an answer the echo engine streams one word per
/// delta, long enough to be cut, joined or stopped mid-way.
pub fn words(n: usize) -> String {
    (0..n)
        .map(|i| format!("w{i}"))
        .collect::<Vec<_>>()
        .join(" ")
}
