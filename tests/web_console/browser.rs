//! Headless Chromium for the console test, through Playwright: the Rust
//! side of `tests/browser/driver.mjs`, which takes one JSON command per
//! line and answers each. Page scripts travel as functions' source text.

use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};

use crate::common::tempdir;

const CHROMIUM: &str = "/usr/bin/chromium";
const BROWSER_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/browser");
/// Bounds each wait on a page. Generous: Chromium is slow to start and to
/// reconnect (its backoff) on a loaded 2-core machine.
const PAGE_WAIT: Duration = Duration::from_secs(90);

/// Why the browser test cannot run here, if it cannot.
pub fn missing_prerequisite() -> Option<String> {
    if !Path::new(CHROMIUM).exists() {
        return Some(format!("{CHROMIUM} is not installed"));
    }
    if !Path::new(BROWSER_DIR)
        .join("node_modules/playwright-core")
        .exists()
    {
        return Some(format!("{BROWSER_DIR}/node_modules is missing"));
    }
    let node = std::process::Command::new("node").arg("--version").output();
    if !node.is_ok_and(|o| o.status.success()) {
        return Some("node is not installed".into());
    }
    None
}

/// Playwright behind `driver.mjs`, in a process group of its own (Chromium
/// and its helpers included), killed on drop.
pub struct Browser {
    child: Child,
    /// Chromium's profile: new and empty, removed even when the test fails.
    _profile: tempfile::TempDir,
    stdin: ChildStdin,
    answers: Lines<BufReader<ChildStdout>>,
    next_id: u64,
}

impl Browser {
    pub async fn start() -> Browser {
        let profile = tempdir();
        let mut cmd = std::process::Command::new("node");
        cmd.arg("driver.mjs")
            .current_dir(BROWSER_DIR)
            .env("BROWSER_PROFILE", profile.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .process_group(0);
        let mut child = tokio::process::Command::from(cmd)
            .kill_on_drop(true)
            .spawn()
            .expect("start node driver.mjs");
        let stdin = child.stdin.take().expect("stdin");
        let answers = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let mut b = Browser {
            child,
            _profile: profile,
            stdin,
            answers,
            next_id: 1,
        };
        let hello = b.answer(0).await;
        assert_eq!(hello, json!("ready"), "driver start-up");
        b
    }

    async fn answer(&mut self, id: u64) -> Value {
        loop {
            let line = tokio::time::timeout(PAGE_WAIT + Duration::from_secs(30), async {
                self.answers.next_line().await
            })
            .await
            .expect("the browser driver did not answer in time")
            .expect("read the driver's output")
            .expect("the browser driver exited");
            let a: Value = serde_json::from_str(&line)
                .unwrap_or_else(|_| panic!("driver said something that is not JSON: {line}"));
            if a["id"] != json!(id) {
                continue;
            }
            if a["ok"] != json!(true) {
                panic!("browser command {id} failed: {}", a["error"]);
            }
            return a["value"].clone();
        }
    }

    async fn cmd(&mut self, mut c: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        c["id"] = json!(id);
        let line = format!("{c}\n");
        self.stdin
            .write_all(line.as_bytes())
            .await
            .expect("write to the driver");
        self.answer(id).await
    }

    pub async fn open(&mut self, page: &str, url: &str) {
        self.cmd(json!({"cmd": "open", "page": page, "url": url}))
            .await;
    }

    /// Waits until `js` (a function's source) returns something truthy in
    /// the page; returns that.
    pub async fn wait(&mut self, page: &str, js: &str) -> Value {
        self.cmd(json!({"cmd": "wait", "page": page, "js": js,
            "timeout_ms": PAGE_WAIT.as_millis() as u64}))
            .await
    }

    pub async fn eval(&mut self, page: &str, js: &str) -> Value {
        self.cmd(json!({"cmd": "eval", "page": page, "js": js}))
            .await
    }

    pub async fn fill(&mut self, page: &str, selector: &str, text: &str) {
        self.cmd(json!({"cmd": "fill", "page": page, "selector": selector, "text": text}))
            .await;
    }

    pub async fn click(&mut self, page: &str, selector: &str) {
        self.cmd(json!({"cmd": "click", "page": page, "selector": selector}))
            .await;
    }

    pub async fn screenshot(&mut self, page: &str, path: &Path) {
        self.cmd(json!({"cmd": "screenshot", "page": page, "path": path}))
            .await;
    }

    /// Queues how the page answers its next dialogs (true accepts); the
    /// messages of the dialogs it has shown so far.
    pub async fn dialogs(&mut self, page: &str, answers: &[bool]) -> Vec<String> {
        let seen = self
            .cmd(json!({"cmd": "dialogs", "page": page, "answers": answers}))
            .await;
        seen.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|m| m.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Waits until the page has shown `n` dialogs; their messages.
    pub async fn wait_dialogs(&mut self, page: &str, n: usize) -> Vec<String> {
        let deadline = tokio::time::Instant::now() + PAGE_WAIT;
        loop {
            let seen = self.dialogs(page, &[]).await;
            if seen.len() >= n {
                return seen;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "page {page} showed {} dialogs, not {n}",
                seen.len()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Closes the browser cleanly (Drop kills what is left).
    pub async fn quit(&mut self) {
        self.cmd(json!({"cmd": "quit"})).await;
        let _ = tokio::time::timeout(Duration::from_secs(30), self.child.wait()).await;
    }

    pub async fn send_prompt(&mut self, page: &str, text: &str) {
        self.fill(page, "#prompt", text).await;
        self.click(page, "#send").await;
    }

    /// Waits until the page's socket is in `state`.
    pub async fn conn_state(&mut self, page: &str, state: &str) {
        let js = format!("() => document.querySelector('#conn').dataset.state === '{state}'");
        self.wait(page, &js).await;
    }

    /// Waits until the page has drawn an assistant reply whose final text
    /// is `text`.
    pub async fn reply(&mut self, page: &str, text: &str) {
        let js = format!(
            "() => [...document.querySelectorAll('#transcript li.msg.assistant:not(.streaming) .text')]\
             .some(e => e.textContent === {})",
            json!(text)
        );
        self.wait(page, &js).await;
    }

    /// Waits until the page's turn that is streaming shows at least `n` words.
    pub async fn streaming_words(&mut self, page: &str, n: usize) {
        let js = format!(
            "() => {{ const t = document.querySelector('#transcript li.msg.assistant.streaming .text'); \
             return !!t && t.textContent.split(' ').length > {n}; }}"
        );
        self.wait(page, &js).await;
    }

    /// What a page shows once it has drawn everything up to `latest`.
    pub async fn drawn(&mut self, page: &str, latest: u64) -> Value {
        let js = format!("() => document.querySelector('#watermark').textContent === '{latest}'");
        self.wait(page, &js).await;
        self.eval(
            page,
            "() => ({\
               seqs: [...document.querySelectorAll('#transcript [data-seq]')].map(e => Number(e.dataset.seq)),\
               replies: [...document.querySelectorAll('#transcript li.msg.assistant .text')].map(e => e.textContent),\
               mismatches: document.querySelectorAll('#transcript [data-stream-mismatch]').length,\
               streaming: document.querySelectorAll('#transcript li.msg.assistant.streaming').length,\
               duplicates_dropped: Number(document.querySelector('#session-view').dataset.duplicates),\
             })",
        )
        .await
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", "--", &format!("-{pid}")])
                .status();
        }
    }
}
