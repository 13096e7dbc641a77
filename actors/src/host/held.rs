//! What a host that keeps histories holds, as the gateway counts it.
//!
//! Every `turn.start` carries the session's history so that any host can
//! run any turn, and in a long session that history is most of the line:
//! the gateway copies it into the pipe and the host reads and checks all
//! of it, every turn, to use the same messages it was sent the turn
//! before. A host that says `history_cache_bytes` in its `hello` keeps
//! them instead, and is sent only the messages it has not seen.
//!
//! The gateway keeps the books, so the host needs none: it holds exactly
//! what the lines it was sent say (the history it was sent for a session,
//! until it is sent another or told `history.drop`), and this mirror
//! knows what that is, within the host's budget, evicting the session
//! used longest ago. The books live in the host actor and die with it, so
//! a restarted host starts from nothing on both sides. What a host holds
//! is checked against the session's own marks ([`History::after`]): a
//! compaction, or a session rebuilt from the store with other bytes, sends
//! the whole segment again rather than a tail that does not fit.

use std::collections::{BTreeMap, HashMap};

use tether_protocol::{SessionId, ToHost, TurnStart};

/// The mirror of one host's held histories.
#[derive(Debug, Default)]
pub(crate) struct HeldHistories {
    /// The host's budget in bytes; 0 when it keeps none.
    budget: u64,
    held: HashMap<SessionId, Held>,
    /// Sessions by when they were last sent a turn, oldest first.
    by_use: BTreeMap<u64, SessionId>,
    clock: u64,
    /// The bytes of every history held.
    total: u64,
}

/// One session's history as the host holds it.
#[derive(Debug, Clone, Copy)]
struct Held {
    /// Messages held.
    count: usize,
    /// The session's digest of those messages ([`History::digest`]).
    digest: u64,
    /// The length of the array as it was sent.
    bytes: u64,
    /// When it was last sent a turn (a key of `by_use`).
    used: u64,
}

impl HeldHistories {
    /// Takes the budget from the host's `hello`.
    pub(crate) fn set_budget(&mut self, bytes: u64) {
        self.budget = bytes;
    }

    /// The lines that carry `turn` to the host, in order: any `history.drop`
    /// that makes room, then the `turn.start`.
    pub(crate) fn lines(&mut self, turn: &TurnStart) -> Vec<String> {
        if self.budget == 0 {
            return vec![turn.line()];
        }
        let history = &turn.history;
        let bytes = history.as_json().len() as u64;
        let (Some(count), Some(digest)) = (history.marked_len(), history.digest()) else {
            return self.whole(turn);
        };
        if bytes > self.budget {
            return self.whole(turn);
        }
        let (base, items) = match self.held.get(&turn.session_id) {
            Some(held) => match history.after(held.count, held.digest) {
                Some(items) => (held.count, items),
                None => (0, history.after(0, 0).unwrap_or_default()),
            },
            None => (0, history.after(0, 0).unwrap_or_default()),
        };
        let Ok(line) = turn.line_after(base as u64, items) else {
            return self.whole(turn);
        };
        let mut lines = self.make_room(&turn.session_id, bytes);
        lines.push(line);
        self.hold(&turn.session_id, count, digest, bytes);
        lines
    }

    /// A `turn.start` with the whole history and no base: the host holds
    /// nothing for the session after it (PROTOCOL Part 2), and neither do
    /// the books.
    fn whole(&mut self, turn: &TurnStart) -> Vec<String> {
        self.forget(&turn.session_id);
        vec![turn.line()]
    }

    /// Drops the sessions used longest ago (never `keep`) until `bytes`
    /// more for `keep` fit the budget; the `history.drop` lines that say so.
    fn make_room(&mut self, keep: &SessionId, bytes: u64) -> Vec<String> {
        let kept = self.held.get(keep).map_or(0, |h| h.bytes);
        let mut lines = Vec::new();
        while self.total - kept + bytes > self.budget {
            let Some(oldest) = self.by_use.values().find(|id| *id != keep).cloned() else {
                break;
            };
            self.forget(&oldest);
            lines.push(ToHost::HistoryDrop { session_id: oldest }.to_line());
        }
        lines
    }

    fn hold(&mut self, session: &SessionId, count: usize, digest: u64, bytes: u64) {
        self.forget(session);
        self.clock += 1;
        let used = self.clock;
        self.by_use.insert(used, session.clone());
        self.held.insert(
            session.clone(),
            Held {
                count,
                digest,
                bytes,
                used,
            },
        );
        self.total += bytes;
    }

    fn forget(&mut self, session: &SessionId) {
        if let Some(held) = self.held.remove(session) {
            self.by_use.remove(&held.used);
            self.total -= held.bytes;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use proptest::prelude::*;
    use serde_json::{Map, Value};
    use tether_protocol::{parse_host_line, History, Mark};

    use super::*;

    /// A session's segment as the session marks it.
    #[derive(Default, Clone)]
    struct Segment {
        items: Vec<String>,
    }

    impl Segment {
        fn history(&self) -> History {
            let mut text = String::new();
            let mut marks = Vec::new();
            let mut digest = 0;
            for item in &self.items {
                if !text.is_empty() {
                    text.push(',');
                }
                text.push_str(item);
                digest = Mark::chain(digest, item);
                marks.push(Mark {
                    end: text.len(),
                    digest,
                });
            }
            History::from_encoded(&text, &marks)
        }
    }

    /// A host that does what PROTOCOL Part 2 says and nothing more.
    #[derive(Default)]
    struct ModelHost {
        held: HashMap<SessionId, Vec<Value>>,
    }

    impl ModelHost {
        /// Reads the lines; the history the turn's engine gets, if any.
        fn read(&mut self, lines: &[String]) -> Vec<Value> {
            let mut seen = None;
            for line in lines {
                match parse_host_line::<ToHost>(line).expect("a frame") {
                    ToHost::HistoryDrop { session_id } => {
                        assert!(self.held.remove(&session_id).is_some(), "dropped unheld");
                    }
                    ToHost::TurnStart(turn) => {
                        let sent: Vec<Value> =
                            serde_json::from_str(turn.history.as_json()).expect("array");
                        let whole = match turn.history_base {
                            None => {
                                self.held.remove(&turn.session_id);
                                sent
                            }
                            Some(base) => {
                                // Base 0 starts over, whatever is held.
                                let mut held =
                                    self.held.remove(&turn.session_id).unwrap_or_default();
                                if base == 0 {
                                    held.clear();
                                }
                                assert_eq!(held.len() as u64, base, "base of {}", turn.session_id);
                                held.extend(sent);
                                self.held.insert(turn.session_id.clone(), held.clone());
                                held
                            }
                        };
                        seen = Some(whole);
                    }
                    other => panic!("unexpected {other:?}"),
                }
            }
            seen.expect("a turn.start")
        }

        /// The bytes held, counted as the gateway counts them.
        fn bytes(&self) -> u64 {
            self.held
                .values()
                .map(|v| serde_json::to_string(v).expect("encodes").len() as u64)
                .sum()
        }
    }

    fn start(session: &str, history: History) -> TurnStart {
        TurnStart {
            turn_id: "t".into(),
            session_id: session.into(),
            trace_id: "abc".into(),
            history_base: None,
            history,
            prompt: "p".into(),
            config: Map::new(),
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        /// A message of this length noted, then a turn.
        Turn(usize, usize),
        /// The segment starts over with one message (a compaction).
        Compact(usize),
        /// A turn whose history is not marked.
        Unmarked(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (0..4usize, 0..120usize).prop_map(|(s, n)| Op::Turn(s, n)),
            1 => (0..4usize).prop_map(Op::Compact),
            1 => (0..4usize).prop_map(Op::Unmarked),
        ]
    }

    proptest! {
        /// Whatever the budget and the order of turns, the host rebuilds
        /// every turn's whole history from the lines, never holds more than
        /// its budget, and the books agree with what it holds.
        #[test]
        fn the_host_sees_every_whole_history_within_its_budget(
            budget in prop_oneof![Just(0u64), 1u64..600, Just(1 << 20)],
            ops in proptest::collection::vec(op(), 1..60),
        ) {
            let mut books = HeldHistories::default();
            books.set_budget(budget);
            let mut host = ModelHost::default();
            let mut segments: Vec<Segment> = vec![Segment::default(); 4];
            let mut n = 0;
            for op in ops {
                let (s, history) = match op {
                    Op::Turn(s, len) => {
                        n += 1;
                        segments[s].items.push(format!(r#"{{"n":{n},"t":"{}"}}"#, "x".repeat(len)));
                        (s, segments[s].history())
                    }
                    Op::Compact(s) => {
                        n += 1;
                        segments[s].items = vec![format!(r#"{{"n":{n},"summary":true}}"#)];
                        (s, segments[s].history())
                    }
                    Op::Unmarked(s) => {
                        let items = segments[s].items.join(",");
                        (s, History::from_raw(
                            serde_json::value::RawValue::from_string(format!("[{items}]")).expect("json"),
                        ).expect("array"))
                    }
                };
                let want: Vec<Value> = serde_json::from_str(history.as_json()).expect("array");
                let lines = books.lines(&start(&format!("s{s}"), history));
                prop_assert_eq!(host.read(&lines), want);
                prop_assert!(host.bytes() <= budget, "{} held over {}", host.bytes(), budget);
                prop_assert_eq!(host.bytes(), books.total);
            }
        }
    }
}
