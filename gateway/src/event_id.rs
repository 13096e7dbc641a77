//! The numbers of the SSE `id:` lines tether writes, read back from a
//! `Last-Event-ID`: exactly as tether writes them (decimal digits, no sign,
//! no leading zero), since an id tether never sent names nothing a resume
//! could start from. Rust's `parse::<u64>` alone also takes `+3` and `03`.

/// The number `s` is when tether could have written it; `None` otherwise.
pub(crate) fn sent_number(s: &str) -> Option<u64> {
    let canonical =
        !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0'));
    canonical.then(|| s.parse().ok()).flatten()
}

#[cfg(test)]
mod tests {
    use super::sent_number;

    #[test]
    fn only_what_tether_writes_is_a_number() {
        assert_eq!(sent_number("0"), Some(0));
        assert_eq!(sent_number("41"), Some(41));
        assert_eq!(sent_number("18446744073709551615"), Some(u64::MAX));
        for bad in [
            "",
            "+3",
            "-3",
            "03",
            "00",
            " 3",
            "3 ",
            "3.0",
            "0x3",
            "١",
            "18446744073709551616",
        ] {
            assert_eq!(sent_number(bad), None, "{bad:?}");
        }
    }
}
