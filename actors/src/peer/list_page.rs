//! `session.list` replies bounded in bytes (`--max-list-bytes`).
//!
//! A page is `limit` sessions at most, and also at most `max_list_bytes`
//! of `result` JSON: one client's long titles must not turn a small
//! request into a reply of hundreds of megabytes that every other client's
//! frames then wait behind. A page that would pass the bound ends early
//! with a `next_cursor` right after its last session, so the next page
//! continues exactly there (keyset paging: none skipped, none repeated).
//! A page always holds one session at least, however large, so paging
//! always moves on.

use serde::Serialize;
use serde_json::value::RawValue;

/// A page as it is sent: the sessions already serialized (each once, to
/// measure it), so the size computed is the size sent.
#[derive(Serialize)]
pub(super) struct Page<'a> {
    pub sessions: &'a [Box<RawValue>],
    pub next_cursor: Option<&'a str>,
}

/// `{"sessions":[],"next_cursor":}`: the bytes of a page around its
/// sessions, the commas between them and the cursor's JSON.
const FRAME_BYTES: usize = r#"{"sessions":[],"next_cursor":}"#.len();
/// `null`.
const NO_CURSOR_BYTES: usize = 4;

/// How many of `sizes` (each session's JSON length, in list order) a page
/// keeps within `max` bytes. `cursor_bytes(k)` is the JSON length of the
/// cursor after the `k`-th session (1-based), for a page cut there;
/// `more` tells whether anything follows the last one (else a page of all
/// of them has no cursor). At least one session is kept when there is one.
pub(super) fn sessions_within(
    sizes: &[usize],
    more: bool,
    cursor_bytes: impl Fn(usize) -> usize,
    max: usize,
) -> usize {
    let mut total = FRAME_BYTES;
    let mut fit = 0;
    for (i, size) in sizes.iter().enumerate() {
        let k = i + 1;
        total += size + usize::from(k > 1);
        let cursor = if k == sizes.len() && !more {
            NO_CURSOR_BYTES
        } else {
            cursor_bytes(k)
        };
        if total + cursor <= max {
            fit = k;
        } else if total > max {
            // Sessions only add bytes: no longer page can fit.
            break;
        }
    }
    fit.max(sizes.len().min(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A page's bytes, by serializing it.
    fn page_bytes(sizes: &[usize], keep: usize, cursor: Option<usize>) -> usize {
        let sessions: Vec<Box<RawValue>> = sizes[..keep]
            .iter()
            .map(|&n| {
                let text = format!("\"{}\"", "x".repeat(n.saturating_sub(2)));
                RawValue::from_string(text).unwrap()
            })
            .collect();
        let cursor = cursor.map(|n| "c".repeat(n.saturating_sub(2)));
        serde_json::to_string(&Page {
            sessions: &sessions,
            next_cursor: cursor.as_deref(),
        })
        .unwrap()
        .len()
    }

    proptest! {
        /// The page kept is the longest within the bound (the computed size
        /// checked against the serialized one), or a single session.
        #[test]
        fn the_longest_page_within_the_bound_is_kept(
            sizes in proptest::collection::vec(2usize..400, 0..30),
            cursors in proptest::collection::vec(20usize..60, 30),
            more in any::<bool>(),
            max in 0usize..4000,
        ) {
            let cursor_of = |k: usize| cursors[k - 1];
            let cursor_at = |k: usize| (k < sizes.len() || more).then(|| cursor_of(k));
            let keep = sessions_within(&sizes, more, cursor_of, max);
            if sizes.is_empty() {
                prop_assert_eq!(keep, 0);
                return Ok(());
            }
            prop_assert!(keep >= 1 && keep <= sizes.len());
            let bytes = page_bytes(&sizes, keep, cursor_at(keep));
            prop_assert!(keep == 1 || bytes <= max, "{keep} sessions in {bytes} > {max}");
            for longer in keep + 1..=sizes.len() {
                let bytes = page_bytes(&sizes, longer, cursor_at(longer));
                prop_assert!(bytes > max, "{longer} sessions fit in {bytes} ≤ {max}");
            }
        }
    }

    #[test]
    fn one_session_even_when_it_alone_is_over() {
        assert_eq!(sessions_within(&[10_000, 5], false, |_| 40, 100), 1);
        assert_eq!(sessions_within(&[], false, |_| 40, 100), 0);
        // Exactly at the bound fits: frame + 10 + 1 + 10 + null.
        let max = FRAME_BYTES + 21 + NO_CURSOR_BYTES;
        assert_eq!(sessions_within(&[10, 10], false, |_| 40, max), 2);
        assert_eq!(sessions_within(&[10, 10], false, |_| 40, max - 1), 1);
    }
}
