//! The client libraries' own suites, run against this build's binary so
//! that the README's one test command (`cargo test --workspace`) runs them
//! too: clients/typescript (`tsc --noEmit`, then `node --test`) and
//! clients/python (`mypy --strict`, then `pytest`, which also drives the
//! host library and its examples). Each suite starts its own gateways from `TETHER_BIN`.
//!
//! Without node and `npm ci` in clients/typescript, or without the venv
//! clients/python/.venv (with the package and its `test` extras), a suite
//! is skipped with one loud line, unless `TETHER_REQUIRE_CLIENTS=1` (CI)
//! makes that a failure. `.ci/run` installs both; docs/CLIENTS.md says how.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Instant;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// One suite at a time: each is timing-tolerant, but two at once on a
/// 2-core machine only make both slower.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn typescript_dir() -> PathBuf {
    Path::new(ROOT).join("clients/typescript")
}

fn python_dir() -> PathBuf {
    Path::new(ROOT).join("clients/python")
}

/// Skips (loudly) or, under TETHER_REQUIRE_CLIENTS=1, fails.
fn missing(suite: &str, why: &str) {
    if std::env::var("TETHER_REQUIRE_CLIENTS").as_deref() == Ok("1") {
        panic!("TETHER_REQUIRE_CLIENTS=1 but the {suite} cannot run: {why}");
    }
    // Straight to the process's stderr: libtest captures `eprintln!` of a
    // passing test, and a skip must be seen.
    let _ = writeln!(
        std::io::stderr().lock(),
        "SKIPPED: the {suite} did not run: {why}"
    );
}

fn node_missing() -> Option<String> {
    let node = Command::new("node").arg("--version").output();
    if !node.is_ok_and(|o| o.status.success()) {
        return Some("node is not installed".into());
    }
    if !typescript_dir().join("node_modules/ws").exists() {
        return Some(
            "clients/typescript/node_modules is missing: run `npm ci --prefix clients/typescript`"
                .into(),
        );
    }
    None
}

fn venv_python() -> PathBuf {
    python_dir().join(".venv/bin/python")
}

fn python_missing() -> Option<String> {
    let ok = Command::new(venv_python())
        .args(["-c", "import tether_client, websockets, pytest, mypy"])
        .output()
        .is_ok_and(|o| o.status.success());
    if ok {
        None
    } else {
        Some(
            "clients/python/.venv lacks the package or its test extras: run `python3 -m venv clients/python/.venv && \
             clients/python/.venv/bin/pip install -e 'clients/python[test]'`"
                .into(),
        )
    }
}

/// Runs `cmd` to the end; its output is shown only when it fails (and the
/// runner's summary lines always).
fn run(what: &str, cmd: &mut Command) {
    let started = Instant::now();
    let out = cmd
        .env("TETHER_BIN", env!("CARGO_BIN_EXE_tether"))
        .env("RUST_LOG", "warn")
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        panic!(
            "{what} failed ({}) after {:.1} s\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
            out.status,
            started.elapsed().as_secs_f64()
        );
    }
    let summary: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("# pass") || l.starts_with("# fail") || l.contains(" passed"))
        .collect();
    eprintln!(
        "{what}: ok in {:.1} s {}",
        started.elapsed().as_secs_f64(),
        summary.join(" ")
    );
}

#[test]
fn the_typescript_library_passes_its_type_check_and_its_suite() {
    if let Some(why) = node_missing() {
        return missing("TypeScript library's suite", &why);
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = typescript_dir();
    run(
        "tsc --noEmit (clients/typescript)",
        Command::new("node")
            .arg("node_modules/typescript/bin/tsc")
            .args(["--noEmit", "-p", "."])
            .current_dir(&dir),
    );
    let mut files: Vec<String> = std::fs::read_dir(dir.join("test"))
        .expect("clients/typescript/test")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".test.js"))
        .map(|n| format!("test/{n}"))
        .collect();
    files.sort();
    assert!(files.len() >= 5, "the TypeScript tests: {files:?}");
    run(
        "node --test (clients/typescript)",
        Command::new("node")
            .args(["--test", "--test-concurrency=1"])
            .args(&files)
            .current_dir(&dir),
    );
}

#[test]
fn the_python_library_passes_its_type_check_and_its_suite() {
    if let Some(why) = python_missing() {
        return missing("Python library's suite", &why);
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    // The package ships py.typed: its annotations must hold.
    run(
        "mypy --strict (clients/python)",
        Command::new(venv_python())
            .args([
                "-m",
                "mypy",
                "--strict",
                "--no-incremental",
                "src/tether_client",
            ])
            .current_dir(python_dir()),
    );
    run(
        "pytest (clients/python)",
        Command::new(venv_python())
            .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
            .current_dir(python_dir()),
    );
}
