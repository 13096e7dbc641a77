//! One event as a session emits it, and its three encodings: the store row,
//! the `params` object (for replays), and the shared notification frame.
//!
//! Live frames and replayed events must be byte-identical, so both are made
//! by [`params_of`] from the same fields (the timestamp is kept in
//! milliseconds and formatted the same way each time).

use std::sync::Arc;

use bytes::Bytes;
use serde::Serialize;
use serde_json::value::RawValue;
use tether_protocol::{
    encode_event_frame, encode_event_params, format_ts, to_raw, EventParams, EventType, SessionId,
    TraceId, TurnId,
};
use tether_store::EventRow;

/// The turn an event belongs to, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
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
}

/// The complete `{"jsonrpc":"2.0","method":"event","params":…}` frame.
pub fn frame_of(params: &RawValue) -> Bytes {
    Bytes::from(encode_event_frame(params))
}
