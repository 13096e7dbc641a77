//! Smoke runs of the `tether bench` generators that take seconds: the full
//! benchmarks are run by hand (docs/BENCHMARKS.md), but the generators
//! must keep working and keep checking delivery.

mod common;

use std::time::Duration;

use common::run_bench;
use serde_json::Value;

/// Bounds a whole run; a healthy one takes a few seconds.
const RUN_LIMIT: Duration = Duration::from_secs(180);

/// Runs `tether bench ARGS` and returns its JSON report line.
fn bench(args: &[&str]) -> Value {
    run_bench(args, RUN_LIMIT)
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
