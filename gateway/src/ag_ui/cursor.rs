//! The SSE `id:` of every AG-UI event tether sends, and the `Last-Event-ID`
//! a client resumes with: `SEQ.STEP.TEXT.REASONING`.
//!
//! - `SEQ` is the seq of the last stored event of the run the client was
//!   sent anything of (every AG-UI event comes from one tether event);
//! - `STEP` how much of that event's AG-UI events were sent: each kind of
//!   tether event maps to a fixed list of steps (`events.rs`), and the id
//!   of step `k` says `k + 1`;
//! - `TEXT` and `REASONING` how many bytes of the run's answer and of its
//!   reasoning were sent: deltas are not stored and have no seq, so what
//!   a client has of them is counted in bytes (their offsets, PROTOCOL
//!   1.10).
//!
//! A resume replays from `SEQ` (its steps from `STEP` on) and sends the
//! running turn's text from byte `TEXT`: nothing twice, nothing missing.

use std::fmt;

use tether_protocol::EventType;

/// Where a client is in a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cursor {
    pub seq: u64,
    pub step: u8,
    pub text: u64,
    pub reasoning: u64,
}

impl fmt::Display for Cursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}.{}.{}.{}",
            self.seq, self.step, self.text, self.reasoning
        )
    }
}

impl Cursor {
    /// Parses a `Last-Event-ID`; `None` for anything tether did not send
    /// (each part as tether writes numbers, `event_id.rs`; a step is checked
    /// against its event by [`steps_of`] once the event is read).
    pub fn parse(s: &str) -> Option<Cursor> {
        let parts: Vec<u64> = s
            .trim()
            .split('.')
            .map(crate::event_id::sent_number)
            .collect::<Option<_>>()?;
        let [seq, step, text, reasoning] = parts[..] else {
            return None;
        };
        let cursor = Cursor {
            seq,
            step: u8::try_from(step).ok()?,
            text,
            reasoning,
        };
        (cursor.seq > 0 && cursor.step > 0).then_some(cursor)
    }
}

/// How many AG-UI events (steps) tether sends for a stored event of `kind`
/// (the table in `events.rs`): an id's `STEP` is at most this. A
/// `session.closed` ends a run that never came with the last step of a
/// `message.complete`; no other kind of event is the `SEQ` of an id.
pub fn steps_of(kind: EventType) -> u8 {
    match kind {
        EventType::MessageUser => 2,
        EventType::ToolStart => 3,
        EventType::ToolComplete | EventType::TodoUpdated => 1,
        EventType::MessageComplete | EventType::SessionClosed => 6,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_anything_else() {
        let c = Cursor {
            seq: 41,
            step: 2,
            text: 1200,
            reasoning: 0,
        };
        assert_eq!(c.to_string(), "41.2.1200.0");
        assert_eq!(Cursor::parse("41.2.1200.0"), Some(c));
        assert_eq!(Cursor::parse(" 41.2.1200.0 "), Some(c));
        for bad in [
            "",
            "41",
            "41.2.1200",
            "41.2.1200.0.1",
            "0.1.0.0",
            "4.0.0.0",
            "4.300.0.0",
            "a.1.0.0",
            "-1.1.0.0",
            "+3.1.0.0",
            "3.+1.0.0",
            "03.1.0.0",
            "3.1.00.0",
        ] {
            assert_eq!(Cursor::parse(bad), None, "{bad}");
        }
    }
}
