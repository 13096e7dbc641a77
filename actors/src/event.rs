//! One event as a session emits it, and its three encodings: the store row,
//! the `params` object (for replays), and the shared notification frame;
//! plus what an outbox needs to merge deltas ([`DeltaMeta`]).
//!
//! Live frames and replayed events must be byte-identical, so both are made
//! by [`params_of`] from the same fields (the timestamp is kept in
//! milliseconds and formatted the same way each time).

use std::sync::Arc;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use tether_protocol::{
    encode_event_frame, encode_event_params, format_ts, to_raw, DeltaPayload, EventParams,
    EventType, SessionId, TraceId, TurnId,
};
use tether_store::EventRow;

/// The turn an event belongs to, if any. Also the shape of a turn in the
/// persisted turn marker (`{"turn_id":…,"trace_id":…}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnTag {
    pub turn_id: TurnId,
    pub trace_id: TraceId,
}

/// An event emitted by a session, before or after it got its `seq`.
#[derive(Debug, Clone)]
pub struct EventRecord {
    pub seq: Option<u64>,
    pub kind: EventType,
    pub turn: Option<TurnTag>,
    pub ts_ms: i64,
    pub payload: Box<RawValue>,
}

impl EventRecord {
    pub fn new<P: Serialize>(
        kind: EventType,
        payload: &P,
        turn: Option<TurnTag>,
        ts_ms: i64,
    ) -> Self {
        Self {
            seq: None,
            kind,
            turn,
            ts_ms,
            payload: to_raw(payload),
        }
    }

    /// The store's form of a durable event.
    pub fn to_row(&self) -> EventRow {
        EventRow {
            seq: self.seq.unwrap_or(0),
            kind: self.kind.as_str().to_string(),
            payload: self.payload.get().to_string(),
            turn_id: self.turn.as_ref().map(|t| t.turn_id.as_str().to_string()),
            trace_id: self.turn.as_ref().map(|t| t.trace_id.as_str().to_string()),
            ts_ms: self.ts_ms,
        }
    }

    /// Rebuilds a record from a stored row; `None` if the row is not a
    /// well-formed event (a corrupt store), which callers report as 5072.
    pub fn from_row(row: &EventRow) -> Option<Self> {
        let kind = EventType::parse(&row.kind)?;
        let payload = RawValue::from_string(row.payload.clone()).ok()?;
        let turn = match (&row.turn_id, &row.trace_id) {
            (Some(t), Some(tr)) => Some(TurnTag {
                turn_id: TurnId::from(t.as_str()),
                trace_id: TraceId::from(tr.as_str()),
            }),
            _ => None,
        };
        Some(Self {
            seq: Some(row.seq),
            kind,
            turn,
            ts_ms: row.ts_ms,
            payload,
        })
    }

    /// The `params` object of this event's notification frame.
    pub fn params_of(&self, session_id: &SessionId) -> Arc<RawValue> {
        let ts = format_ts(self.ts_ms);
        let params = EventParams {
            kind: self.kind,
            session_id: Some(session_id),
            seq: self.seq,
            turn_id: self.turn.as_ref().map(|t| &t.turn_id),
            trace_id: self.turn.as_ref().map(|t| &t.trace_id),
            ts: &ts,
            payload: &self.payload,
        };
        Arc::from(encode_event_params(&params))
    }

    /// The merge metadata of a `message.delta` / `reasoning.delta` that
    /// belongs to a turn; `None` for any other event.
    pub fn delta_meta(&self, session_id: &SessionId) -> Option<DeltaMeta> {
        if !is_delta(self.kind) {
            return None;
        }
        let turn = self.turn.as_ref()?;
        let payload: DeltaPayload = serde_json::from_str(self.payload.get()).ok()?;
        Some(DeltaMeta {
            kind: self.kind,
            session_id: session_id.clone(),
            turn_id: turn.turn_id.clone(),
            trace_id: turn.trace_id.clone(),
            ts: format_ts(self.ts_ms),
            offset: payload.offset,
            text: payload.text,
        })
    }
}

fn is_delta(kind: EventType) -> bool {
    matches!(kind, EventType::MessageDelta | EventType::ReasoningDelta)
}

/// A delta frame's fields, carried next to the frame so that an outbox
/// under pressure can join consecutive deltas of one turn without parsing
/// the frames it queued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeltaMeta {
    pub kind: EventType,
    pub session_id: SessionId,
    pub turn_id: TurnId,
    pub trace_id: TraceId,
    /// Already formatted: a merged frame keeps its first delta's `ts`.
    pub ts: String,
    pub offset: u64,
    pub text: String,
}

impl DeltaMeta {
    /// Whether `next` is the delta that comes right after this one once it
    /// carries `len` bytes of text: same stream of the same turn, and an
    /// offset that leaves neither a gap nor an overlap.
    pub fn continued_by(&self, next: &DeltaMeta, len: u64) -> bool {
        self.kind == next.kind
            && self.turn_id == next.turn_id
            && self.session_id == next.session_id
            && self.offset.checked_add(len) == Some(next.offset)
    }

    /// This delta's notification frame with `text` in place of its own
    /// text, encoded exactly as a live event frame is.
    pub fn frame_with_text(&self, text: &str) -> Bytes {
        // Same fields and order as `DeltaPayload`, borrowing the text.
        #[derive(Serialize)]
        struct Payload<'a> {
            text: &'a str,
            offset: u64,
        }
        let payload = to_raw(&Payload {
            text,
            offset: self.offset,
        });
        let params = encode_event_params(&EventParams {
            kind: self.kind,
            session_id: Some(&self.session_id),
            seq: None,
            turn_id: Some(&self.turn_id),
            trace_id: Some(&self.trace_id),
            ts: &self.ts,
            payload: &payload,
        });
        frame_of(&params)
    }
}

/// The complete `{"jsonrpc":"2.0","method":"event","params":…}` frame.
pub fn frame_of(params: &RawValue) -> Bytes {
    Bytes::from(encode_event_frame(params))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delta(text: &str, offset: u64) -> EventRecord {
        EventRecord::new(
            EventType::MessageDelta,
            &DeltaPayload {
                text: text.into(),
                offset,
            },
            Some(TurnTag {
                turn_id: TurnId::from("t_1"),
                trace_id: TraceId::from("abc"),
            }),
            1_764_470_000_123,
        )
    }

    #[test]
    fn a_delta_frame_re_encoded_from_its_meta_is_byte_identical() {
        let sid = SessionId::from("s_1");
        let rec = delta("h\u{e9} \"x\"\n", 4);
        let frame = frame_of(&rec.params_of(&sid));
        let meta = rec.delta_meta(&sid).expect("a delta");
        assert_eq!(meta.frame_with_text(&meta.text), frame);
    }

    #[test]
    fn only_deltas_of_a_turn_have_meta() {
        let sid = SessionId::from("s_1");
        let mut rec = delta("a", 0);
        rec.turn = None;
        assert_eq!(rec.delta_meta(&sid), None);
        let user = EventRecord::new(
            EventType::MessageUser,
            &tether_protocol::TextPayload { text: "a".into() },
            None,
            0,
        );
        assert_eq!(user.delta_meta(&sid), None);
    }

    #[test]
    fn continuation_needs_same_stream_and_adjacent_offset() {
        let sid = SessionId::from("s_1");
        let a = delta("abc", 10).delta_meta(&sid).expect("a delta");
        let next = delta("d", 13).delta_meta(&sid).expect("a delta");
        assert!(a.continued_by(&next, 3));
        assert!(!a.continued_by(&next, 2));
        let mut other_turn = next.clone();
        other_turn.turn_id = TurnId::from("t_2");
        assert!(!a.continued_by(&other_turn, 3));
        let mut reasoning = next.clone();
        reasoning.kind = EventType::ReasoningDelta;
        assert!(!a.continued_by(&reasoning, 3));
    }
}
