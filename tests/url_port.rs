//! `--url :PORT` means 127.0.0.1:PORT in every client command, as
//! `--listen :PORT` does for `tether serve`: `new`, `sessions`, `send`,
//! `attach` and `hosts`, given as the flag or as `TETHER_URL`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

use std::process::{Command, Output, Stdio};

use common::terminal::{stderr, stdout};
use common::{tempdir, Gateway};

/// `tether ARGS` with `TETHER_URL` as given (`None`: unset).
fn run(args: &[&str], env_url: Option<&str>, stdin: &str) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tether"));
    cmd.args(args)
        .env_remove("TETHER_URL")
        .env_remove("TETHER_TOKEN")
        .env_remove("TETHER_PROFILE")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(url) = env_url {
        cmd.env("TETHER_URL", url);
    }
    let mut child = cmd.spawn().expect("start tether");
    {
        use std::io::Write as _;
        let mut pipe = child.stdin.take().expect("stdin");
        pipe.write_all(stdin.as_bytes()).expect("write stdin");
    }
    child.wait_with_output().expect("wait for tether")
}

fn ok(what: &str, out: &Output) -> String {
    assert_eq!(
        out.status.code(),
        Some(0),
        "{what}: stdout {:?}, stderr {:?}",
        stdout(out),
        stderr(out)
    );
    stdout(out)
}

#[test]
fn a_colon_and_a_port_reach_the_gateway_on_loopback_in_every_client_command() {
    let dir = tempdir();
    let gw = Gateway::start(dir.path(), &[]);
    let port = gw.addr.rsplit(':').next().expect("a port").to_string();
    let short = format!(":{port}");

    let id = ok(
        "new --url :PORT",
        &run(&["new", "--url", &short, "--title", "short"], None, ""),
    )
    .trim()
    .to_string();
    assert!(id.starts_with("s_"), "{id}");
    let listed = ok(
        "sessions --url :PORT",
        &run(&["sessions", "--url", &short], None, ""),
    );
    assert!(listed.contains(&id), "{listed}");
    let reply = ok(
        "send --url :PORT",
        &run(&["send", "--url", &short, &id, "over loopback"], None, ""),
    );
    assert_eq!(reply, "over loopback\n");
    let hosts = ok(
        "hosts --url :PORT",
        &run(&["hosts", "--url", &short, "--pids"], None, ""),
    );
    assert!(!hosts.trim().is_empty(), "no host pids: {hosts:?}");
    let attached = ok(
        "attach --url :PORT",
        &run(&["attach", "--url", &short, &id], None, "typed\n"),
    );
    assert!(attached.contains("> typed\ntyped\n"), "{attached}");

    // The same from the environment.
    let listed = ok(
        "TETHER_URL=:PORT sessions",
        &run(&["sessions"], Some(&short), ""),
    );
    assert!(listed.contains(&id), "{listed}");
    let reply = ok(
        "TETHER_URL=:PORT send",
        &run(&["send", &id, "from the environment"], Some(&short), ""),
    );
    assert_eq!(reply, "from the environment\n");
}

#[test]
fn a_colon_without_a_port_is_a_bad_url_not_a_lookup() {
    let out = run(&["sessions", "--url", ":"], None, "");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("bad --url"), "{}", stderr(&out));
}
