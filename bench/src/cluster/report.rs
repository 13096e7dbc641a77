//! The small table `tether bench cluster` prints (without `--json`), read
//! from the same JSON report, so the two never disagree.

use std::fmt::Write;

use serde_json::Value;

/// A number of the report, or `-` when it is absent.
fn n(v: &Value) -> String {
    match v.as_f64() {
        Some(f) => format!("{f}"),
        None => "-".to_owned(),
    }
}

pub fn table(r: &Value) -> String {
    let mut out = String::new();
    let p = &r["pinning"];
    let _ = writeln!(
        out,
        "tether bench cluster: 2 nodes, lease {} s, {} hosts each; cpus: node0 {}, node1 {}, postgres {}, generator {}",
        n(&r["lease_s"]),
        n(&r["hosts_per_node"]),
        p["node0"].as_str().unwrap_or("?"),
        p["node1"].as_str().unwrap_or("?"),
        p["postgres"].as_str().unwrap_or("not local"),
        p["generator"].as_str().unwrap_or("?"),
    );
    let d = &r["delivery"];
    if !d.is_null() {
        let lat = &d["follower_minus_owner_ms"];
        let _ = writeln!(
            out,
            "\ndelivery: {} sessions × ({} owner + {} follower clients), aim {} durable deliveries/s, got {}/s ({} of {}{})",
            n(&d["sessions"]),
            n(&d["owner_peers"]),
            n(&d["follower_peers"]),
            n(&d["target_durable_deliveries_per_s"]),
            n(&d["durable_deliveries_per_s"]),
            n(&d["durable_deliveries"]),
            n(&d["expected"]),
            if d["complete"] == true { "" } else { ", INCOMPLETE" },
        );
        let _ = writeln!(out, "| ms | p50 | p99 | p99.9 | max |");
        let _ = writeln!(out, "|---|---|---|---|---|");
        latency_row(&mut out, "follower − owner", lat);
        latency_row(
            &mut out,
            "owner's clients apart",
            &d["owner_clients_spread_ms"],
        );
        let c = &d["cpu_s_per_1000_deliveries"];
        let _ = writeln!(
            out,
            "\n| CPU s per 1,000 durable deliveries | owner node | its hosts | follower node | PostgreSQL |"
        );
        let _ = writeln!(out, "|---|---|---|---|---|");
        let _ = writeln!(
            out,
            "| over {} s | {} | {} | {} | {} |",
            n(&d["cpu_window_s"]),
            n(&c["owner_node"]),
            n(&c["owner_hosts"]),
            n(&c["follower_node"]),
            n(&c["postgres"]),
        );
    }
    let f = &r["failover"];
    if !f.is_null() {
        let lost = &f["node_lost_s"];
        let first = &f["first_event_s"];
        let _ = writeln!(
            out,
            "\n| failover, kill -9 → follower's client, s | kills | p50 | max |"
        );
        let _ = writeln!(out, "|---|---|---|---|");
        failover_row(&mut out, "node_lost ending", &f["kills"], lost);
        failover_row(&mut out, "first new event", &f["kills"], first);
    }
    out
}

/// One row of a latency table: its label, how many, then the quantiles.
fn latency_row(out: &mut String, label: &str, v: &Value) {
    let _ = writeln!(
        out,
        "| {label}, {} events | {} | {} | {} | {} |",
        n(&v["count"]),
        n(&v["p50"]),
        n(&v["p99"]),
        n(&v["p999"]),
        n(&v["max"]),
    );
}

/// One row of the failover table.
fn failover_row(out: &mut String, label: &str, kills: &Value, v: &Value) {
    let _ = writeln!(
        out,
        "| {label} | {} | {} | {} |",
        n(kills),
        n(&v["p50"]),
        n(&v["max"]),
    );
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn the_table_shows_each_latency_and_failover_row() {
        let r = json!({
            "delivery": {
                "follower_minus_owner_ms": {"count": 10, "p50": 0.2, "p99": 1.5, "p999": 2, "max": 3},
                "owner_clients_spread_ms": {"count": 20, "p50": 0.1, "p99": 0.4},
            },
            "failover": {
                "kills": 4,
                "node_lost_s": {"p50": 3.0, "max": 3.8},
                "first_event_s": {"p50": 3.1, "max": 3.9},
            },
        });
        let t = super::table(&r);
        for row in [
            "| follower − owner, 10 events | 0.2 | 1.5 | 2 | 3 |",
            "| owner's clients apart, 20 events | 0.1 | 0.4 | - | - |",
            "| node_lost ending | 4 | 3 | 3.8 |",
            "| first new event | 4 | 3.1 | 3.9 |",
        ] {
            assert!(t.lines().any(|l| l == row), "{row} not in\n{t}");
        }
    }
}
