//! A tether event as the front-end views read it: the `params` of an event
//! frame, with the fields every mapping looks at pulled out.

use serde_json::Value;
use tether_protocol::EventType;

/// One event (PROTOCOL 1.2, 1.5).
#[derive(Debug, Clone, PartialEq)]
pub struct TetherEvent {
    pub kind: EventType,
    /// Durable events only.
    pub seq: Option<u64>,
    pub turn_id: Option<String>,
    pub trace_id: Option<String>,
    pub payload: Value,
}

impl TetherEvent {
    /// From an event's `params` object; `None` for anything else (an
    /// event type this build does not know included).
    pub fn from_params(params: &Value) -> Option<TetherEvent> {
        let kind = EventType::parse(params.get("type")?.as_str()?)?;
        let text = |name: &str| params.get(name).and_then(Value::as_str).map(str::to_string);
        Some(TetherEvent {
            kind,
            seq: params.get("seq").and_then(Value::as_u64),
            turn_id: text("turn_id"),
            trace_id: text("trace_id"),
            payload: params.get("payload").cloned().unwrap_or(Value::Null),
        })
    }

    /// Whether the event belongs to turn `turn_id`.
    pub fn of_turn(&self, turn_id: &str) -> bool {
        self.turn_id.as_deref() == Some(turn_id)
    }

    /// A string field of the payload (`""` when absent).
    pub fn text(&self, name: &str) -> &str {
        self.payload.get(name).and_then(Value::as_str).unwrap_or("")
    }

    /// A string field of the payload, if present.
    pub fn opt_text(&self, name: &str) -> Option<&str> {
        self.payload.get(name).and_then(Value::as_str)
    }

    /// A delta's `offset`.
    pub fn offset(&self) -> u64 {
        self.payload
            .get("offset")
            .and_then(Value::as_u64)
            .unwrap_or(0)
    }
}

/// Builds an event for tests.
#[cfg(test)]
pub fn ev(kind: &str, seq: Option<u64>, turn: Option<&str>, payload: Value) -> TetherEvent {
    TetherEvent {
        kind: EventType::parse(kind).expect("a known event type"),
        seq,
        turn_id: turn.map(str::to_string),
        trace_id: turn.map(|_| "0123456789ab".to_string()),
        payload,
    }
}
