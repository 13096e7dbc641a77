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
        let _ = writeln!(
            out,
            "| follower − owner, {} events | {} | {} | {} | {} |",
            n(&lat["count"]),
            n(&lat["p50"]),
            n(&lat["p99"]),
            n(&lat["p999"]),
            n(&lat["max"]),
        );
        let spread = &d["owner_clients_spread_ms"];
        let _ = writeln!(
            out,
            "| owner's clients apart, {} events | {} | {} | {} | {} |",
            n(&spread["count"]),
            n(&spread["p50"]),
            n(&spread["p99"]),
            n(&spread["p999"]),
            n(&spread["max"]),
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
        let _ = writeln!(
            out,
            "| node_lost ending | {} | {} | {} |",
            n(&f["kills"]),
            n(&lost["p50"]),
            n(&lost["max"]),
        );
        let _ = writeln!(
            out,
            "| first new event | {} | {} | {} |",
            n(&f["kills"]),
            n(&first["p50"]),
            n(&first["max"]),
        );
    }
    out
}
