//! Quantiles of the two figures: signed differences in microseconds (a
//! follower's client may read an event before the owner's, by the
//! generator's scheduling), and failover durations.

use std::time::Duration;

use serde_json::{json, Value};

pub use crate::load::tally::round3;

/// The value at quantile `q` of sorted values (nearest rank).
fn quantile<T: Copy>(sorted: &[T], q: f64) -> Option<T> {
    if sorted.is_empty() {
        return None;
    }
    let i = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
    Some(sorted[i])
}

/// min / p50 / p99 / p99.9 / max of signed microseconds, in ms.
pub fn signed_summary_ms(mut us: Vec<i64>) -> Value {
    us.sort_unstable();
    let ms = |v: Option<i64>| v.map(|v| round3(v as f64 / 1000.0));
    json!({
        "count": us.len(),
        "min": ms(us.first().copied()),
        "p50": ms(quantile(&us, 0.50)),
        "p99": ms(quantile(&us, 0.99)),
        "p999": ms(quantile(&us, 0.999)),
        "max": ms(us.last().copied()),
    })
}

/// p50 / max (and min) of durations, in seconds.
pub fn durations_s(mut d: Vec<Duration>) -> Value {
    d.sort_unstable();
    let s = |v: Option<Duration>| v.map(|v| round3(v.as_secs_f64()));
    json!({
        "count": d.len(),
        "min": s(d.first().copied()),
        "p50": s(quantile(&d, 0.50)),
        "max": s(d.last().copied()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_quantiles_of_signed_values() {
        let v: Vec<i64> = (-10..90).map(|i| i * 1000).collect();
        let s = signed_summary_ms(v);
        assert_eq!(s["count"], 100);
        assert_eq!(s["min"], -10.0);
        assert_eq!(s["p50"], 39.0);
        assert_eq!(s["p99"], 88.0);
        assert_eq!(s["max"], 89.0);
        assert_eq!(signed_summary_ms(Vec::new())["p99"], Value::Null);
    }

    #[test]
    fn durations_in_seconds() {
        let d = [3.2, 3.9, 3.5].map(Duration::from_secs_f64).to_vec();
        let s = durations_s(d);
        assert_eq!(
            (s["p50"].as_f64(), s["max"].as_f64()),
            (Some(3.5), Some(3.9))
        );
    }
}
