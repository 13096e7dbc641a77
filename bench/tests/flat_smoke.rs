//! `tether bench flat`, tiny: both stores filled through the store's
//! write API, a real gateway started on each, and every figure reported.
//! The full run is by hand (docs/benchmarks/2026-12.md, "A large store").
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

use std::time::Duration;

use common::run_bench;

#[test]
fn flat_fills_both_stores_and_measures_each() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dir_arg = dir.path().to_string_lossy().into_owned();
    let r = run_bench(
        &[
            "flat",
            "--dir",
            &dir_arg,
            "--sessions",
            "40",
            "--events",
            "4000",
            "--largest",
            "1500",
            "--probes",
            "2",
            "--probe-events",
            "300",
            "--page",
            "100",
            "--starts",
            "2",
            "--requests",
            "5",
            "--settle-secs",
            "0.2",
            "--hosts",
            "1",
            "--turn-steps",
            "200",
            "--turn-sessions",
            "2",
            "--turn-peers",
            "2",
            "--turn-step-secs",
            "1",
            "--turn-rounds",
            "2",
        ],
        Duration::from_secs(240),
    );
    assert_eq!(r["scenario"], "flat", "{r}");
    let (empty, big) = (&r["empty"], &r["big"]);
    // The fill wrote what was asked (rounded up to whole turns).
    let big_events = big["fill"]["events"].as_u64().unwrap_or(0);
    assert!((4000..=4000 + 3 * 40).contains(&big_events), "{r}");
    assert_eq!(big["fill"]["sessions"], 40, "{r}");
    assert_eq!(empty["fill"]["sessions"], 2 + 200, "{r}");
    // Each store was read whole through the gateway: the largest session
    // on the big one, a probe on the empty one.
    assert_eq!(big["paging"]["events"], 1500, "{r}");
    assert!(
        (15..=16).contains(&big["paging"]["pages"].as_u64().unwrap_or(0)),
        "{r}"
    );
    assert_eq!(empty["paging"]["events"], 300, "{r}");
    assert_eq!(empty["list"]["sessions_per_page"], 50, "{r}");
    for store in [empty, big] {
        assert_eq!(
            store["startup_ms"]["each"].as_array().map(Vec::len),
            Some(2),
            "{r}"
        );
        assert!(store["idle_rss_kib"].as_u64().unwrap_or(0) > 0, "{r}");
        assert!(
            store["list"]["sessions_per_page"].as_u64().unwrap_or(0) > 0,
            "{r}"
        );
        // A probe's transcript: each turn's user message and reply (and a
        // tool result every fourth turn), as the gateway derives it.
        let messages = store["resume_live"]["messages_returned"]
            .as_u64()
            .unwrap_or(0);
        assert!((150..=300).contains(&messages), "{r}");
        assert_eq!(store["resume_from_store"]["n"], 2, "{r}");
    }
    // The turn benchmark: two rounds on each store, alternated, and the
    // medians compared.
    for name in ["empty", "big"] {
        let turns = &r["turns"][name];
        let runs = turns["runs"].as_array().map(Vec::as_slice).unwrap_or(&[]);
        assert_eq!(runs.len(), 2, "{r}");
        for run in runs {
            assert!(
                run["steps"].as_array().is_some_and(|s| !s.is_empty()),
                "{r}"
            );
        }
        assert!(turns["clean_durable_deliveries_per_s"].is_number(), "{r}");
        assert!(
            turns["saturation_durable_deliveries_per_s"].as_f64() > Some(0.0),
            "{r}"
        );
    }
    assert!(
        r["big_over_empty"]["turns_saturation_median"].is_number(),
        "{r}"
    );
}
