//! docs/CLIENTS.md's "in ten lines" steps for both client libraries, run
//! as written, the way tests/readme_tour.rs runs the README: the install
//! commands, the hello example and the command that runs it are read from
//! the page and given to `sh` as they stand, and the output is checked
//! against what the page shows. A page change that breaks a step fails
//! here, and so does a library that does not install or run from a local
//! checkout as documented.
//!
//! What is adapted, and only that:
//!
//! - The steps run in a temporary directory holding a fresh copy of the
//!   checkout's `clients/` as `tether/clients/` (no `node_modules`, no
//!   venv, as after a clone), so `my-app/` beside it is the test's.
//! - The gateway is the binary under test on a free port, not 7878:
//!   `127.0.0.1:7878` in an example is replaced by its address.
//! - npm and pip are told to prefer their caches and to stay quiet
//!   (`npm_config_prefer_offline`, ...); they still need the registries
//!   for `ws`, `websockets` and `hatchling` the first time.
//!
//! Beyond the page's own steps, each example is also pointed at a dead
//! port (it must fail within the connect timeout, saying why, never wait
//! in silence), and the TypeScript prose's other install (a plain linked
//! `npm install`, which brings no `ws`) must fail at once with
//! `NoWebSocketError` until its `npm install ws`.
//!
//! Without node and npm, or python3 with venv, or the registries, a part
//! is skipped with one `SKIPPED:` line, unless `TETHER_REQUIRE_CLIENTS=1`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

#[path = "clients_install/doc.rs"]
mod doc;
#[path = "clients_install/shell.rs"]
mod shell;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use common::{skip, tempdir, Gateway};
use doc::{backticked, hello, section, Hello};
use shell::{no_registry, Machine, Ran};

const CLIENTS_MD: &str = include_str!("../docs/CLIENTS.md");
const DOCS_ADDR: &str = "127.0.0.1:7878";
const REQUIRE: &str = "TETHER_REQUIRE_CLIENTS";
/// Generous: a cold npm or pip install on a loaded 2-core machine.
const INSTALL: Duration = Duration::from_secs(300);
/// A hello against a running gateway takes a second; against a dead port,
/// the connect timeout (10 s) and the start of an interpreter.
const HELLO: Duration = Duration::from_secs(90);

/// One install at a time: both are network and CPU heavy.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn works(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .output()
        .is_ok_and(|o| o.status.success())
}

/// A port nothing listens on (free a moment ago).
fn dead_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().expect("addr");
    drop(l);
    addr.to_string()
}

/// Runs the install block from the machine's root; the directory the
/// reader is in at its end (it `cd`s into the app), or None when the
/// registries cannot be reached.
fn install(m: &Machine, what: &str, script: &str) -> Option<PathBuf> {
    let out = m.sh(m.path(), &format!("{script}\npwd"), INSTALL);
    if no_registry(&out) {
        skip(
            what,
            "the package registry cannot be reached",
            "network access to registry.npmjs.org and pypi.org",
            REQUIRE,
        );
        return None;
    }
    assert!(
        out.ok,
        "{what}: the install steps failed:\n{script}\n{}",
        out.both()
    );
    let dir = out.stdout.lines().last().expect("pwd").trim().to_string();
    Some(PathBuf::from(dir))
}

/// Saves the example (pointed at `addr`) where the reader is, and runs
/// the page's command for it.
fn run_hello(m: &Machine, app: &Path, h: &Hello, addr: &str) -> Ran {
    assert!(
        h.source.contains(DOCS_ADDR),
        "the example connects to {DOCS_ADDR}"
    );
    std::fs::write(app.join(&h.file), h.source.replace(DOCS_ADDR, addr)).expect("save the example");
    m.sh(app, &h.run, HELLO)
}

/// The output the page shows: state lines (`[open]`) on stderr, the rest
/// on stdout, each in its order.
fn assert_shown(what: &str, out: &Ran, shown: &[String]) {
    assert!(out.ok, "{what} failed:\n{}", out.both());
    let (states, text): (Vec<&String>, Vec<&String>) =
        shown.iter().partition(|l| l.starts_with('['));
    let stdout: Vec<&str> = out.stdout.lines().collect();
    let stderr: Vec<&str> = out.stderr.lines().filter(|l| l.starts_with('[')).collect();
    assert_eq!(
        stdout,
        text,
        "{what}: stdout is not what the page shows\n{}",
        out.both()
    );
    assert_eq!(
        stderr,
        states,
        "{what}: the states are not what the page shows\n{}",
        out.both()
    );
}

/// Against a dead port: fails, says why at each attempt and in the end,
/// and does not wait longer than the connect timeout to say so.
fn assert_fails_loudly(what: &str, out: &Ran, error: &str, refused: &str) {
    assert!(
        !out.ok,
        "{what} against a dead port succeeded?\n{}",
        out.both()
    );
    assert!(
        !out.stderr.contains("(killed after"),
        "{what} against a dead port waited in silence until killed\n{}",
        out.both()
    );
    assert!(
        out.stderr.contains(error),
        "{what}: no {error}\n{}",
        out.both()
    );
    assert!(
        out.stderr.contains("could not connect to ws://127.0.0.1:"),
        "{what}: the error names the URL\n{}",
        out.both()
    );
    let reconnecting = format!("[reconnecting] {refused}");
    assert!(
        out.stderr.contains(&reconnecting),
        "{what}: each attempt says why ({reconnecting})\n{}",
        out.both()
    );
}

#[test]
fn the_typescript_library_installs_and_says_hello_as_written() {
    if !works("node", &["--version"]) || !works("npm", &["--version"]) {
        return skip(
            "the TypeScript install steps",
            "node or npm is not installed",
            "install Node 20 and npm",
            REQUIRE,
        );
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let page = section(CLIENTS_MD, "## TypeScript / JavaScript in ten lines");
    let h = hello(&page, "js");
    let data = tempdir();
    let gw = Gateway::start(data.path(), &[]);
    let m = Machine::new();

    let Some(app) = install(&m, "the TypeScript install steps", &h.install) else {
        return;
    };
    let lib = app.join("node_modules/tether-client");
    assert!(
        lib.join("src/index.js").is_file() && !lib.is_symlink(),
        "the documented install copies the library: {lib:?}"
    );
    assert!(
        app.join("node_modules/ws/package.json").is_file(),
        "and installs ws"
    );
    let out = run_hello(&m, &app, &h, &gw.addr);
    assert_shown(&h.run, &out, &h.output);
    let out = run_hello(&m, &app, &h, &dead_addr());
    assert_fails_loudly(&h.run, &out, "UnreachableError", "connect ECONNREFUSED");

    // The prose's other way: a plain, linked install of the checkout.
    let linked: Vec<String> = backticked(&page.prose, "npm install ../")
        .into_iter()
        .filter(|c| !c.contains("--install-links"))
        .collect();
    assert_eq!(
        linked.len(),
        1,
        "the page names one plain linked install: {linked:?}"
    );
    let add_ws = backticked(&page.prose, "npm install ws");
    assert_eq!(add_ws, ["npm install ws"], "and what to add to it");
    let other = m.path().join("linked-app");
    std::fs::create_dir(&other).expect("mkdir");
    let out = m.sh(&other, &linked[0], INSTALL);
    if no_registry(&out) {
        return skip(
            "the linked install",
            "the npm registry cannot be reached",
            "network",
            REQUIRE,
        );
    }
    assert!(out.ok, "{}: {}", linked[0], out.both());
    assert!(
        other.join("node_modules/tether-client").is_symlink(),
        "a link, as the page says"
    );
    if works(
        "node",
        &[
            "-e",
            "process.exit(typeof WebSocket === 'function' ? 1 : 0)",
        ],
    ) {
        // This Node has no WebSocket of its own (Node 20), and nothing
        // installed ws: the library must say so at once, not retry.
        let out = run_hello(&m, &other, &h, &gw.addr);
        assert!(
            !out.ok,
            "a linked install without ws worked?\n{}",
            out.both()
        );
        assert!(out.stderr.contains("NoWebSocketError"), "{}", out.both());
        assert!(
            out.stderr.contains("npm install ws"),
            "it says what to do\n{}",
            out.both()
        );
        assert!(
            !out.stderr.contains("[reconnecting]"),
            "never retried\n{}",
            out.both()
        );
    }
    let out = m.sh(&other, &add_ws[0], INSTALL);
    if no_registry(&out) {
        return skip(
            "npm install ws",
            "the npm registry cannot be reached",
            "network",
            REQUIRE,
        );
    }
    assert!(out.ok, "npm install ws: {}", out.both());
    let out = run_hello(&m, &other, &h, &gw.addr);
    assert_shown("the linked install with the app's ws", &out, &h.output);
}

#[test]
fn the_python_library_installs_and_says_hello_as_written() {
    if !works("python3", &["-c", "import venv, ensurepip"]) {
        return skip(
            "the Python install steps",
            "python3 with venv is not installed",
            "apt-get install -y python3-venv",
            REQUIRE,
        );
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let page = section(CLIENTS_MD, "## Python in ten lines");
    let h = hello(&page, "python");
    let data = tempdir();
    let gw = Gateway::start(data.path(), &[]);
    let m = Machine::new();

    let Some(app) = install(&m, "the Python install steps", &h.install) else {
        return;
    };
    assert!(
        app.join(".venv/bin/python").exists(),
        "a venv in the app: {app:?}"
    );
    let out = run_hello(&m, &app, &h, &gw.addr);
    assert_shown(&h.run, &out, &h.output);
    let out = run_hello(&m, &app, &h, &dead_addr());
    assert_fails_loudly(
        &h.run,
        &out,
        "Unreachable",
        "[Errno 111] Connect call failed",
    );
}
