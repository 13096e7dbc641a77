//! The turn benchmark on both stores, in alternating rounds.
//!
//! Why rounds: the clean rate is the highest step a run passed cleanly, so
//! one run resolves it to one step, and on a shared machine a single slow
//! disk sync can fail a step far below the gateway's limit. One run per
//! store (the first version of this benchmark) put big ÷ empty at 0.80 on
//! one backend and 1.25 on the other, both noise. Alternating the stores
//! round by round spreads whatever the machine does over both alike, and
//! the medians of several rounds compare like with like; the saturation
//! (the most delivered in any step, clean or not) is a second figure that
//! is not quantized to the steps.

use std::process::Stdio;

use anyhow::{bail, Context};
use serde_json::{json, Value};

use super::gateway::Gateway;
use super::{FlatBench, Prepared};

/// `rounds` rounds, each the turn benchmark on a fresh gateway over every
/// store in `stores`, in that order; per store every run and the medians.
pub fn rounds(b: &FlatBench, stores: &[&Prepared]) -> anyhow::Result<Value> {
    let mut runs: Vec<Vec<Value>> = vec![Vec::new(); stores.len()];
    for round in 0..b.turn_rounds.max(1) {
        for (store, runs) in stores.iter().zip(runs.iter_mut()) {
            eprintln!(
                "flat: turns, round {} of {}, the {} store",
                round + 1,
                b.turn_rounds.max(1),
                store.name
            );
            let gw = Gateway::start(&store.url, b.hosts, b.server_cpu)?;
            let run = once(b, &gw);
            gw.stop()?;
            runs.push(run?);
        }
    }
    let mut out = serde_json::Map::new();
    for (store, runs) in stores.iter().zip(runs) {
        let pick =
            |key: &str| -> Vec<f64> { runs.iter().filter_map(|r| r[key].as_f64()).collect() };
        out.insert(
            store.name.to_owned(),
            json!({
                "clean_durable_deliveries_per_s": median(pick("clean_durable_deliveries_per_s")),
                "saturation_durable_deliveries_per_s": median(pick("saturation_durable_deliveries_per_s")),
                "runs": runs,
            }),
        );
    }
    Ok(Value::Object(out))
}

/// The middle value (the mean of the two middle ones for an even count).
fn median(mut v: Vec<f64>) -> Value {
    if v.is_empty() {
        return Value::Null;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let m = if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    };
    json!(m.round())
}

/// `tether bench load --scenario turns` against the running gateway (this
/// binary, so the same generator as `bench/compare.sh`); its clean rate,
/// its saturation and the steps it ran.
fn once(b: &FlatBench, gw: &Gateway) -> anyhow::Result<Value> {
    let steps: Vec<String> = b.turn_steps.iter().map(u64::to_string).collect();
    let out = std::process::Command::new(std::env::current_exe()?)
        .args(["load", "--target", "tether", "--scenario", "turns"])
        .arg("--url")
        .arg(gw.ws_url())
        .arg("--server-pid")
        .arg(gw.pid.to_string())
        .arg("--server-cpu")
        .arg(b.server_cpu.to_string())
        .arg("--client-cpu")
        .arg(b.client_cpu.to_string())
        .arg("--sessions")
        .arg(b.turn_sessions.to_string())
        .arg("--peers")
        .arg(b.turn_peers.to_string())
        .arg("--step-secs")
        .arg(b.turn_step_secs.to_string())
        .arg("--steps")
        .arg(steps.join(","))
        .stderr(Stdio::inherit())
        .output()
        .context("run the turn benchmark")?;
    if !out.status.success() {
        bail!("the turn benchmark failed: {}", out.status);
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .context("the turn benchmark printed no report")?;
    let v: Value = serde_json::from_str(line)?;
    let steps: Vec<Value> = v["steps"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| {
            json!({
                "aim": s["target_durable_deliveries_per_s"],
                "clean": s["clean"],
                "durable_deliveries_per_s": s["durable_deliveries_per_s"],
                "p99_ms": s["latency_ms"]["p99"],
            })
        })
        .collect();
    let saturation = steps
        .iter()
        .filter_map(|s| s["durable_deliveries_per_s"].as_f64())
        .fold(0.0_f64, f64::max);
    Ok(json!({
        "clean_durable_deliveries_per_s": v["clean_durable_deliveries_per_s"],
        "saturation_durable_deliveries_per_s": saturation.round(),
        "server_peak_rss_kib": v["server_peak_rss_kib"],
        "steps": steps,
    }))
}

#[cfg(test)]
mod tests {
    use super::median;
    use serde_json::json;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), json!(2.0));
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), json!(3.0));
        assert_eq!(median(Vec::new()), json!(null));
    }
}
