//! The transcript is derived from durable events, never kept beside them.
//!
//! A `Message` comes from `message.user` (user), `message.system` (system),
//! `message.complete` (assistant), `tool.complete` (tool, the result as JSON
//! text) and `session.compacted` (system: the summary that opens a new
//! history segment): the types of [`EventType::is_transcript`]. Deriving it
//! keeps one source of truth: what a client replays and what a resume shows
//! can never disagree.

use serde_json::Value;
use tether_protocol::{format_ts, EventType, Message, MessageRole, TurnId};
use tether_store::EventRow;

/// The message count of a segment after an event of `kind` is appended.
pub fn count_after(kind: EventType, count: u64) -> u64 {
    match kind {
        // A compaction starts a new segment whose first message is its summary.
        EventType::SessionCompacted => 1,
        k if k.is_transcript() => count + 1,
        _ => count,
    }
}

/// Converts stored events (already restricted to the current segment) into
/// transcript messages. Events that are not messages are skipped.
pub fn messages_from_rows(rows: &[EventRow]) -> Vec<Message> {
    rows.iter().filter_map(message_from_row).collect()
}

/// One stored event as a transcript message, if it is one.
pub fn message_from_row(row: &EventRow) -> Option<Message> {
    let kind = EventType::parse(&row.kind)?;
    let payload: Value = serde_json::from_str(&row.payload).ok()?;
    let text_field = |name: &str| {
        payload
            .get(name)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let (role, text) = match kind {
        EventType::MessageUser => (MessageRole::User, text_field("text")),
        EventType::MessageSystem => (MessageRole::System, text_field("text")),
        EventType::MessageComplete => (MessageRole::Assistant, text_field("text")),
        EventType::SessionCompacted => (MessageRole::System, text_field("summary")),
        EventType::ToolComplete => (
            MessageRole::Tool,
            payload
                .get("result")
                .map(Value::to_string)
                .unwrap_or_else(|| "null".into()),
        ),
        _ => return None,
    };
    Some(Message {
        seq: row.seq,
        role,
        text,
        turn_id: row.turn_id.as_deref().map(TurnId::from),
        ts: format_ts(row.ts_ms),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(seq: u64, kind: &str, payload: &str) -> EventRow {
        EventRow {
            seq,
            kind: kind.into(),
            payload: payload.into(),
            turn_id: None,
            trace_id: None,
            ts_ms: 0,
        }
    }

    #[test]
    fn derives_roles_and_texts() {
        let rows = vec![
            row(
                1,
                "session.created",
                r#"{"title":"t","profile":"default","parent_session_id":null}"#,
            ),
            row(2, "message.system", r#"{"text":"be brief"}"#),
            row(3, "message.user", r#"{"text":"hi"}"#),
            row(
                4,
                "tool.complete",
                r#"{"tool_id":"1","name":"ls","result":{"a":1},"is_error":false}"#,
            ),
            row(
                5,
                "message.complete",
                r#"{"text":"hello","status":"complete"}"#,
            ),
        ];
        let m = messages_from_rows(&rows);
        let got: Vec<_> = m.iter().map(|m| (m.seq, m.role, m.text.as_str())).collect();
        assert_eq!(
            got,
            vec![
                (2, MessageRole::System, "be brief"),
                (3, MessageRole::User, "hi"),
                (4, MessageRole::Tool, r#"{"a":1}"#),
                (5, MessageRole::Assistant, "hello"),
            ]
        );
    }

    #[test]
    fn a_compaction_resets_the_segment_count() {
        let mut n = 0;
        for k in [
            EventType::SessionCreated,
            EventType::MessageUser,
            EventType::MessageStart,
            EventType::MessageComplete,
        ] {
            n = count_after(k, n);
        }
        assert_eq!(n, 2);
        assert_eq!(count_after(EventType::SessionCompacted, n), 1);
    }
}
