//! The time claims of a JWT (`exp`, `nbf`, `iat`), checked here and not by
//! the `jsonwebtoken` crate: the crate rounds a number with a fraction and
//! skips a claim it cannot read (a string `nbf` was ignored), while the
//! gateway needs one rule for all three and the instant a token ends,
//! which the door and a live connection must share.
//!
//! Each is a JSON number of seconds since the Unix epoch, a fraction
//! allowed (RFC 7519 §2, NumericDate); anything else (a string, `null`, a
//! negative or huge number) refuses the token. `exp` is required. With the
//! leeway `L` (`--jwt-leeway-s`), a token is refused from `exp + L` on
//! (`exp`'s fraction dropped: a token never lives past the second it
//! names), before `nbf - L`, and when `iat` is after `now + L`.

use std::time::Duration;

use serde_json::{Map, Value};

/// Why the time claims refuse a token.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(super) enum TimeRefused {
    #[error("claim `exp` is missing")]
    NoExp,
    #[error("claim `{0}` is not a NumericDate (a non-negative number of seconds)")]
    NotNumeric(&'static str),
    #[error("the token expired")]
    Expired,
    #[error("the token is not valid yet (nbf)")]
    NotYet,
    #[error("iat is in the future")]
    IssuedLater,
}

/// The largest NumericDate taken (year 9999): beyond it a number is a
/// mistake or an attack on the arithmetic.
const MAX_DATE_S: f64 = 253_402_300_799.0;

/// A claim as seconds, if present: `Err` when it is present but not a
/// NumericDate.
fn seconds(claims: &Map<String, Value>, name: &'static str) -> Result<Option<f64>, TimeRefused> {
    match claims.get(name) {
        None => Ok(None),
        Some(Value::Number(n)) => match n.as_f64() {
            Some(s) if s.is_finite() && (0.0..=MAX_DATE_S).contains(&s) => Ok(Some(s)),
            _ => Err(TimeRefused::NotNumeric(name)),
        },
        Some(_) => Err(TimeRefused::NotNumeric(name)),
    }
}

/// Checks the time claims at `now_ms` (milliseconds since the epoch) with
/// `leeway`; the token's `exp` in whole seconds (its fraction dropped).
pub(super) fn check(
    claims: &Map<String, Value>,
    now_ms: u64,
    leeway: Duration,
) -> Result<u64, TimeRefused> {
    let now = now_ms as f64 / 1000.0;
    let leeway = leeway.as_secs_f64();
    let exp = seconds(claims, "exp")?.ok_or(TimeRefused::NoExp)?;
    let nbf = seconds(claims, "nbf")?;
    let iat = seconds(claims, "iat")?;
    let exp = exp.floor() as u64;
    // The same instant as `TokenGrant::ends_at_ms`, in milliseconds.
    let ends_ms = exp
        .saturating_mul(1000)
        .saturating_add((leeway * 1000.0) as u64);
    if now_ms >= ends_ms {
        return Err(TimeRefused::Expired);
    }
    if nbf.is_some_and(|nbf| nbf > now + leeway) {
        return Err(TimeRefused::NotYet);
    }
    if iat.is_some_and(|iat| iat > now + leeway) {
        return Err(TimeRefused::IssuedLater);
    }
    Ok(exp)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claims(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    const NOW_MS: u64 = 1_000_000_000;
    const L: Duration = Duration::from_secs(5);

    #[test]
    fn exp_ends_the_token_at_exp_plus_the_leeway_to_the_millisecond() {
        let c = claims(json!({"exp": 999_990}));
        assert_eq!(check(&c, 999_994_999, L), Ok(999_990));
        assert_eq!(check(&c, 999_995_000, L), Err(TimeRefused::Expired));
        // A fraction is honoured by dropping it: never a token that does not end.
        let c = claims(json!({"exp": 999_990.75}));
        assert_eq!(check(&c, 999_994_999, L), Ok(999_990));
        assert_eq!(check(&c, 999_995_000, L), Err(TimeRefused::Expired));
        assert_eq!(check(&c, NOW_MS, L), Err(TimeRefused::Expired));
    }

    #[test]
    fn every_time_claim_must_be_a_numeric_date() {
        let exp = NOW_MS / 1000 + 60;
        for (name, bad) in [
            ("exp", json!("2030-01-01")),
            ("exp", json!(null)),
            ("exp", json!(-1)),
            ("exp", json!(1e300)),
            ("nbf", json!("0")),
            ("nbf", json!(true)),
            ("iat", json!("0")),
            ("iat", json!([1])),
        ] {
            let mut c = claims(json!({"exp": exp}));
            c.insert(name.into(), bad.clone());
            assert_eq!(
                check(&c, NOW_MS, L),
                Err(TimeRefused::NotNumeric(name)),
                "{name}: {bad}"
            );
        }
        assert_eq!(
            check(&claims(json!({})), NOW_MS, L),
            Err(TimeRefused::NoExp)
        );
    }

    #[test]
    fn nbf_and_iat_get_the_leeway_with_their_fractions() {
        let now = NOW_MS / 1000;
        let ok = claims(json!({"exp": now + 60, "nbf": now as f64 + 4.5, "iat": now as f64 + 4.9}));
        assert_eq!(check(&ok, NOW_MS, L), Ok(now + 60));
        let late = claims(json!({"exp": now + 60, "nbf": now as f64 + 5.5}));
        assert_eq!(check(&late, NOW_MS, L), Err(TimeRefused::NotYet));
        let later = claims(json!({"exp": now + 60, "iat": now as f64 + 5.1}));
        assert_eq!(check(&later, NOW_MS, L), Err(TimeRefused::IssuedLater));
    }
}
