//! A chat's transcript as AI SDK UI messages (`GET /v1/ai-sdk/chat/{id}/messages`):
//! a pure function of the stored events of the session's current history
//! segment, so a reload shows what the live stream showed, under the same
//! ids.
//!
//! - A user message is `{turn}-user` (its turn's id plus `-user`), or
//!   `msg-{seq}` when it was seeded; a system message (seeded, or a
//!   compaction's summary) is `msg-{seq}`.
//! - A turn's answer is one assistant message whose id is the turn id (the
//!   `messageId` of its stream's `start`), with a `step-start` part, a
//!   `dynamic-tool` part per tool call, the todo list as `data-todos`, and
//!   the text; its metadata says how the turn ended:
//!   `{"tether": {"turnId", "traceId", "status", "failureReason"?, "error"?}}`,
//!   `status` being `complete`, `error` or `interrupted` (a gateway killed
//!   mid-answer included: `error` with `failureReason` `gateway_restart`).
//! - The running turn's answer is not listed: `GET …/stream` gives it, under
//!   the same id.
//! - A prompt that replaced earlier turns (a regenerate or an edit) removes
//!   their messages, as it removed them from the history.

use serde_json::{json, Value};
use tether_protocol::EventType;

use crate::chat::event::TetherEvent;

/// One message being built, with the turn it belongs to.
struct Built {
    turn: Option<String>,
    /// An answer whose turn has not ended (left out at the end).
    open: bool,
    msg: Value,
}

/// The UI messages of these events (in seq order).
pub fn ui_messages(events: &[TetherEvent]) -> Vec<Value> {
    let mut out: Vec<Built> = Vec::new();
    for ev in events {
        let Some(seq) = ev.seq else { continue };
        match ev.kind {
            EventType::SessionCompacted => {
                out.clear();
                out.push(plain(
                    None,
                    "system",
                    format!("msg-{seq}"),
                    ev.text("summary"),
                ));
            }
            EventType::MessageSystem => {
                out.push(plain(None, "system", format!("msg-{seq}"), ev.text("text")))
            }
            EventType::MessageUser => {
                if let Some(replaced) = ev.opt_text("replaces") {
                    if let Some(i) = out.iter().position(|b| b.turn.as_deref() == Some(replaced)) {
                        out.truncate(i);
                    }
                }
                let id = match &ev.turn_id {
                    Some(t) => format!("{t}-user"),
                    None => format!("msg-{seq}"),
                };
                out.push(plain(ev.turn_id.clone(), "user", id, ev.text("text")));
            }
            EventType::MessageStart => {
                if let Some(parts) = answer(&mut out, ev).and_then(Built::parts) {
                    parts.push(json!({"type": "step-start"}));
                }
            }
            EventType::ToolStart => {
                let part = tool_part(ev, ev.payload.get("args").cloned().unwrap_or(Value::Null));
                if let Some(parts) = answer(&mut out, ev).and_then(Built::parts) {
                    parts.push(part);
                }
            }
            EventType::ToolComplete => tool_complete(&mut out, ev),
            EventType::TodoUpdated => {
                if let Some(parts) = answer(&mut out, ev).and_then(Built::parts) {
                    parts.retain(|p| p["type"] != "data-todos");
                    parts.push(json!({"type": "data-todos", "id": "todos", "data": ev.payload}));
                }
            }
            EventType::Error => {
                if let Some(a) = answer(&mut out, ev) {
                    a.msg["metadata"]["tether"]["error"] = json!(ev.text("message"));
                }
            }
            EventType::MessageComplete => complete(&mut out, ev, seq),
            _ => {}
        }
    }
    out.into_iter().filter(|b| !b.open).map(|b| b.msg).collect()
}

fn plain(turn: Option<String>, role: &str, id: String, text: &str) -> Built {
    Built {
        turn,
        open: false,
        msg: json!({"id": id, "role": role, "parts": [{"type": "text", "text": text}]}),
    }
}

/// The answer of the event's turn, started if it is not there yet; `None`
/// for an event of no turn.
fn answer<'a>(out: &'a mut Vec<Built>, ev: &TetherEvent) -> Option<&'a mut Built> {
    let turn = ev.turn_id.as_deref()?;
    let i = match out
        .iter()
        .position(|b| b.turn.as_deref() == Some(turn) && b.msg["role"] == "assistant")
    {
        Some(i) => i,
        None => {
            let mut tether = json!({"turnId": turn});
            if let Some(trace) = &ev.trace_id {
                tether["traceId"] = json!(trace);
            }
            out.push(Built {
                turn: Some(turn.to_string()),
                open: true,
                msg: json!({"id": turn, "role": "assistant", "parts": [], "metadata": {"tether": tether}}),
            });
            out.len() - 1
        }
    };
    out.get_mut(i)
}

impl Built {
    fn parts(&mut self) -> Option<&mut Vec<Value>> {
        self.msg["parts"].as_array_mut()
    }
}

fn tool_part(ev: &TetherEvent, input: Value) -> Value {
    json!({"type": "dynamic-tool", "toolName": ev.text("name"), "toolCallId": ev.text("tool_id"),
        "state": "input-available", "input": input, "providerExecuted": true})
}

fn tool_complete(out: &mut Vec<Built>, ev: &TetherEvent) {
    let Some(parts) = answer(out, ev).and_then(Built::parts) else {
        return;
    };
    let id = ev.text("tool_id");
    let i = match parts
        .iter()
        .position(|p| p["type"] == "dynamic-tool" && p["toolCallId"] == id)
    {
        Some(i) => i,
        None => {
            parts.push(tool_part(ev, Value::Null));
            parts.len() - 1
        }
    };
    let result = ev.payload.get("result").cloned().unwrap_or(Value::Null);
    let part = &mut parts[i];
    if ev.payload["is_error"] == true {
        part["state"] = json!("output-error");
        part["errorText"] = match result {
            Value::String(s) => json!(s),
            other => json!(other.to_string()),
        };
    } else {
        part["state"] = json!("output-available");
        part["output"] = result;
    }
}

fn complete(out: &mut Vec<Built>, ev: &TetherEvent, seq: u64) {
    let text = ev.text("text");
    if ev.turn_id.is_none() {
        // A seeded answer.
        out.push(plain(None, "assistant", format!("msg-{seq}"), text));
        return;
    }
    let Some(a) = answer(out, ev) else { return };
    a.open = false;
    if !text.is_empty() {
        if let Some(parts) = a.parts() {
            parts.push(json!({"type": "text", "text": text, "state": "done"}));
        }
    }
    let tether = &mut a.msg["metadata"]["tether"];
    tether["status"] = json!(ev.text("status"));
    if let Some(r) = ev.opt_text("failure_reason") {
        tether["failureReason"] = json!(r);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::event::ev;

    #[test]
    fn turns_become_user_and_assistant_messages() {
        let events = vec![
            ev("session.created", Some(1), None, json!({})),
            ev("message.system", Some(2), None, json!({"text": "be brief"})),
            ev("message.user", Some(3), None, json!({"text": "seeded q"})),
            ev(
                "message.complete",
                Some(4),
                None,
                json!({"text": "seeded a", "status": "complete"}),
            ),
            ev("message.user", Some(5), Some("t_1"), json!({"text": "q1"})),
            ev("message.start", Some(6), Some("t_1"), json!({})),
            ev(
                "tool.start",
                Some(7),
                Some("t_1"),
                json!({"tool_id": "k", "name": "ls", "args": {"a": 1}}),
            ),
            ev(
                "tool.complete",
                Some(8),
                Some("t_1"),
                json!({"tool_id": "k", "name": "ls", "result": [1], "is_error": false}),
            ),
            ev(
                "message.complete",
                Some(9),
                Some("t_1"),
                json!({"text": "a1", "status": "complete"}),
            ),
            ev("message.user", Some(10), Some("t_2"), json!({"text": "q2"})),
            ev("error", Some(11), Some("t_2"), json!({"message": "boom"})),
            ev(
                "message.complete",
                Some(12),
                Some("t_2"),
                json!({"text": "", "status": "error", "failure_reason": "engine_error"}),
            ),
            ev("message.user", Some(13), Some("t_3"), json!({"text": "q3"})),
            ev("message.start", Some(14), Some("t_3"), json!({})),
        ];
        let m = ui_messages(&events);
        let ids: Vec<&str> = m.iter().map(|m| m["id"].as_str().unwrap()).collect();
        assert_eq!(
            ids,
            vec!["msg-2", "msg-3", "msg-4", "t_1-user", "t_1", "t_2-user", "t_2", "t_3-user"]
        );
        let a1 = &m[4];
        assert_eq!(a1["role"], "assistant");
        assert_eq!(a1["parts"][0]["type"], "step-start");
        assert_eq!(a1["parts"][1]["state"], "output-available");
        assert_eq!(a1["parts"][1]["input"], json!({"a": 1}));
        assert_eq!(a1["parts"][1]["output"], json!([1]));
        assert_eq!(a1["parts"][2]["text"], "a1");
        assert_eq!(a1["metadata"]["tether"]["status"], "complete");
        let a2 = &m[6];
        assert_eq!(a2["parts"], json!([]));
        assert_eq!(a2["metadata"]["tether"]["status"], "error");
        assert_eq!(a2["metadata"]["tether"]["failureReason"], "engine_error");
        assert_eq!(a2["metadata"]["tether"]["error"], "boom");
    }

    #[test]
    fn a_replacing_prompt_removes_the_turns_it_replaced() {
        let events = vec![
            ev("message.user", Some(2), Some("t_1"), json!({"text": "q1"})),
            ev(
                "message.complete",
                Some(3),
                Some("t_1"),
                json!({"text": "a1", "status": "complete"}),
            ),
            ev("message.user", Some(4), Some("t_2"), json!({"text": "q2"})),
            ev(
                "message.complete",
                Some(5),
                Some("t_2"),
                json!({"text": "a2", "status": "complete"}),
            ),
            ev(
                "message.user",
                Some(6),
                Some("t_3"),
                json!({"text": "q2", "replaces": "t_2"}),
            ),
            ev(
                "message.complete",
                Some(7),
                Some("t_3"),
                json!({"text": "a2 again", "status": "complete"}),
            ),
        ];
        let ids: Vec<String> = ui_messages(&events)
            .iter()
            .map(|m| m["id"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(ids, vec!["t_1-user", "t_1", "t_3-user", "t_3"]);
    }

    #[test]
    fn a_compaction_starts_over_with_its_summary() {
        let events = vec![
            ev("message.user", Some(2), Some("t_1"), json!({"text": "q1"})),
            ev(
                "message.complete",
                Some(3),
                Some("t_1"),
                json!({"text": "a1", "status": "complete"}),
            ),
            ev(
                "session.compacted",
                Some(4),
                None,
                json!({"summary": "S", "history_version": 1, "removed": 2}),
            ),
        ];
        let m = ui_messages(&events);
        assert_eq!(m.len(), 1);
        assert_eq!(m[0]["role"], "system");
        assert_eq!(m[0]["parts"][0]["text"], "S");
    }
}
