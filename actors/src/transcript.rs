//! The transcript is derived from durable events, never kept beside them.
//!
//! A `Message` comes from `message.user` (user), `message.system` (system),
//! `message.complete` (assistant), `tool.complete` (tool, the result as JSON
//! text) and `session.compacted` (system: the summary that opens a new
//! history segment): the types of [`EventType::is_transcript`]. Deriving it
//! keeps one source of truth: what a client replays and what a resume shows
//! can never disagree.

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;
use tether_protocol::{format_ts, CompleteStatus, EventType, Message, MessageRole, TurnId};
use tether_store::EventRow;
use tracing::warn;

/// The message count of a segment after an event of `kind` is appended.
pub fn count_after(kind: EventType, count: u64) -> u64 {
    match kind {
        // A compaction starts a new segment whose first message is its summary.
        EventType::SessionCompacted => 1,
        k if k.is_transcript() => count + 1,
        _ => count,
    }
}

/// The `error` event of a turn, whose message its `message.complete`'s
/// transcript entry carries (the `error` event comes just before it:
/// PROTOCOL Part 4, "A failed turn").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnError {
    turn_id: String,
    message: String,
}

impl TurnError {
    /// The turn error `row` is, if it is one.
    pub fn of(row: &EventRow) -> Option<TurnError> {
        if row.kind != EventType::Error.as_str() {
            return None;
        }
        let turn_id = row.turn_id.clone()?;
        let payload: Value = serde_json::from_str(&row.payload).ok()?;
        let message = payload.get("message")?.as_str()?.to_string();
        Some(TurnError { turn_id, message })
    }
}

/// The turn a `message.user` replaces (`prompt.submit`'s `replaces`): its
/// messages and every later one leave the history before this one joins.
pub fn replaced_turn(row: &EventRow) -> Option<TurnId> {
    if row.kind != EventType::MessageUser.as_str() || !row.payload.contains("\"replaces\"") {
        return None;
    }
    let payload: Value = serde_json::from_str(&row.payload).ok()?;
    payload.get("replaces")?.as_str().map(TurnId::from)
}

/// Converts stored events (already restricted to the current segment) into
/// transcript messages. Events that are not messages are skipped.
pub fn messages_from_rows(rows: &[EventRow]) -> Vec<Message> {
    let mut turn_error = None;
    let mut messages: Vec<Message> = Vec::new();
    for row in rows {
        if let Some(e) = TurnError::of(row) {
            turn_error = Some(e);
            continue;
        }
        if let Some(turn) = replaced_turn(row) {
            if let Some(i) = messages
                .iter()
                .position(|m| m.turn_id.as_ref() == Some(&turn))
            {
                messages.truncate(i);
            }
        }
        if let Some(m) = message_from_row(row, turn_error.as_ref()) {
            messages.push(m);
        }
        if EventType::parse(&row.kind).is_some_and(|k| k.is_transcript()) {
            turn_error = None;
        }
    }
    messages
}

/// The fields a transcript message is made of, read without building the
/// payload: a payload nested deeper than a parser's recursion limit (a tool
/// result) still gives its message, and the fields that are not read are
/// only skipped.
#[derive(Deserialize)]
struct Fields<'a> {
    #[serde(borrow, default)]
    text: Option<&'a RawValue>,
    #[serde(borrow, default)]
    summary: Option<&'a RawValue>,
    #[serde(borrow, default)]
    result: Option<&'a RawValue>,
    #[serde(borrow, default)]
    status: Option<&'a RawValue>,
    #[serde(borrow, default)]
    failure_reason: Option<&'a RawValue>,
}

/// A string field's value; `None` when absent or not a string.
fn string(raw: Option<&RawValue>) -> Option<String> {
    raw.and_then(|r| serde_json::from_str::<String>(r.get()).ok())
}

/// A tool result as the transcript shows it: the JSON encoded again
/// compactly, or, for a result no tree can be built of (nested too
/// deeply), the text as stored.
fn result_text(raw: Option<&RawValue>) -> String {
    match raw {
        None => "null".into(),
        Some(r) => serde_json::from_str::<Value>(r.get())
            .map(|v| v.to_string())
            .unwrap_or_else(|_| r.get().to_string()),
    }
}

/// One stored event as a transcript message, if it is one; `turn_error` is
/// the error event seen last, which a failed turn's message carries when
/// it is that turn's.
///
/// Every event of a transcript type gives a message, whatever its payload:
/// the segment's message count is kept by event type, and a message that
/// silently went missing would leave it (and the history hosts are sent)
/// wrong. A payload that cannot be read at all shows as its stored text.
pub fn message_from_row(row: &EventRow, turn_error: Option<&TurnError>) -> Option<Message> {
    let kind = EventType::parse(&row.kind).filter(|k| k.is_transcript())?;
    let fields = match serde_json::from_str::<Fields>(&row.payload) {
        Ok(fields) => fields,
        Err(e) => {
            warn!(seq = row.seq, kind = %row.kind, error = %e,
                  "a transcript event's payload cannot be read; shown as stored");
            return Some(Message {
                seq: row.seq,
                role: role_of(kind),
                text: row.payload.clone(),
                turn_id: row.turn_id.as_deref().map(TurnId::from),
                ts: format_ts(row.ts_ms),
                status: None,
                failure_reason: None,
                error: None,
            });
        }
    };
    let text = match kind {
        EventType::SessionCompacted => string(fields.summary),
        EventType::ToolComplete => Some(result_text(fields.result)),
        _ => string(fields.text),
    }
    .unwrap_or_default();
    // A turn that did not complete keeps how it ended, so that a
    // transcript read later still tells a cut-short reply from a whole one.
    let status = match kind {
        EventType::MessageComplete => string(fields.status)
            .as_deref()
            .and_then(CompleteStatus::parse)
            .filter(|s| *s != CompleteStatus::Complete),
        _ => None,
    };
    let failure_reason = match status {
        Some(_) => string(fields.failure_reason),
        None => None,
    };
    let error = match (status, turn_error) {
        (Some(_), Some(e)) if row.turn_id.as_deref() == Some(e.turn_id.as_str()) => {
            Some(e.message.clone())
        }
        _ => None,
    };
    Some(Message {
        seq: row.seq,
        role: role_of(kind),
        text,
        turn_id: row.turn_id.as_deref().map(TurnId::from),
        ts: format_ts(row.ts_ms),
        status,
        failure_reason,
        error,
    })
}

/// The role of a transcript event's message.
fn role_of(kind: EventType) -> MessageRole {
    match kind {
        EventType::MessageUser => MessageRole::User,
        EventType::MessageComplete => MessageRole::Assistant,
        EventType::ToolComplete => MessageRole::Tool,
        _ => MessageRole::System,
    }
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

    fn turn_row(seq: u64, kind: &str, payload: &str, turn: &str) -> EventRow {
        EventRow {
            turn_id: Some(turn.into()),
            ..row(seq, kind, payload)
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
    fn an_assistant_message_keeps_how_its_turn_ended_unless_it_completed() {
        let rows = vec![
            row(
                1,
                "message.complete",
                r#"{"text":"whole","status":"complete"}"#,
            ),
            row(
                2,
                "message.complete",
                r#"{"text":"cut","status":"error","failure_reason":"host_crash","recoverable":true}"#,
            ),
            row(
                3,
                "message.complete",
                r#"{"text":"","status":"interrupted","failure_reason":"dequeued"}"#,
            ),
            row(
                4,
                "message.complete",
                r#"{"text":"st","status":"interrupted"}"#,
            ),
            turn_row(5, "error", r#"{"message":"boom"}"#, "t_5"),
            turn_row(
                6,
                "message.complete",
                r#"{"text":"","status":"error","failure_reason":"engine_error"}"#,
                "t_5",
            ),
        ];
        let got: Vec<_> = messages_from_rows(&rows)
            .into_iter()
            .map(|m| (m.status, m.failure_reason, m.error))
            .collect();
        let reason = |r: &str| Some(r.to_string());
        assert_eq!(
            got,
            vec![
                (None, None, None),
                (Some(CompleteStatus::Error), reason("host_crash"), None),
                (Some(CompleteStatus::Interrupted), reason("dequeued"), None),
                (Some(CompleteStatus::Interrupted), None, None),
                (
                    Some(CompleteStatus::Error),
                    reason("engine_error"),
                    reason("boom")
                ),
            ]
        );
    }

    /// A stored payload no tree can be built of (a tool result nested
    /// past serde_json's recursion limit, stored before host lines were
    /// bounded), or one that is not JSON at all, still gives its message.
    #[test]
    fn every_transcript_event_gives_a_message_whatever_its_payload() {
        let deep = format!("{}1{}", "[".repeat(200), "]".repeat(200));
        let tool = format!(r#"{{"tool_id":"1","name":"x","result":{deep},"is_error":false}}"#);
        let rows = vec![
            row(1, "message.user", r#"{"text":"hi"}"#),
            row(2, "tool.start", &tool),
            row(3, "tool.complete", &tool),
            row(4, "message.complete", "not json"),
            row(5, "message.user", r#"{"text":5}"#),
        ];
        let got: Vec<_> = messages_from_rows(&rows)
            .into_iter()
            .map(|m| (m.seq, m.role, m.text))
            .collect();
        assert_eq!(
            got,
            vec![
                (1, MessageRole::User, "hi".to_string()),
                (3, MessageRole::Tool, deep),
                (4, MessageRole::Assistant, "not json".to_string()),
                (5, MessageRole::User, String::new()),
            ]
        );
    }

    #[test]
    fn a_replacing_prompt_drops_the_turn_it_replaces_and_what_followed() {
        let rows = vec![
            turn_row(2, "message.user", r#"{"text":"q1"}"#, "t_1"),
            turn_row(
                3,
                "message.complete",
                r#"{"text":"a1","status":"complete"}"#,
                "t_1",
            ),
            turn_row(4, "message.user", r#"{"text":"q2"}"#, "t_2"),
            turn_row(
                5,
                "tool.complete",
                r#"{"tool_id":"1","name":"x","result":1,"is_error":false}"#,
                "t_2",
            ),
            turn_row(
                6,
                "message.complete",
                r#"{"text":"a2","status":"complete"}"#,
                "t_2",
            ),
            turn_row(
                7,
                "message.user",
                r#"{"text":"q2","replaces":"t_2"}"#,
                "t_3",
            ),
            turn_row(
                8,
                "message.complete",
                r#"{"text":"a2'","status":"complete"}"#,
                "t_3",
            ),
            // A turn not in the segment replaces nothing.
            turn_row(
                9,
                "message.user",
                r#"{"text":"q4","replaces":"t_0"}"#,
                "t_4",
            ),
        ];
        let got: Vec<u64> = messages_from_rows(&rows).iter().map(|m| m.seq).collect();
        assert_eq!(got, vec![2, 3, 7, 8, 9]);
        assert_eq!(replaced_turn(&rows[5]), Some(TurnId::from("t_2")));
        assert_eq!(replaced_turn(&rows[0]), None);
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
