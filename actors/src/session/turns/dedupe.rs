//! `prompt.submit`'s `dedupe_key`: a second prompt with a key seen within
//! the window is answered with the first one's turn, and nothing new is
//! written (a double-click, a client's retry after a lost answer).
//!
//! The key travels in the prompt's `message.user` payload, so the map is
//! derived from durable events like the transcript it lives beside
//! (`history.rs`): every `message.user` the session emits is noted, and a
//! session that loads its segment (a restart, a takeover by another node)
//! rebuilds it from the segment's stored rows. A lookup is only trusted
//! with the segment in memory.
//!
//! Bounded: at most [`DEDUPE_KEYS`] keys per session, each for
//! [`DEDUPE_WINDOW_MS`] from its prompt's event; the oldest key goes first.

use std::collections::{HashMap, VecDeque};

use serde::Deserialize;
use tether_protocol::{EventType, TraceId, TurnId};
use tether_store::EventRow;

/// How many keys a session remembers.
pub(crate) const DEDUPE_KEYS: usize = 256;
/// How long a key is remembered, from its prompt's `message.user`.
pub(crate) const DEDUPE_WINDOW_MS: i64 = 10 * 60 * 1000;

/// The prompt a key was first sent with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Seen {
    pub turn_id: TurnId,
    pub trace_id: TraceId,
    /// Seq of its `message.user`: a duplicate is answered once it is on disk.
    pub user_seq: u64,
    pub at_ms: i64,
}

/// The keys seen within the window, oldest first.
#[derive(Debug, Default)]
pub(crate) struct Dedupe {
    by_key: HashMap<String, Seen>,
    /// `(key, at_ms)` in the order noted; an entry whose `at_ms` no longer
    /// matches the map's was noted again later and is skipped on eviction.
    order: VecDeque<(String, i64)>,
}

/// The one field read from a `message.user` payload.
#[derive(Deserialize)]
struct KeyField {
    #[serde(default)]
    dedupe_key: Option<String>,
}

impl Dedupe {
    /// The prompt `key` was first sent with, if within the window at `now_ms`.
    pub(crate) fn get(&self, key: &str, now_ms: i64) -> Option<&Seen> {
        self.by_key
            .get(key)
            .filter(|s| now_ms.saturating_sub(s.at_ms) <= DEDUPE_WINDOW_MS)
    }

    /// Remembers `key` for `seen`, forgetting the oldest keys past the bound
    /// and those out of the window.
    pub(crate) fn note(&mut self, key: String, seen: Seen) {
        let at_ms = seen.at_ms;
        self.order.push_back((key.clone(), at_ms));
        self.by_key.insert(key, seen);
        while self.order.len() > DEDUPE_KEYS
            || self
                .order
                .front()
                .is_some_and(|(_, t)| at_ms.saturating_sub(*t) > DEDUPE_WINDOW_MS)
        {
            let Some((old, t)) = self.order.pop_front() else {
                break;
            };
            if self.by_key.get(&old).is_some_and(|s| s.at_ms == t) {
                self.by_key.remove(&old);
            }
        }
    }

    /// Forgets the keys of prompts from `seq` on: their `message.user`s
    /// were never written, so they were never accepted.
    pub(crate) fn forget_from(&mut self, seq: u64) {
        self.by_key.retain(|_, s| s.user_seq < seq);
    }

    /// Notes the key of a stored `message.user` row, if it has one.
    pub(crate) fn note_row(&mut self, row: &EventRow) {
        if let Some((key, seen)) = keyed(row) {
            self.note(key, seen);
        }
    }

    /// Takes in the keys of rows read from the store (older than every key
    /// noted since), keeping the noted ones the newest.
    pub(crate) fn merge_older(&mut self, older: Vec<(String, Seen)>) {
        let newer = std::mem::take(self);
        for (key, seen) in older {
            self.note(key, seen);
        }
        let Dedupe { mut by_key, order } = newer;
        for (key, t) in order {
            if let Some(seen) = by_key.remove(&key).filter(|s| s.at_ms == t) {
                self.note(key, seen);
            }
        }
    }
}

/// The key and prompt of a `message.user` row sent with a `dedupe_key`.
pub(crate) fn keyed(row: &EventRow) -> Option<(String, Seen)> {
    if row.kind != EventType::MessageUser.as_str() || !row.payload.contains("\"dedupe_key\"") {
        return None;
    }
    let key = serde_json::from_str::<KeyField>(&row.payload)
        .ok()?
        .dedupe_key?;
    let seen = Seen {
        turn_id: TurnId::from(row.turn_id.as_deref()?),
        trace_id: TraceId::from(row.trace_id.as_deref().unwrap_or_default()),
        user_seq: row.seq,
        at_ms: row.ts_ms,
    };
    Some((key, seen))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(turn: &str, seq: u64, at_ms: i64) -> Seen {
        Seen {
            turn_id: turn.into(),
            trace_id: "tr".into(),
            user_seq: seq,
            at_ms,
        }
    }

    #[test]
    fn a_key_is_found_within_the_window_only() {
        let mut d = Dedupe::default();
        d.note("k".into(), seen("t_1", 3, 1_000));
        assert_eq!(d.get("k", 1_000).map(|s| s.user_seq), Some(3));
        assert!(d.get("k", 1_000 + DEDUPE_WINDOW_MS).is_some());
        assert!(d.get("k", 1_001 + DEDUPE_WINDOW_MS).is_none());
        assert!(d.get("other", 1_000).is_none());
    }

    #[test]
    fn the_oldest_keys_go_past_the_bound_and_a_key_noted_again_stays() {
        let mut d = Dedupe::default();
        d.note("k0".into(), seen("t_0", 1, 0));
        for i in 1..DEDUPE_KEYS {
            d.note(format!("k{i}"), seen("t", i as u64, i as i64));
        }
        // Noted again later: its first entry must not evict it.
        d.note("k0".into(), seen("t_0b", 999, 999));
        d.note("one more".into(), seen("t", 1000, 1000));
        assert_eq!(d.by_key.len(), DEDUPE_KEYS);
        assert!(d.get("k1", 1000).is_none(), "the oldest went");
        assert_eq!(
            d.get("k0", 1000).map(|s| s.turn_id.clone()),
            Some("t_0b".into())
        );
        assert!(d.order.len() <= DEDUPE_KEYS);
    }

    #[test]
    fn keys_out_of_the_window_are_dropped_as_new_ones_come() {
        let mut d = Dedupe::default();
        d.note("old".into(), seen("t_1", 1, 0));
        d.note("new".into(), seen("t_2", 2, DEDUPE_WINDOW_MS + 1));
        assert_eq!(d.by_key.len(), 1);
        assert_eq!(d.order.len(), 1);
    }

    #[test]
    fn stored_rows_give_their_keys_and_merge_under_the_newer_ones() {
        let row = |seq: u64, payload: &str, turn: &str| EventRow {
            seq,
            kind: "message.user".into(),
            payload: payload.into(),
            turn_id: Some(turn.into()),
            trace_id: Some("abc".into()),
            ts_ms: seq as i64,
        };
        assert_eq!(keyed(&row(1, r#"{"text":"hi"}"#, "t_1")), None);
        let (key, s) = keyed(&row(2, r#"{"text":"hi","dedupe_key":"k"}"#, "t_2")).unwrap();
        assert_eq!((key.as_str(), s.user_seq), ("k", 2));
        let mut d = Dedupe::default();
        d.note_row(&row(5, r#"{"text":"x","dedupe_key":"k"}"#, "t_5"));
        d.merge_older(vec![
            ("k".into(), seen("t_2", 2, 2)),
            ("j".into(), seen("t_3", 3, 3)),
        ]);
        assert_eq!(d.get("k", 5).map(|s| s.user_seq), Some(5));
        assert_eq!(d.get("j", 5).map(|s| s.user_seq), Some(3));
    }
}
