//! Smoke runs of the `tether bench` generators that take seconds: the full
//! benchmarks are run by hand (docs/BENCHMARKS.md), but the generators
//! must keep working and keep checking delivery.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Bounds a whole run; a healthy one takes a few seconds.
const RUN_LIMIT: Duration = Duration::from_secs(180);

/// Runs `tether bench ARGS` and returns its JSON report line.
fn bench(args: &[&str]) -> Value {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tether"))
        .arg("bench")
        .args(args)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start tether bench");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for tether bench") {
            break status;
        }
        if started.elapsed() > RUN_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("tether bench {args:?} did not finish within {RUN_LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stdout = String::new();
    let mut stderr = String::new();
    child
        .stdout
        .take()
        .expect("stdout")
        .read_to_string(&mut stdout)
        .expect("read stdout");
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut stderr)
        .expect("read stderr");
    assert!(
        status.success(),
        "tether bench {args:?} failed: {status}\nstdout: {stdout}\nstderr: {stderr}"
    );
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no report in {stdout:?}"));
    serde_json::from_str(line).expect("report is JSON")
}

#[test]
fn storm_generator_reports_exact_delivery() {
    let r = bench(&[
        "storm",
        "--clients",
        "20",
        "--sessions",
        "5",
        "--rate",
        "500",
        "--warmup-ms",
        "300",
        "--down-ms",
        "100",
        "--after-ms",
        "300",
    ]);
    assert_eq!(r["scenario"], "storm");
    assert_eq!(r["gaps"], 0, "{r}");
    assert_eq!(r["duplicates"], 0, "{r}");
    assert_eq!(r["resyncs"], 0, "{r}");
    assert_eq!(r["beyond_last"], 0, "{r}");
    assert_eq!(r["delivered"], r["expected"], "{r}");
    // Each client holds at least session.created and what was appended
    // while it was streaming.
    assert!(r["expected"].as_u64().unwrap() > 20, "{r}");
    // Every client was caught up: the generator only reports once all were.
    assert!(r["caught_up_ms"]["max"].is_number(), "{r}");
    assert!(r["all_caught_up_from_drop_ms"].is_number(), "{r}");
}

#[test]
fn idle_generator_reports_memory_per_item() {
    let r = bench(&[
        "idle",
        "--connections",
        "50",
        "--sessions",
        "50",
        "--settle-ms",
        "0",
    ]);
    assert_eq!(r["scenario"], "idle");
    for step in ["idle_peer", "idle_live_session", "parked_session"] {
        assert!(r[step]["kib_each"].is_number(), "{step}: {r}");
        assert!(
            r[step]["rss_after_kib"].as_u64().unwrap() > 0,
            "{step}: {r}"
        );
    }
    assert_eq!(r["newest_session_status"], "parked", "{r}");
}
