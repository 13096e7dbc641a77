//! What the generated sessions hold: the durable events a gateway stores
//! for a chat session (`session.created`, then turns of `message.user`,
//! `message.start`, sometimes `tool.start` + `tool.complete`, and
//! `message.complete`; the deltas are transient and never stored), with
//! the payload types the gateway serializes, so the rows are the ones a
//! gateway writes.
//!
//! The text is drawn from a small vocabulary with a seeded generator: the
//! same run writes the same bytes, and the payloads are of realistic sizes
//! without being one repeated character (which would compress unlike
//! text).

use serde_json::json;
use tether_protocol::{
    to_raw, CompleteStatus, EventType, MessageCompletePayload, SessionCreatedPayload, SessionId,
    ToolCompletePayload, ToolStartPayload, TraceId, TurnId, UserPayload,
};
use tether_store::EventRow;

/// Events of a turn without a tool call: user, start, complete.
pub const PLAIN_TURN: u64 = 3;
/// Events of a turn with one tool call.
pub const TOOL_TURN: u64 = 5;
/// Every fourth turn calls a tool.
const TOOL_EVERY: u64 = 4;
/// Time between two events of a session, ms.
const EVENT_GAP_MS: i64 = 1500;

const WORDS: &[&str] = &[
    "the", "session", "gateway", "agent", "reply", "user", "asked", "about", "deploy", "rust",
    "config", "error", "retry", "token", "stream", "history", "summary", "tool", "search",
    "result", "file", "line", "change", "test", "build", "cluster", "node", "store", "index",
    "query", "page", "memory", "latency", "because", "which", "then", "when", "with", "from",
    "should", "could", "would", "might", "will", "can", "not", "also", "only", "every", "first",
    "second", "last", "next", "before", "after", "while", "until", "a", "an", "of", "to", "in",
    "on", "for", "and", "or", "but", "so", "is", "are", "was", "were", "it", "this", "that",
];

/// A seeded xorshift generator: cheap, reproducible, good enough for text.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// A value in `lo..=hi`.
    pub fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }

    /// Words up to about `bytes` long.
    pub fn text(&mut self, bytes: u64) -> String {
        let mut s = String::with_capacity(bytes as usize + 12);
        while (s.len() as u64) < bytes {
            if !s.is_empty() {
                s.push(' ');
            }
            let i = (self.next() % WORDS.len() as u64) as usize;
            s.push_str(WORDS.get(i).copied().unwrap_or("word"));
        }
        s.push('.');
        s
    }
}

/// Whether a session may end after `rest` more events: turns are 3 or 5
/// events long, so 0, 3, 5, 6 and everything from 8 on.
pub fn whole_turns(rest: u64) -> bool {
    !matches!(rest, 1 | 2 | 4 | 7)
}

/// The smallest event count from `want` up that a session can have
/// (`session.created` plus whole turns).
pub fn session_size(want: u64) -> u64 {
    let mut n = want.max(1);
    while !whole_turns(n - 1) {
        n += 1;
    }
    n
}

/// One session being written: its id, the events it still has to get,
/// and where its current turn stands.
#[derive(Debug)]
pub struct SessionFill {
    pub id: SessionId,
    pub profile: String,
    pub title: String,
    pub created_at_ms: i64,
    /// Events it will hold when done.
    pub total: u64,
    /// The next event's seq (events of the current turn get theirs when
    /// the turn is planned).
    next_seq: u64,
    /// Events handed out so far.
    written: u64,
    /// Transcript messages among the events handed out.
    message_count: u64,
    turns: u64,
    /// The events left of the current turn, in order.
    turn: Vec<EventRow>,
    rng: Rng,
}

impl SessionFill {
    pub fn new(index: u64, profile: &str, total: u64, created_at_ms: i64) -> SessionFill {
        let mut rng = Rng::new(index + 1);
        let title = format!("{} {}", capitalised(&rng.text(12)), index);
        SessionFill {
            id: SessionId::new(),
            profile: profile.to_string(),
            title,
            created_at_ms,
            total: session_size(total),
            next_seq: 1,
            written: 0,
            message_count: 0,
            turns: 0,
            turn: Vec::new(),
            rng,
        }
    }

    /// Whether its first event is still to come.
    pub fn is_new(&self) -> bool {
        self.written == 0
    }

    pub fn done(&self) -> bool {
        self.written >= self.total
    }

    /// Events not planned into a turn yet.
    fn unplanned(&self) -> u64 {
        (self.total + 1).saturating_sub(self.next_seq)
    }

    /// The time of the last event handed out, ms.
    pub fn last_ts_ms(&self) -> i64 {
        self.ts(self.written)
    }

    /// Transcript messages among the events handed out.
    pub fn message_count(&self) -> u64 {
        self.message_count
    }

    fn ts(&self, seq: u64) -> i64 {
        self.created_at_ms + seq as i64 * EVENT_GAP_MS
    }

    /// `session.created`, its first event.
    pub fn created(&mut self) -> EventRow {
        let payload = SessionCreatedPayload {
            title: self.title.clone(),
            profile: self.profile.clone(),
            parent_session_id: None,
        };
        self.written += 1;
        self.row(EventType::SessionCreated, to_raw(&payload).get(), None)
    }

    /// Up to `max` more events (at least one if any are left).
    pub fn take(&mut self, max: u64) -> Vec<EventRow> {
        let mut out = Vec::new();
        while (out.len() as u64) < max.max(1) && !self.done() {
            if self.turn.is_empty() {
                self.plan_turn();
            }
            if self.turn.is_empty() {
                break;
            }
            let e = self.turn.remove(0);
            if EventType::parse(&e.kind).is_some_and(|k| k.is_transcript()) {
                self.message_count += 1;
            }
            self.written += 1;
            out.push(e);
        }
        out
    }

    /// The next turn's events, seqs given; sized so the session still ends
    /// on a whole turn.
    fn plan_turn(&mut self) {
        let rest = self.unplanned();
        self.turns += 1;
        let wants_tool = self.turns.is_multiple_of(TOOL_EVERY);
        let tool = if wants_tool && rest >= TOOL_TURN && whole_turns(rest - TOOL_TURN) {
            true
        } else {
            !(rest >= PLAIN_TURN && whole_turns(rest - PLAIN_TURN))
        };
        let turn = Some((TurnId::new(), TraceId::new()));
        let user_bytes = self.rng.between(40, 300);
        let user = UserPayload {
            text: self.rng.text(user_bytes),
            replaces: None,
            dedupe_key: None,
        };
        let mut events = vec![self.row(EventType::MessageUser, to_raw(&user).get(), turn.clone())];
        events.push(self.row(EventType::MessageStart, "{}", turn.clone()));
        if tool {
            let tool_id = format!("call_{:016x}", self.rng.next());
            let query_bytes = self.rng.between(10, 60);
            let start = ToolStartPayload {
                tool_id: tool_id.clone(),
                name: "search".into(),
                args: json!({ "query": self.rng.text(query_bytes) }),
            };
            events.push(self.row(EventType::ToolStart, to_raw(&start).get(), turn.clone()));
            let summary_bytes = self.rng.between(80, 400);
            let complete = ToolCompletePayload {
                tool_id,
                name: "search".into(),
                result: json!({ "hits": self.rng.between(0, 20), "summary": self.rng.text(summary_bytes) }),
                is_error: false,
            };
            events.push(self.row(
                EventType::ToolComplete,
                to_raw(&complete).get(),
                turn.clone(),
            ));
        }
        let reply_bytes = self.rng.between(100, 900);
        let input_tokens = self.rng.between(200, 4000);
        let complete = MessageCompletePayload {
            text: self.rng.text(reply_bytes),
            status: CompleteStatus::Complete,
            failure_reason: None,
            recoverable: None,
            usage: Some(json!({
                "input_tokens": input_tokens,
                "output_tokens": reply_bytes / 4,
            })),
        };
        events.push(self.row(EventType::MessageComplete, to_raw(&complete).get(), turn));
        self.turn = events;
    }

    fn row(&mut self, kind: EventType, payload: &str, turn: Option<(TurnId, TraceId)>) -> EventRow {
        let seq = self.next_seq;
        self.next_seq += 1;
        let (turn_id, trace_id) = match turn {
            Some((t, tr)) => (Some(t.as_str().to_string()), Some(tr.as_str().to_string())),
            None => (None, None),
        };
        EventRow {
            seq,
            kind: kind.as_str().to_string(),
            payload: payload.to_string(),
            turn_id,
            trace_id,
            ts_ms: self.ts(seq),
        }
    }
}

fn capitalised(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_ends_on_a_whole_turn_with_the_count_it_was_given() {
        for want in [1, 2, 3, 4, 5, 8, 9, 10, 11, 89, 10_000] {
            let mut s = SessionFill::new(want, "default", want, 0);
            let total = s.total;
            let mut events = vec![s.created()];
            while !s.done() {
                events.extend(s.take(7));
            }
            assert_eq!(events.len() as u64, total, "want {want}");
            assert!(total >= want && total <= want + 3);
            let last = events.last().map(|e| e.kind.clone()).unwrap_or_default();
            if total > 1 {
                assert_eq!(last, "message.complete", "want {want}");
            }
            let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
            assert_eq!(seqs, (1..=total).collect::<Vec<_>>());
        }
    }

    #[test]
    fn every_turn_has_exactly_one_message_complete_at_its_end() {
        let mut s = SessionFill::new(3, "default", 1000, 0);
        let mut events = vec![s.created()];
        while !s.done() {
            events.extend(s.take(50));
        }
        let mut open: Option<String> = None;
        for e in &events[1..] {
            match e.kind.as_str() {
                "message.user" => {
                    assert!(open.is_none());
                    open = e.turn_id.clone();
                }
                "message.complete" => {
                    assert_eq!(open.take(), e.turn_id.clone());
                }
                _ => assert_eq!(open, e.turn_id),
            }
        }
        assert!(open.is_none());
    }
}
