//! Smoke runs of the `tether bench` generators that take seconds: the full
//! benchmarks are run by hand (docs/BENCHMARKS.md), but the generators
//! must keep working and keep checking delivery.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

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

/// `tether bench write-bytes`, tiny: a few sessions' flood turns on a real
/// gateway; every event is counted from the store, and the bytes the
/// gateway wrote for them are at least the events' own size. The data
/// directory is under the target directory, on the disk being measured.
#[test]
fn write_bytes_reports_bytes_per_stored_event() {
    let dir = env!("CARGO_TARGET_TMPDIR");
    let r = bench(&[
        "write-bytes",
        "--sessions",
        "5",
        "--rate",
        "40",
        "--secs",
        "1",
        "--hosts",
        "1",
        "--dir",
        dir,
    ]);
    assert_eq!(r["scenario"], "write-bytes");
    // 40 flood events per session and the turn's own events around them.
    assert!(r["events"].as_i64().unwrap() > 5 * 40, "{r}");
    let row = r["row_bytes_per_event"].as_f64().unwrap();
    let payload = r["payload_bytes_per_event"].as_f64().unwrap();
    assert!(payload > 50.0 && row > payload, "{r}");
    assert!(r["write_bytes_per_event"].as_f64().unwrap() > row, "{r}");
    assert!(r["ratio_to_row"].as_f64().unwrap() > 1.0, "{r}");
}

/// `tether bench cluster`, tiny: two nodes on a database of its own on
/// the test server, a few turns through the owner with a client on each
/// node, and two kill -9 rounds with a short lease. Skipped (loudly)
/// without `TETHER_TEST_POSTGRES`; a failure under
/// `TETHER_REQUIRE_POSTGRES=1`.
#[test]
fn cluster_generator_reports_cross_node_delivery_and_failovers() {
    let Some(server) = tether_store::testing::postgres_server() else {
        return;
    };
    let r = bench(&[
        "cluster",
        "--database-url",
        &server,
        "--kills",
        "2",
        "--lease-s",
        "1",
        "--rate",
        "400",
        "--secs",
        "2",
        "--sessions",
        "4",
        "--owner-peers",
        "1",
        "--follower-peers",
        "1",
        "--hosts",
        "1",
        "--json",
    ]);
    assert_eq!(r["scenario"], "cluster");
    let d = &r["delivery"];
    assert_eq!(d["complete"], true, "{r}");
    assert_eq!(d["submits_refused_or_late"], 0, "{r}");
    // Every event a follower's client read, an owner's client read too.
    assert_eq!(d["follower_events_unseen_at_owner"], 0, "{r}");
    assert!(d["follower_minus_owner_ms"]["p99"].is_number(), "{r}");
    assert_eq!(
        d["follower_client_deliveries"], d["owner_client_deliveries"],
        "one client on each node, so both read every event: {r}"
    );
    let f = &r["failover"];
    assert_eq!(f["kills"], 2, "{r}");
    assert!(f["node_lost_s"]["max"].is_number(), "{r}");
}

/// `tether bench` is the documented way in: it runs `tether-bench` beside
/// it with the same arguments and names itself as the binary to measure.
#[test]
fn tether_bench_forwards_to_the_bench_binary() {
    let tether =
        std::path::PathBuf::from(env!("CARGO_BIN_EXE_tether-bench")).with_file_name("tether");
    assert!(
        tether.is_file(),
        "{} is not built: cargo test --workspace",
        tether.display()
    );
    let out = std::process::Command::new(&tether)
        .args(["bench", "--help"])
        .output()
        .expect("run tether bench --help");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    for scenario in ["writer", "storm", "load", "cluster"] {
        assert!(text.contains(scenario), "{scenario} missing from {text}");
    }
}
