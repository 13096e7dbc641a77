//! The README's "Two-minute tour", run as written: its commands are read
//! from README.md's text and given to `sh` as they stand, and what the tour
//! says happens is checked as the reader would see it. A README change
//! that breaks the tour (a command that no longer works, output that no
//! longer looks as shown, a step this test does not know) fails here.
//!
//! What is adapted, and only that, because a test cannot do it as a person
//! does:
//!
//! - `tether` is the binary under test (its directory leads `PATH`), and
//!   `cargo build --release` is not run: cargo built it for the test.
//! - The tour runs in a temporary directory standing for the clone's root
//!   (holding a copy of `examples/`), so `./tether-data` is the test's.
//! - The gateway listens on a free port, not 7878 (`TETHER_LISTEN`; the
//!   first start asks for `127.0.0.1:0`, the later ones for the port it
//!   got), the clients are pointed at it (`TETHER_URL`), and `127.0.0.1:7878`
//!   in a `curl` command is replaced by that address.
//! - The orphan grace is 1 s instead of 20 s (`TETHER_ORPHAN_GRACE_S`).
//! - Long-running commands (`tether serve`, the `attach`es, `curl -N`, a
//!   command ending in `&`) are started with `exec` in front (so the test
//!   holds the process itself, to signal it) and without the `&`, and the
//!   test ends them when the tour says to (Ctrl-C, Ctrl-D, "close every
//!   client").
//! - What the prose tells the reader to do is done by the test: typing in
//!   terminal A (`Type `…` in A`), opening the console (one HTTP GET: the
//!   console's own browser test is tests/web_console.rs), stopping the
//!   gateway with Ctrl-C, closing the clients.
//!
//! Without `curl` its steps are skipped with one `SKIPPED:` line.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

#[path = "readme_tour/http.rs"]
mod http;
#[path = "readme_tour/readme.rs"]
mod readme;
#[path = "readme_tour/run.rs"]
mod run;

use readme::{items, opened, tour_section, typed_in_a, Cmd, Item};
use run::Run;

const README: &str = include_str!("../README.md");

#[test]
fn the_readme_tour_works_as_written() {
    let section = tour_section(README);
    let mut run = Run::new();
    for item in items(section) {
        match item {
            Item::Prose(p) => prose(&mut run, &p),
            Item::Cmd(c) => command(&mut run, &c),
        }
    }
    run.finish();
}

/// Does what a paragraph tells the reader to do.
fn prose(run: &mut Run, p: &str) {
    for text in typed_in_a(p) {
        run.type_in_a(&text);
    }
    if let Some(url) = opened(p) {
        run.open_console(&url);
    }
    if p.contains("Stop the gateway (Ctrl-C") {
        run.stop_gateway();
    }
    if p.contains("Close every client") {
        run.close_clients();
    }
}

/// Runs one command of the tour, recognised by what it is.
fn command(run: &mut Run, c: &Cmd) {
    let cmd = c.command.as_str();
    for by_name in ["pkill", "killall"] {
        assert!(
            !cmd.split_whitespace().any(|w| w == by_name),
            "the tour must never kill by name ({by_name}): that hits other users' \
             processes, and the gateway itself: {cmd:?}"
        );
    }
    match cmd {
        _ if cmd.starts_with("cargo build") => run.done("build"),
        _ if cmd.starts_with("tether serve") => run.serve(c),
        _ if assignment(cmd).is_some() => run.assign(c, assignment(cmd).unwrap_or_default()),
        "tether attach $S" if c.comment.starts_with("terminal A") => run.attach_face(c, 'A'),
        "tether attach $S" if c.comment.starts_with("terminal B") => run.attach_face(c, 'B'),
        "tether attach $S" => run.come_back(c),
        "tether sessions" => run.sessions(c),
        "tether hosts" => run.hosts(c),
        "kill -9 $(tether hosts --pids)" => run.kill_hosts(c),
        "kill -9 $(cat tether-data/tether.lock)" => run.kill_gateway(c),
        _ if cmd.starts_with("tether send $S ") && cmd.ends_with('&') => run.send_hanging(c),
        _ if cmd.starts_with("tether send $S ") => run.send(c),
        _ if cmd.starts_with("curl") && cmd.contains("/rpc") => run.rpc(c),
        _ if cmd.starts_with("curl -N") => run.follow(c),
        _ if cmd.starts_with("curl") && cmd.contains("/metrics") => run.metrics(c),
        _ if cmd.starts_with("curl") && cmd.contains("/readyz") => run.readyz(c),
        _ => panic!(
            "the README's tour has a command this test does not know: {:?}\n\
             teach tests/readme_tour.rs what it should do",
            c.line
        ),
    }
}

/// `VAR=$(…)`: the variable's name.
fn assignment(cmd: &str) -> Option<&str> {
    let (var, value) = cmd.split_once('=')?;
    let ok = !var.is_empty() && var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    (ok && value.starts_with("$(") && value.ends_with(')')).then_some(var)
}
