//! Wall-clock helpers. Timestamps travel as RFC 3339 strings (`ts`,
//! `created_at`, …) and are stored as unix milliseconds; these two functions
//! are the only conversion so every crate formats them identically.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The last millisecond that RFC 3339 (4-digit years) can express:
/// 9999-12-31T23:59:59.999Z.
const MAX_MS: i64 = 253_402_300_799_999;

/// The current time as unix milliseconds. A clock set before 1970 reads as 0.
pub fn now_ms() -> i64 {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
        Err(_) => 0,
    }
}

/// Formats unix milliseconds as RFC 3339 UTC with milliseconds, e.g.
/// `2026-11-30T03:00:00.123Z`. Values outside years 1970..=9999 are clamped
/// (the formatter cannot express them and must never panic on stored data).
pub fn format_ts(ms: i64) -> String {
    let ms = ms.clamp(0, MAX_MS);
    // `ms` is non-negative after the clamp.
    let t = UNIX_EPOCH + Duration::from_millis(ms.unsigned_abs());
    humantime::format_rfc3339_millis(t).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_example() {
        // 2026-11-30T03:00:00Z
        let secs: i64 = 1_796_007_600;
        assert_eq!(format_ts(secs * 1000 + 123), "2026-11-30T03:00:00.123Z");
        assert_eq!(format_ts(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(format_ts(5), "1970-01-01T00:00:00.005Z");
    }

    #[test]
    fn format_clamps_out_of_range() {
        assert_eq!(format_ts(-1), "1970-01-01T00:00:00.000Z");
        assert_eq!(format_ts(i64::MIN), "1970-01-01T00:00:00.000Z");
        assert_eq!(format_ts(i64::MAX), "9999-12-31T23:59:59.999Z");
    }

    #[test]
    fn now_is_recent() {
        let now = now_ms();
        // After 2024-01-01 and formatted as this century.
        assert!(now > 1_704_067_200_000);
        assert!(format_ts(now).starts_with("20"));
    }
}
