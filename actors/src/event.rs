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
    encode_event_frame, encode_event_params, format_ts, to_raw, EventParams, EventType, SessionId,
    TraceId, TurnId,
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

    /// The form an event takes inside a forwarded `session.emit` (a
    /// follower hands an event emitted from outside, a handoff's
    /// announcement, to the owner): the row's fields, without a seq, which
    /// only the owner assigns.
    pub fn to_forward(&self) -> serde_json::Value {
        let row = self.to_row();
        serde_json::json!({
            "type": row.kind,
            // Text, so that it comes back byte for byte.
            "payload": row.payload,
            "turn_id": row.turn_id,
            "trace_id": row.trace_id,
            "ts_ms": row.ts_ms,
        })
    }

    /// The inverse of [`Self::to_forward`]; `None` for anything else.
    pub fn from_forward(v: &serde_json::Value) -> Option<Self> {
        let text = |k: &str| {
            v.get(k)
                .and_then(serde_json::Value::as_str)
                .map(str::to_owned)
        };
        let row = EventRow {
            seq: 0,
            kind: text("type")?,
            payload: text("payload")?,
            turn_id: text("turn_id"),
            trace_id: text("trace_id"),
            ts_ms: v.get("ts_ms")?.as_i64()?,
        };
        let mut rec = Self::from_row(&row)?;
        rec.seq = None;
        Some(rec)
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
    /// belongs to a turn, given the frame it was encoded into; `None` for
    /// any other event (or a frame not laid out as [`frame_of`] makes it).
    pub fn delta_meta(&self, session_id: &SessionId, frame: &Bytes) -> Option<DeltaMeta> {
        if !is_delta(self.kind) {
            return None;
        }
        let turn = self.turn.as_ref()?;
        // Borrowed: the text is only measured, never kept.
        #[derive(Deserialize)]
        struct Text<'a> {
            #[serde(borrow)]
            text: std::borrow::Cow<'a, str>,
            offset: u64,
        }
        let payload: Text = serde_json::from_str(self.payload.get()).ok()?;
        let escaped = escaped_text_in(frame, payload.offset)?;
        Some(DeltaMeta {
            kind: self.kind,
            session_id: session_id.clone(),
            turn_id: turn.turn_id.clone(),
            offset: payload.offset,
            text_len: payload.text.len() as u64,
            escaped,
        })
    }
}

/// Where the JSON-escaped text of a delta sits in its frame. The frame is
/// `{…,"payload":{"text":"ESCAPED","offset":N}}}`: `payload` is the last
/// field of the params (see `EventParams`), so the text ends right before
/// the fixed suffix, and it starts after the first `"payload":{"text":"`
/// (no field before it can hold that with an unescaped quote).
fn escaped_text_in(frame: &[u8], offset: u64) -> Option<std::ops::Range<usize>> {
    const HEAD: &[u8] = br#""payload":{"text":""#;
    let suffix = format!(r#"","offset":{offset}}}}}}}"#);
    if !frame.ends_with(suffix.as_bytes()) {
        return None;
    }
    let start = frame.windows(HEAD.len()).position(|w| w == HEAD)? + HEAD.len();
    let end = frame.len() - suffix.len();
    (start <= end).then_some(start..end)
}

fn is_delta(kind: EventType) -> bool {
    matches!(kind, EventType::MessageDelta | EventType::ReasoningDelta)
}

/// A delta frame's fields, carried next to the frame so that an outbox
/// can join consecutive deltas of one turn without parsing the frames it
/// queued: a merged frame is the first frame with the escaped texts of the
/// ones after it spliced in, so it is never encoded again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeltaMeta {
    pub kind: EventType,
    pub session_id: SessionId,
    pub turn_id: TurnId,
    pub offset: u64,
    /// Bytes (UTF-8) of this delta's text: what the next offset follows.
    pub text_len: u64,
    /// The JSON-escaped text inside this delta's own frame.
    escaped: std::ops::Range<usize>,
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

    /// This delta's text as it is written in `frame` (its own frame).
    pub fn escaped_text<'f>(&self, frame: &'f [u8]) -> &'f [u8] {
        frame.get(self.escaped.clone()).unwrap_or_default()
    }

    /// `frame` (this delta's own) with `more`, escaped texts of the deltas
    /// that continue it, appended to its text: the frame of one delta that
    /// carries all of them, same ids, `ts` and offset, byte for byte what
    /// encoding it whole would give.
    pub fn spliced(&self, frame: &[u8], more: &[u8]) -> Bytes {
        let at = self.escaped.end.min(frame.len());
        let mut out = Vec::with_capacity(frame.len() + more.len());
        out.extend_from_slice(&frame[..at]);
        out.extend_from_slice(more);
        out.extend_from_slice(&frame[at..]);
        Bytes::from(out)
    }
}

/// The complete `{"jsonrpc":"2.0","method":"event","params":…}` frame.
pub fn frame_of(params: &RawValue) -> Bytes {
    Bytes::from(encode_event_frame(params))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tether_protocol::DeltaPayload;

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

    fn meta(rec: &EventRecord) -> Option<DeltaMeta> {
        let sid = SessionId::from("s_1");
        rec.delta_meta(&sid, &frame_of(&rec.params_of(&sid)))
    }

    #[test]
    fn a_spliced_delta_frame_is_byte_identical_to_one_encoded_whole() {
        let sid = SessionId::from("s_1");
        let first = delta("h\u{e9} \"x\"\n", 4);
        let frame = frame_of(&first.params_of(&sid));
        let m = first.delta_meta(&sid, &frame).expect("a delta");
        assert_eq!(m.escaped_text(&frame), "h\u{e9} \\\"x\\\"\\n".as_bytes());
        let next = delta("\t\\ end", 4 + m.text_len);
        let next_frame = frame_of(&next.params_of(&sid));
        let n = next.delta_meta(&sid, &next_frame).expect("a delta");
        assert!(m.continued_by(&n, m.text_len));
        let merged = m.spliced(&frame, n.escaped_text(&next_frame));
        let whole = delta("h\u{e9} \"x\"\n\t\\ end", 4);
        assert_eq!(merged, frame_of(&whole.params_of(&sid)));
    }

    #[test]
    fn only_deltas_of_a_turn_have_meta() {
        let mut rec = delta("a", 0);
        rec.turn = None;
        assert_eq!(meta(&rec), None);
        let user = EventRecord::new(
            EventType::MessageUser,
            &tether_protocol::TextPayload { text: "a".into() },
            None,
            0,
        );
        assert_eq!(meta(&user), None);
    }

    #[test]
    fn continuation_needs_same_stream_and_adjacent_offset() {
        let a = meta(&delta("abc", 10)).expect("a delta");
        let next = meta(&delta("d", 13)).expect("a delta");
        assert!(a.continued_by(&next, 3));
        assert!(!a.continued_by(&next, 2));
        let mut other_turn = next.clone();
        other_turn.turn_id = TurnId::from("t_2");
        assert!(!a.continued_by(&other_turn, 3));
        let mut reasoning = next.clone();
        reasoning.kind = EventType::ReasoningDelta;
        assert!(!a.continued_by(&reasoning, 3));
    }

    #[test]
    fn a_forwarded_event_comes_back_the_same_without_its_seq() {
        let mut rec = delta("a \"quoted\" text", 7);
        rec.seq = Some(9);
        let back = EventRecord::from_forward(&rec.to_forward()).expect("decodes");
        assert_eq!(back.seq, None);
        assert_eq!(back.kind, rec.kind);
        assert_eq!(back.turn, rec.turn);
        assert_eq!(back.ts_ms, rec.ts_ms);
        assert_eq!(back.payload.get(), rec.payload.get());
        let untagged = EventRecord::new(
            EventType::StatusUpdate,
            &serde_json::json!({"kind": "handoff", "text": "requested"}),
            None,
            5,
        );
        let back = EventRecord::from_forward(&untagged.to_forward()).expect("decodes");
        assert_eq!(back.turn, None);
        assert!(EventRecord::from_forward(&serde_json::json!({"type": "no.such"})).is_none());
    }
}
