//! Smoke runs of `tether bench load`, the generator of the side-by-side
//! comparison (bench/compare.sh): seconds each, against tether and the
//! limit baseline, and against Socket.IO when bench/socketio has its
//! node_modules. The full comparison is run by hand (docs/BENCHMARKS.md);
//! these keep the generator working and checking delivery on every target.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

use std::path::Path;
use std::time::Duration;

use common::run_bench;
use serde_json::Value;

/// Bounds a whole run; a healthy one takes seconds.
const RUN_LIMIT: Duration = Duration::from_secs(240);

/// Runs `tether bench load ARGS` and returns its JSON report line.
fn load(args: &[&str]) -> Value {
    let mut all = vec!["load"];
    all.extend_from_slice(args);
    run_bench(&all, RUN_LIMIT)
}

/// A small fan-out: two steps, every event to every client exactly once.
fn fanout(target: &[&str]) -> Value {
    let mut args = target.to_vec();
    args.extend([
        "--scenario",
        "fanout",
        "--sessions",
        "4",
        "--peers",
        "2",
        "--steps",
        "80,320",
        "--step-secs",
        "1",
        "--drain-secs",
        "60",
        "--ramp-warmup-secs",
        "0",
        // Latency is not what this checks; only a delivery failure may
        // stop the ramp.
        "--max-p99-ms",
        "1000000",
    ]);
    let r = load(&args);
    assert_eq!(r["scenario"], "fanout", "{r}");
    assert_eq!(r["clients"], 8, "{r}");
    let steps = r["steps"].as_array().expect("steps");
    let aims: Vec<u64> = steps
        .iter()
        .map(|s| s["target_deliveries_per_s"].as_u64().unwrap())
        .collect();
    assert_eq!(aims, [80, 320], "{r}");
    for s in steps {
        assert!(s["expected"].as_u64().unwrap() > 0, "{s}");
        assert_eq!(s["delivered"], s["expected"], "{s}");
        assert_eq!(s["gaps"], 0, "{s}");
        assert_eq!(s["dups"], 0, "{s}");
        assert_eq!(s["closed_clients"], 0, "{s}");
        assert_eq!(
            s["latency_ms"]["count"], s["expected"],
            "one latency sample per delivery: {s}"
        );
    }
    assert_eq!(r["seq_gaps"], 0, "{r}");
    assert_eq!(r["seq_dups"], 0, "{r}");
    r
}

/// A small storm: 8 clients drop and come back while events flow.
fn storm(target: &[&str]) -> Value {
    let mut args = target.to_vec();
    args.extend([
        "--scenario",
        "storm",
        "--sessions",
        "4",
        "--peers",
        "2",
        "--rate",
        "80",
        "--warmup-ms",
        "600",
        "--down-ms",
        "500",
        "--after-ms",
        "300",
        "--drain-secs",
        "60",
    ]);
    let r = load(&args);
    assert_eq!(r["scenario"], "storm", "{r}");
    assert_eq!(r["clients"], 8, "{r}");
    assert_eq!(r["dups"], 0, "{r}");
    assert_eq!(r["beyond"], 0, "{r}");
    let (expected, delivered, lost) = (
        r["expected"].as_u64().unwrap(),
        r["delivered"].as_u64().unwrap(),
        r["lost"].as_u64().unwrap(),
    );
    assert!(expected > 0, "{r}");
    assert_eq!(delivered + lost, expected, "{r}");
    assert_eq!(r["back_live_ms"]["count"], 8, "every client came back: {r}");
    r
}

/// A small turn shape: two steps of real turns (tether) or their fifteen
/// relayed messages (the baselines), every turn, durable event and delta
/// to every client.
fn turns(target: &[&str]) -> Value {
    let mut args = target.to_vec();
    args.extend([
        "--scenario",
        "turns",
        "--sessions",
        "3",
        "--peers",
        "2",
        "--steps",
        "60,120",
        "--step-secs",
        "1",
        "--drain-secs",
        "60",
        "--ramp-warmup-secs",
        "0",
        "--max-p99-ms",
        "1000000",
    ]);
    let r = load(&args);
    assert_eq!(r["scenario"], "turns", "{r}");
    assert_eq!(r["clients"], 6, "{r}");
    let steps = r["steps"].as_array().expect("steps");
    assert_eq!(steps.len(), 2, "{r}");
    for s in steps {
        assert!(s["expected"].as_u64().unwrap() > 0, "{s}");
        assert_eq!(s["delivered"], s["expected"], "{s}");
        assert_eq!(s["pieces_ratio"], 1.0, "{s}");
        assert_eq!(s["durable_ratio"], 1.0, "{s}");
        assert_eq!(s["dups"], 0, "{s}");
        assert_eq!(s["submits_refused"], 0, "{s}");
        assert!(s["latency_ms"]["p99"].is_number(), "{s}");
    }
    r
}

/// A server that recovers: nothing lost, every client caught up.
fn assert_recovered(r: &Value) {
    assert_eq!(r["lost"], 0, "{r}");
    assert_eq!(r["recovered_clients"], 8, "{r}");
    assert_eq!(r["caught_up_clients"], 8, "{r}");
    assert!(r["all_caught_up_ms"].is_number(), "{r}");
}

#[test]
fn tether_fanout_turns_storm_and_idle() {
    let t = ["--target", "tether", "--hosts", "1"];
    fanout(&t);
    let r = turns(&t);
    for s in r["steps"].as_array().expect("steps") {
        assert_eq!(s["seq_gaps"], 0, "{s}");
    }
    let r = storm(&t);
    assert_recovered(&r);
    assert_eq!(r["seq_gaps"], 0, "{r}");
    assert_eq!(r["seq_dups"], 0, "{r}");
    // The hosts are the server's children, measured apart.
    assert!(r["hosts_peak_rss_kib"].as_u64().unwrap() > 0, "{r}");

    let mut args = t.to_vec();
    args.extend([
        "--scenario",
        "idle",
        "--sessions",
        "4",
        "--connections",
        "40",
        "--settle-ms",
        "0",
    ]);
    let r = load(&args);
    assert_eq!(r["connections"], 40, "{r}");
    assert!(r["kib_per_connection"].is_number(), "{r}");
    assert!(r["rss_after_kib"].as_u64().unwrap() > 0, "{r}");
}

#[test]
fn limit_fanout_turns_and_storm() {
    // The limit server runs in this process; the generator reaches it by URL.
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("bind");
    let url = format!("ws://{}/", listener.local_addr().expect("address"));
    rt.spawn(tether_bench_limit::serve(listener));
    let t = ["--target", "limit", "--url", url.as_str()];
    fanout(&t);
    turns(&t);
    let r = storm(&t);
    // The limit cannot recover: whatever was published while its clients
    // were away is gone, and it says so.
    assert_eq!(r["recovered_clients"], 0, "{r}");
    assert!(r["lost"].as_u64().unwrap() > 0, "{r}");
}

#[test]
fn socketio_fanout_turns_and_storm() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("socketio");
    if !dir.join("node_modules/socket.io").exists() {
        eprintln!("skipped: no bench/socketio/node_modules (run `npm ci` there)");
        return;
    }
    let dir = dir.to_string_lossy().into_owned();
    let t = ["--target", "socketio", "--socketio-dir", dir.as_str()];
    fanout(&t);
    turns(&t);
    let r = storm(&t);
    assert_recovered(&r);
}
