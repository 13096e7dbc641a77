//! Session titles are bounded in bytes (`--max-title-bytes`, default 1024).
//!
//! A title is copied into every `session.list` row and every `SessionInfo`,
//! so without a bound one client's 1 MB titles turn a 60-byte list request
//! into a reply of hundreds of megabytes. The bound is in bytes of UTF-8,
//! not characters, because bytes are what the replies and the store hold.

use tether_protocol::RpcError;

/// `Ok` when `title` fits `max` bytes; otherwise the -32602 `title` error
/// that refuses the whole request (nothing is written).
pub(crate) fn check(title: &str, max: usize) -> Result<(), RpcError> {
    if title.len() <= max {
        return Ok(());
    }
    Err(RpcError::invalid_params(
        "title",
        format!(
            "a title is at most {max} bytes of UTF-8, got {}",
            title.len()
        ),
    ))
}

/// The longest prefix of `s` that fits `max` bytes, cut at a character
/// boundary (never inside a UTF-8 sequence).
pub(crate) fn prefix_within(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bound_is_in_bytes() {
        assert!(check("", 0).is_ok());
        assert!(check(&"é".repeat(512), 1024).is_ok());
        let e = check(&"é".repeat(513), 1024).unwrap_err();
        assert_eq!(e.field(), Some("title"));
        assert_eq!(e.code, tether_protocol::codes::INVALID_PARAMS);
    }

    #[test]
    fn prefixes_end_on_a_character() {
        assert_eq!(prefix_within("abc", 5), "abc");
        assert_eq!(prefix_within("abc", 2), "ab");
        assert_eq!(prefix_within("aé", 2), "a");
        assert_eq!(prefix_within("😀x", 3), "");
        assert_eq!(prefix_within("😀x", 4), "😀");
    }
}
