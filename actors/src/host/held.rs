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
//! knows what that is, within the host's budget: a held session that
//! grows drops the sessions used longest ago, a new one only cold ones
//! (see [`HeldHistories::make_room`]). The books live in the host actor
//! and die with it, so a restarted host starts from nothing on both sides. What a host holds
//! is checked against the session's own marks ([`History::after`]): a
//! compaction, or a session rebuilt from the store with other bytes, sends
//! the whole segment again rather than a tail that does not fit.

use std::collections::{BTreeMap, HashMap};

use tether_protocol::{SessionId, ToHost, TurnStart};

/// A held session is cold once this many turns per session held have gone
/// to the host since its last one.
const COLD: u64 = 4;

/// The mirror of one host's held histories.
#[derive(Debug, Default)]
pub(crate) struct HeldHistories {
    /// The host's budget in bytes; 0 when it keeps none.
    budget: u64,
    held: HashMap<SessionId, Held>,
    /// Sessions by when they were last sent a turn, oldest first.
    by_use: BTreeMap<u64, SessionId>,
    /// Turns sent to the host so far.
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

    /// Whether the host keeps histories at all.
    pub(crate) fn keeps(&self) -> bool {
        self.budget > 0
    }

    /// The lines that carry `turn` to the host, in order: any `history.drop`
    /// that makes room, then the `turn.start`.
    pub(crate) fn lines(&mut self, turn: &TurnStart) -> Vec<String> {
        if self.budget == 0 {
            return vec![turn.line()];
        }
        // Every turn ages what is held, those sent whole too: otherwise
        // sessions held and then left idle would never turn cold while only
        // newcomers take turns, and would keep them out for good.
        self.clock += 1;
        let history = &turn.history;
        let bytes = history.as_json().len() as u64;
        let (Some(count), Some(digest)) = (history.marked_len(), history.digest()) else {
            return self.whole(turn);
        };
        if bytes > self.budget {
            return self.whole(turn);
        }
        let held = self.held.get(&turn.session_id).copied();
        let (base, items) =
            match held.and_then(|h| Some((h.count, history.after(h.count, h.digest)?))) {
                Some(prefix) => prefix,
                None => (0, history.after(0, 0).unwrap_or_default()),
            };
        // Room first: a session that gets none is sent whole, and its tail
        // line would have been built for nothing.
        let Some(mut lines) = self.make_room(&turn.session_id, bytes, held.is_some()) else {
            return self.whole(turn);
        };
        match turn.line_after(base as u64, items) {
            Ok(line) => {
                lines.push(line);
                self.hold(&turn.session_id, count, digest, bytes);
            }
            // The drops already made stay on the wire with the books.
            Err(_) => lines.extend(self.whole(turn)),
        }
        lines
    }

    /// A `turn.start` with the whole history and no base: the host holds
    /// nothing for the session after it (PROTOCOL Part 2), and neither do
    /// the books.
    fn whole(&mut self, turn: &TurnStart) -> Vec<String> {
        self.forget(&turn.session_id);
        vec![turn.line()]
    }

    /// Makes room for `keep` to hold `bytes`; the `history.drop` lines that
    /// do, or `None` when there is none to make (nothing is dropped then).
    ///
    /// A session already held may push out the sessions used longest ago.
    /// One not held yet may push out only cold ones, not sent a turn for
    /// [`COLD`] times as many turns as there are sessions held: when more
    /// sessions take turns in a ring than the budget holds, evicting the
    /// least recently used to let each newcomer in drops every session just
    /// before its next turn, and nothing would ever be sent as a tail. This
    /// way the ones held stay held, and the rest are sent whole.
    fn make_room(&mut self, keep: &SessionId, bytes: u64, held: bool) -> Option<Vec<String>> {
        let kept = self.held.get(keep).map_or(0, |h| h.bytes);
        let mut need = (self.total - kept + bytes).saturating_sub(self.budget);
        let cold_before = self
            .clock
            .saturating_sub(COLD.saturating_mul(self.held.len() as u64));
        let mut victims = Vec::new();
        for (&used, id) in &self.by_use {
            if need == 0 {
                break;
            }
            if id == keep {
                continue;
            }
            if !held && used > cold_before {
                break;
            }
            need = need.saturating_sub(self.held.get(id).map_or(0, |h| h.bytes));
            victims.push(id.clone());
        }
        if need > 0 {
            return None;
        }
        Some(
            victims
                .into_iter()
                .map(|session_id| {
                    self.forget(&session_id);
                    ToHost::HistoryDrop { session_id }.to_line()
                })
                .collect(),
        )
    }

    fn hold(&mut self, session: &SessionId, count: usize, digest: u64, bytes: u64) {
        self.forget(session);
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

    /// The turn.start among `lines`: its base, if it has one.
    fn base_of(lines: &[String]) -> Option<u64> {
        lines
            .iter()
            .find_map(|line| match parse_host_line::<ToHost>(line) {
                Ok(ToHost::TurnStart(turn)) => Some(turn.history_base),
                _ => None,
            })?
    }

    /// Four sessions taking turns in a ring, their histories growing past
    /// what the budget holds for all four: the ones held stay held (sent
    /// as tails), the others are sent whole, rather than each being
    /// dropped just before its next turn.
    #[test]
    fn a_ring_of_sessions_larger_than_the_budget_keeps_some_held() {
        let mut books = HeldHistories::default();
        books.set_budget(1500);
        let mut host = ModelHost::default();
        let mut segments = vec![Segment::default(); 4];
        let mut tails = 0;
        for round in 0..12 {
            for (s, segment) in segments.iter_mut().enumerate() {
                segment
                    .items
                    .push(format!(r#"{{"r":{round},"t":"{}"}}"#, "x".repeat(80)));
                let history = segment.history();
                let want: Vec<Value> = serde_json::from_str(history.as_json()).expect("array");
                let lines = books.lines(&start(&format!("s{s}"), history));
                assert_eq!(host.read(&lines), want);
                assert!(host.bytes() <= 1500);
                if round >= 4 && base_of(&lines).is_some_and(|b| b > 0) {
                    tails += 1;
                }
            }
        }
        // Rounds 4 to 11 are 32 turns; all four fit until round 3.
        assert!(tails >= 12, "only {tails} of 32 turns were sent as tails");
    }

    /// Sessions held and then left idle turn cold while newcomers take
    /// turns, even turns sent whole, and then make room for them.
    #[test]
    fn idle_sessions_turn_cold_and_make_room() {
        let mut books = HeldHistories::default();
        books.set_budget(450);
        let mut host = ModelHost::default();
        let item = |n: usize| format!(r#"{{"n":{n},"t":"{}"}}"#, "x".repeat(90));
        // Two sessions nearly fill the budget, then go idle.
        for s in ["a", "b"] {
            let segment = Segment {
                items: vec![item(1), item(2)],
            };
            host.read(&books.lines(&start(s, segment.history())));
        }
        // A newcomer that does not fit beside them is sent whole while
        // they are warm, and held once they are cold: it is then sent
        // as a tail (of nothing new).
        let newcomer = Segment {
            items: vec![item(3)],
        };
        let mut bases = Vec::new();
        for _ in 0..16 {
            let lines = books.lines(&start("c", newcomer.history()));
            host.read(&lines);
            bases.push(base_of(&lines));
            assert!(host.bytes() <= 450);
        }
        assert_eq!(bases[0], None, "sent whole while they are warm: {bases:?}");
        assert_eq!(bases[15], Some(1), "held once they are cold: {bases:?}");
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
