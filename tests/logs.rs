//! What a newcomer's terminal shows: without `RUST_LOG`, one
//! line when the gateway starts and one when it stops, warnings, and no
//! colour codes when stderr is not a terminal.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::tempdir;

#[test]
fn a_quiet_default_start_and_stop_in_plain_text() {
    let dir = tempdir();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tether"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path())
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start tether");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.starts_with("tether listening on http://"), "{line}");
    // Let the hosts come up and say hello: their logs must stay quiet too.
    std::thread::sleep(Duration::from_millis(500));
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(
        !stderr.contains('\u{1b}'),
        "ANSI codes into a pipe: {stderr:?}"
    );
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 2, "{stderr}");
    assert!(lines[0].contains("gateway started"), "{stderr}");
    assert!(lines[0].contains("addr=127.0.0.1:"), "{stderr}");
    assert!(lines[1].contains("gateway stopped"), "{stderr}");
}

/// `tether serve` with a bad flag or environment value exits 64, as
/// documented for bad configuration; `--help` is no error and shows no
/// code comment; `--listen :0` is loopback.
#[test]
fn bad_serve_configuration_exits_64_and_help_is_clean() {
    let tether = || Command::new(env!("CARGO_BIN_EXE_tether"));
    let out = tether().args(["serve", "--no-such-flag"]).output().unwrap();
    assert_eq!(out.status.code(), Some(64), "{out:?}");
    let out = tether()
        .args(["serve"])
        .env("TETHER_HOSTS", "many")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64), "{out:?}");
    let out = tether().args(["serve", "--help"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(!help.contains("Boxed"), "{help}");

    let dir = tempdir();
    let mut child = tether()
        .args(["serve", "--listen", ":0", "--data-dir"])
        .arg(dir.path())
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        line.starts_with("tether listening on http://127.0.0.1:"),
        "{line}"
    );
    assert!(!line.ends_with(":0\n"), "{line}");
}
