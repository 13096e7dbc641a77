//! `tether serve --stdio`: the protocol over stdin/stdout.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

use std::process::Stdio;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;

#[tokio::test]
async fn stdio_round_trip() {
    let dir = common::tempdir();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tether"))
        .args(["serve", "--stdio", "--data-dir"])
        .arg(dir.path())
        .env("RUST_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start tether --stdio");
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let ready = next(&mut lines).await;
    assert_eq!(ready["params"]["type"], "gateway.ready");

    let req = json!({"jsonrpc":"2.0","id":1,"method":"session.create","params":{"title":"cli","messages":[{"role":"user","text":"hi"}]}});
    stdin
        .write_all(format!("{req}\n").as_bytes())
        .await
        .unwrap();
    stdin.write_all(b"garbage\n").await.unwrap();
    let mut reply = None;
    let mut events = Vec::new();
    let mut parse_error = None;
    while reply.is_none() || events.len() < 2 || parse_error.is_none() {
        let f = next(&mut lines).await;
        if f["method"] == "event" {
            events.push(f["params"].clone());
        } else if f["id"] == 1 {
            reply = Some(f);
        } else {
            parse_error = Some(f);
        }
    }
    let reply = reply.unwrap();
    assert_eq!(reply["result"]["session"]["title"], "cli");
    assert_eq!(events[1]["type"], "message.user");
    assert_eq!(events[1]["seq"], 2);
    assert_eq!(parse_error.unwrap()["error"]["code"], -32700);

    drop(stdin);
    let status = tokio::time::timeout(std::time::Duration::from_secs(10), child.wait())
        .await
        .expect("exits when stdin closes")
        .unwrap();
    assert!(status.success());
}

async fn next(lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>) -> Value {
    let line = tokio::time::timeout(common::FRAME_WAIT, lines.next_line())
        .await
        .expect("timed out")
        .expect("read")
        .expect("a line");
    serde_json::from_str::<Value>(&line).expect("stdout carries only JSON")
}
