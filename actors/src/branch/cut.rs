//! Where a branch may end: never inside a turn.
//!
//! A turn's events run from its `message.user` to its `message.complete`.
//! A branch cut between the two would copy a turn that never ends (the
//! branch has no host working on it), give one turn id to two sessions,
//! and show the branch's next turn two user messages in a row. So the cut
//! asked for is moved back until every turn whose `message.user` it holds
//! also has its `message.complete` in it: to just before the first
//! unfinished turn's `message.user`.
//!
//! One step back is not always enough. A prompt queued behind a running
//! turn has its `message.user` written when it is queued, before the
//! running turn ends; a cut just after the running turn's end holds the
//! queued prompt's start but not its end, and the step back before that
//! start drops the running turn's end as well. Hence the loop, which only
//! ever moves the cut down and so ends.

use std::collections::HashMap;

/// What an event is to a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mark<'a> {
    /// A `message.user` with this turn id.
    Start(&'a str),
    /// A `message.complete` with this turn id.
    End(&'a str),
    /// Anything else (seeded messages have no turn id and count here).
    Other,
}

/// The highest cut `≤ upto` at which no turn is unfinished. `events` are
/// `(seq, mark)` in ascending seq; the result is `upto` itself when no
/// turn is open there.
pub(crate) fn whole_turns_cut(events: &[(u64, Mark<'_>)], upto: u64) -> u64 {
    let mut cut = upto;
    loop {
        let mut open: HashMap<&str, u64> = HashMap::new();
        for &(seq, mark) in events.iter().take_while(|(seq, _)| *seq <= cut) {
            match mark {
                Mark::Start(turn) => {
                    open.entry(turn).or_insert(seq);
                }
                Mark::End(turn) => {
                    open.remove(turn);
                }
                Mark::Other => {}
            }
        }
        match open.values().min() {
            None => return cut,
            Some(&first) => cut = first.saturating_sub(1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    use Mark::{End, Other, Start};

    #[test]
    fn a_cut_inside_a_turn_moves_before_its_start() {
        let events = [
            (1, Other),
            (2, Start("a")),
            (3, Other),
            (4, End("a")),
            (5, Start("b")),
            (6, Other),
        ];
        assert_eq!(whole_turns_cut(&events, 6), 4);
        assert_eq!(whole_turns_cut(&events, 5), 4);
        assert_eq!(whole_turns_cut(&events, 4), 4);
        assert_eq!(whole_turns_cut(&events, 3), 1);
        assert_eq!(whole_turns_cut(&events, 2), 1);
        assert_eq!(whole_turns_cut(&events, 1), 1);
    }

    #[test]
    fn a_queued_start_before_the_running_end_takes_both_back() {
        // a runs, b is queued (starts at 3), a ends at 4, b is running.
        let events = [
            (1, Other),
            (2, Start("a")),
            (3, Start("b")),
            (4, End("a")),
            (5, Other),
            (6, End("b")),
        ];
        assert_eq!(whole_turns_cut(&events, 4), 1);
        assert_eq!(whole_turns_cut(&events, 5), 1);
        assert_eq!(whole_turns_cut(&events, 6), 6);
    }

    /// Any interleaving of a few turns' starts and ends, each turn started
    /// at most once and ended at most once, after its start (more than the
    /// gateway produces: its turns also end in order).
    fn history() -> impl Strategy<Value = Vec<(u64, Mark<'static>)>> {
        const TURNS: [&str; 5] = ["t0", "t1", "t2", "t3", "t4"];
        proptest::collection::vec((0usize..5, 0u8..3), 1..40).prop_map(|picks| {
            let mut started = std::collections::HashSet::new();
            let mut ended = std::collections::HashSet::new();
            let marks = picks.into_iter().filter_map(|(turn, kind)| {
                let t = TURNS[turn];
                match kind {
                    0 if started.insert(t) => Some(Start(t)),
                    1 if started.contains(t) && ended.insert(t) => Some(End(t)),
                    2 => Some(Other),
                    _ => None,
                }
            });
            marks
                .collect::<Vec<_>>()
                .into_iter()
                .enumerate()
                .map(|(i, m)| (i as u64 + 1, m))
                .collect()
        })
    }

    /// Brute force: no turn started at or before `cut` ends after it.
    fn whole_at(events: &[(u64, Mark<'_>)], cut: u64) -> bool {
        events.iter().all(|(seq, m)| match m {
            Start(t) if *seq <= cut => events.iter().any(|(s, e)| *s <= cut && *e == End(t)),
            _ => true,
        })
    }

    proptest! {
        #[test]
        fn the_cut_is_the_highest_whole_one(events in history(), pick in 0usize..64) {
            prop_assume!(!events.is_empty());
            let latest = events.len() as u64;
            let upto = (pick as u64 % latest) + 1;
            let cut = whole_turns_cut(&events, upto);
            prop_assert!(cut <= upto);
            prop_assert!(whole_at(&events, cut), "{events:?} upto {upto} → {cut}");
            for c in cut + 1..=upto {
                prop_assert!(!whole_at(&events, c), "{c} is whole too: {events:?} upto {upto} → {cut}");
            }
        }
    }
}
