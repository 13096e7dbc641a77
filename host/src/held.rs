//! The sessions' histories this host keeps between turns (PROTOCOL Part 2,
//! `history_cache_bytes`).
//!
//! A host that keeps them is sent, with each `turn.start`, only the
//! messages it has not seen (`history_base` says how many it holds). The
//! gateway keeps the books and the budget: this side holds exactly what it
//! was sent, until it is sent another history for the session, a
//! `turn.start` without a base, or `history.drop`. So the only check left
//! here is that a base matches what is held; the engine is then handed the
//! whole segment, as from any other gateway.

use std::collections::HashMap;

use serde_json::value::RawValue;
use tether_protocol::{History, SessionId, TurnStart};

/// The held histories, by session.
#[derive(Debug, Default)]
pub(crate) struct HeldHistories {
    held: HashMap<SessionId, Held>,
}

#[derive(Debug)]
struct Held {
    /// The messages as array items (no brackets), as sent.
    items: String,
    count: u64,
}

/// A `history_base` this host does not hold.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("history_base {base} for session {session} but {held} messages are held")]
pub(crate) struct Mismatch {
    session: SessionId,
    base: u64,
    held: u64,
}

impl HeldHistories {
    /// Makes `turn.history` the whole segment, from what is held and what
    /// the line brought, and holds it for the next turn. On a mismatch the
    /// turn cannot run, and nothing is held any more (the gateway replaces
    /// a host that says so, and starts its books again).
    pub(crate) fn resolve(&mut self, turn: &mut TurnStart) -> Result<(), Mismatch> {
        let Some(base) = turn.history_base.take() else {
            // The whole segment, not to be held.
            self.held.remove(&turn.session_id);
            return Ok(());
        };
        let sent = turn.history.as_json();
        // Trimmed: a gateway may write `[ ]`, and the items are joined by
        // commas below, where stray blanks would leave `[a, ]`.
        let items = sent[1..sent.len() - 1].trim();
        // Lines are checked as they are read: this only counts.
        let count = serde_json::from_str::<Vec<&RawValue>>(sent).map_or(0, |v| v.len() as u64);
        let held = match (base, self.held.remove(&turn.session_id)) {
            (0, _) => Held {
                items: items.to_owned(),
                count,
            },
            (base, Some(mut held)) if held.count == base => {
                if !held.items.is_empty() && !items.is_empty() {
                    held.items.push(',');
                }
                held.items.push_str(items);
                held.count += count;
                held
            }
            (base, held) => {
                let held = held.map_or(0, |h| h.count);
                self.held.clear();
                return Err(Mismatch {
                    session: turn.session_id.clone(),
                    base,
                    held,
                });
            }
        };
        turn.history = History::from_encoded(&held.items, &[]);
        self.held.insert(turn.session_id.clone(), held);
        Ok(())
    }

    /// `history.drop`.
    pub(crate) fn drop_session(&mut self, session: &SessionId) {
        self.held.remove(session);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Map;

    fn turn(session: &str, base: Option<u64>, history: &str) -> TurnStart {
        TurnStart {
            turn_id: "t_1".into(),
            session_id: session.into(),
            trace_id: "abc".into(),
            history_base: base,
            history: tether_protocol::History::from_raw(
                RawValue::from_string(history.into()).expect("json"),
            )
            .expect("an array"),
            prompt: "p".into(),
            config: Map::new(),
        }
    }

    fn resolved(held: &mut HeldHistories, t: TurnStart) -> Result<String, Mismatch> {
        let mut t = t;
        held.resolve(&mut t)?;
        assert_eq!(t.history_base, None, "the engine sees no base");
        Ok(t.history.as_json().to_owned())
    }

    #[test]
    fn a_base_extends_what_is_held_and_a_wrong_one_is_refused() {
        let mut held = HeldHistories::default();
        assert_eq!(
            resolved(&mut held, turn("s", Some(0), "[1,2]")).as_deref(),
            Ok("[1,2]")
        );
        assert_eq!(
            resolved(&mut held, turn("s", Some(2), "[3]")).as_deref(),
            Ok("[1,2,3]")
        );
        assert_eq!(
            resolved(&mut held, turn("s", Some(3), "[]")).as_deref(),
            Ok("[1,2,3]")
        );
        // Another session starts from nothing.
        assert_eq!(
            resolved(&mut held, turn("o", Some(0), "[]")).as_deref(),
            Ok("[]")
        );
        assert_eq!(
            resolved(&mut held, turn("o", Some(0), "[9]")).as_deref(),
            Ok("[9]")
        );
        // A whole history is used as is and not held.
        assert_eq!(
            resolved(&mut held, turn("o", None, "[7]")).as_deref(),
            Ok("[7]")
        );
        assert_eq!(
            resolved(&mut held, turn("s", Some(3), "[4]")).as_deref(),
            Ok("[1,2,3,4]")
        );
        // Blanks inside the brackets are not items.
        assert_eq!(
            resolved(&mut held, turn("s", Some(4), "[ ]")).as_deref(),
            Ok("[1,2,3,4]")
        );
        assert!(resolved(&mut held, turn("o", Some(1), "[8]")).is_err());
        // A mismatch forgets everything.
        assert!(resolved(&mut held, turn("s", Some(4), "[]")).is_err());
    }

    #[test]
    fn a_dropped_session_is_held_no_more() {
        let mut held = HeldHistories::default();
        assert!(resolved(&mut held, turn("s", Some(0), "[1]")).is_ok());
        held.drop_session(&"s".into());
        assert!(resolved(&mut held, turn("s", Some(1), "[2]")).is_err());
    }
}
