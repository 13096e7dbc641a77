//! JSON equality that tolerates the float drift of serde_json's default
//! parser.
//!
//! Without serde_json's `float_roundtrip` feature (the workspace does not
//! enable it), parsing the shortest decimal form of an f64 may yield the
//! neighbouring f64 (e.g. 9.519867919534898e-213). A decode → encode →
//! decode check would then report that known, documented drift instead of
//! real bugs, so floats may differ by a few ULPs; everything else is exact.

use serde_json::Value;

/// Floats this many ULPs apart count as equal.
const MAX_ULPS: u64 = 4;

/// `a == b`, except that floats may be up to `MAX_ULPS` apart.
pub fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) if x.is_f64() || y.is_f64() => {
            match (x.as_f64(), y.as_f64()) {
                (Some(x), Some(y)) => close(x, y),
                _ => false,
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

fn close(x: f64, y: f64) -> bool {
    if x == y {
        return true;
    }
    if x.is_sign_negative() != y.is_sign_negative() {
        return false;
    }
    x.to_bits().abs_diff(y.to_bits()) <= MAX_ULPS
}
