//! Credentials written into a URL never reach a client or a log line
//! (PROTOCOL Part 4, "Secrets"), black-box: the `openai` engine pointed at
//! an unreachable model server whose base URL carries a user and a
//! password. The turn fails and the compression fails, with errors that
//! name the server, but neither the events, nor the answers, nor the
//! gateway's log (its hosts' included) hold the password.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use common::{complete, session, submit, tempdir, turn_events, Client};
use serde_json::json;

/// The password in the base URL; nothing may show it.
const PASSWORD: &str = "hunter2pw";

#[tokio::test]
async fn a_base_url_with_credentials_is_masked_in_events_answers_and_logs() {
    // A port that was just free: nothing listens there.
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = free.local_addr().unwrap().port();
    drop(free);
    let base_url = format!("http://user:{PASSWORD}@127.0.0.1:{port}/v1");
    let host = format!(
        "{} host --engine openai --base-url {base_url} --model test-model \
         --api-key-env TETHER_TEST_NO_SUCH_KEY",
        env!("CARGO_BIN_EXE_tether")
    );
    let dir = tempdir();
    let log = dir.path().join("gateway.log");
    let mut child = Kill(
        Command::new(env!("CARGO_BIN_EXE_tether"))
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir.path().join("data"))
            .args(["--hosts", "1", "--host-command", &host])
            .env("RUST_LOG", "debug")
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let mut line = String::new();
    BufReader::new(child.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .trim()
        .strip_prefix("tether listening on http://")
        .unwrap_or_else(|| panic!("unexpected start-up line {line:?}"))
        .to_string();
    let mut c = Client::connect(&format!("ws://{addr}/ws")).await;
    let id = session(&mut c).await;

    let t = submit(&mut c, &id, "hi").await;
    let events = turn_events(&mut c, &t).await;
    assert_eq!(complete(&events)["status"], "error", "{events:?}");
    let shown = serde_json::to_string(&events).unwrap();
    assert!(!shown.contains(PASSWORD), "the turn's events: {shown}");
    // The error still says which server, with the user and without the
    // password.
    assert!(
        shown.contains(&format!("http://user:***@127.0.0.1:{port}/v1")),
        "{shown}"
    );

    let e = c.err("session.compress", json!({"session_id": id})).await;
    assert_eq!(e["code"], 5019, "{e}");
    assert!(
        !e.to_string().contains(PASSWORD),
        "the compress answer: {e}"
    );
    assert!(e.to_string().contains("user:***@"), "{e}");

    let stored = c
        .ok(
            "session.events.since",
            json!({"session_id": id, "last_seen": 0}),
        )
        .await;
    assert!(
        !stored.to_string().contains(PASSWORD),
        "the stored events: {stored}"
    );

    let _ = Command::new("kill")
        .args(["-TERM", &child.0.id().to_string()])
        .status();
    let _ = child.0.wait();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("openai engine"),
        "the host's start is logged: {text}"
    );
    let shown: Vec<&str> = text.lines().filter(|l| l.contains(PASSWORD)).collect();
    assert!(shown.is_empty(), "the password in the log: {shown:?}");
}

/// Kills the gateway if the test ends early.
struct Kill(std::process::Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
