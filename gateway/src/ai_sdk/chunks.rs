//! One tether turn as AI SDK UI message chunks: a pure mapping from the
//! turn's events (PROTOCOL 1.5) to the chunks of the `ai` package's UI
//! message stream (`uiMessageChunkSchema`). docs/PROTOCOL.md has the
//! table; in short:
//!
//! | tether | chunks |
//! |---|---|
//! | (the stream opens) | `start` with `messageId` = the turn id |
//! | `message.start` | `start-step` |
//! | `message.delta` | `text-start` (first), `text-delta` |
//! | `reasoning.delta` | `reasoning-start` (first), `reasoning-delta` |
//! | `tool.start` | `tool-input-available` (dynamic, provider-executed) |
//! | `tool.complete` | `tool-output-available`, or `tool-output-error` |
//! | `todo.updated` | `data-todos` (id `todos`: replaced in place) |
//! | `error` | kept for the turn's end |
//! | `message.complete` | rest of the text, `text-end`, `reasoning-end`, `finish-step`, then `finish` (complete), `message-metadata` + `error` (error) or `message-metadata` + `abort` (interrupted) |
//!
//! Every chunk of one turn is derived from that turn's events alone, so a
//! replay of the turn (a reconnect) yields the same message, under the same
//! id, as the live stream did.

use serde_json::{json, Value};
use tether_protocol::EventType;

use crate::chat::event::TetherEvent;
use crate::chat::text::SentText;

/// The chunks of one turn, as its events arrive.
#[derive(Debug)]
pub struct TurnChunks {
    turn_id: String,
    text: SentText,
    text_open: bool,
    reasoning: SentText,
    reasoning_open: bool,
    step_open: bool,
    /// Tool calls whose input was sent.
    tools: Vec<String>,
    /// The turn's `error` event, which its failed end reports.
    error: Option<String>,
    done: bool,
}

impl TurnChunks {
    pub fn new(turn_id: &str) -> TurnChunks {
        TurnChunks {
            turn_id: turn_id.to_string(),
            text: SentText::default(),
            text_open: false,
            reasoning: SentText::default(),
            reasoning_open: false,
            step_open: false,
            tools: Vec::new(),
            error: None,
            done: false,
        }
    }

    /// Whether the turn has ended (its last chunk was written).
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// The stream's first chunk: the message this turn is.
    pub fn start(&self, session_id: &str, trace_id: Option<&str>) -> Value {
        let mut tether = json!({"sessionId": session_id, "turnId": self.turn_id});
        if let Some(trace) = trace_id {
            tether["traceId"] = json!(trace);
        }
        json!({"type": "start", "messageId": self.turn_id, "messageMetadata": {"tether": tether}})
    }

    /// The turn's text so far, from a resume (`active_turn.text`).
    pub fn text_so_far(&mut self, text: &str, out: &mut Vec<Value>) {
        if let Some(new) = self.text.delta(0, text) {
            let new = new.to_string();
            self.text_delta(&new, out);
        }
    }

    /// The chunks of one event (nothing for another turn's).
    pub fn event(&mut self, ev: &TetherEvent, out: &mut Vec<Value>) {
        if self.done {
            return;
        }
        if ev.kind == EventType::SessionClosed {
            // A close ends its turns first, so this only ends a stream
            // whose turn never came.
            out.push(json!({"type": "abort", "reason": "session closed"}));
            self.done = true;
            return;
        }
        if !ev.of_turn(&self.turn_id) {
            return;
        }
        match ev.kind {
            EventType::MessageStart => self.open_step(out),
            EventType::MessageDelta => {
                if let Some(new) = self.text.delta(ev.offset(), ev.text("text")) {
                    let new = new.to_string();
                    self.text_delta(&new, out);
                }
            }
            EventType::ReasoningDelta => {
                if let Some(new) = self.reasoning.delta(ev.offset(), ev.text("text")) {
                    let new = new.to_string();
                    self.reasoning_delta(&new, out);
                }
            }
            EventType::ToolStart => self.tool_input(ev, out),
            EventType::ToolComplete => {
                self.open_step(out);
                let id = ev.text("tool_id").to_string();
                if !self.tools.contains(&id) {
                    // Its start was not seen (it cannot be, in a whole
                    // turn): the part must exist before its output.
                    self.tool_input(ev, out);
                }
                let result = ev.payload.get("result").cloned().unwrap_or(Value::Null);
                if ev.payload["is_error"] == true {
                    let text = match result {
                        Value::String(s) => s,
                        other => other.to_string(),
                    };
                    out.push(json!({"type": "tool-output-error", "toolCallId": id,
                        "errorText": text, "dynamic": true, "providerExecuted": true}));
                } else {
                    out.push(json!({"type": "tool-output-available", "toolCallId": id,
                        "output": result, "dynamic": true, "providerExecuted": true}));
                }
            }
            EventType::TodoUpdated => {
                out.push(json!({"type": "data-todos", "id": "todos", "data": ev.payload}))
            }
            EventType::Error => self.error = Some(ev.text("message").to_string()),
            EventType::MessageComplete => self.complete(ev, out),
            _ => {}
        }
    }

    fn open_step(&mut self, out: &mut Vec<Value>) {
        if !self.step_open {
            self.step_open = true;
            out.push(json!({"type": "start-step"}));
        }
    }

    fn text_id(&self) -> String {
        format!("{}-text", self.turn_id)
    }

    fn reasoning_id(&self) -> String {
        format!("{}-reasoning", self.turn_id)
    }

    fn text_delta(&mut self, delta: &str, out: &mut Vec<Value>) {
        self.open_step(out);
        if !self.text_open {
            self.text_open = true;
            out.push(json!({"type": "text-start", "id": self.text_id()}));
        }
        out.push(json!({"type": "text-delta", "id": self.text_id(), "delta": delta}));
    }

    fn reasoning_delta(&mut self, delta: &str, out: &mut Vec<Value>) {
        self.open_step(out);
        if !self.reasoning_open {
            self.reasoning_open = true;
            out.push(json!({"type": "reasoning-start", "id": self.reasoning_id()}));
        }
        out.push(json!({"type": "reasoning-delta", "id": self.reasoning_id(), "delta": delta}));
    }

    fn tool_input(&mut self, ev: &TetherEvent, out: &mut Vec<Value>) {
        self.open_step(out);
        let id = ev.text("tool_id").to_string();
        // A provider-executed, dynamic tool: tether ran it, and the client
        // need not declare it (nor run it in `onToolCall`).
        out.push(json!({"type": "tool-input-available", "toolCallId": id,
            "toolName": ev.text("name"), "input": ev.payload.get("args").cloned().unwrap_or(Value::Null),
            "dynamic": true, "providerExecuted": true}));
        self.tools.push(id);
    }

    fn complete(&mut self, ev: &TetherEvent, out: &mut Vec<Value>) {
        if let Some(rest) = self.text.rest(ev.text("text")) {
            let rest = rest.to_string();
            self.text_delta(&rest, out);
        }
        if self.text_open {
            out.push(json!({"type": "text-end", "id": self.text_id()}));
        }
        if self.reasoning_open {
            out.push(json!({"type": "reasoning-end", "id": self.reasoning_id()}));
        }
        if self.step_open {
            out.push(json!({"type": "finish-step"}));
        }
        let status = ev.text("status");
        let reason = ev.opt_text("failure_reason");
        let mut tether = json!({"status": status});
        if let Some(r) = reason {
            tether["failureReason"] = json!(r);
        }
        if let Some(e) = &self.error {
            tether["error"] = json!(e);
        }
        let metadata = json!({"tether": tether});
        match status {
            "complete" => out.push(
                json!({"type": "finish", "finishReason": "stop", "messageMetadata": metadata}),
            ),
            "interrupted" => {
                out.push(json!({"type": "message-metadata", "messageMetadata": metadata}));
                out.push(json!({"type": "abort", "reason": reason.unwrap_or("interrupted")}));
            }
            _ => {
                out.push(json!({"type": "message-metadata", "messageMetadata": metadata}));
                let text = match (&self.error, reason) {
                    (Some(e), _) => e.clone(),
                    (None, Some(r)) => format!("the turn failed: {r}"),
                    (None, None) => "the turn failed".to_string(),
                };
                out.push(json!({"type": "error", "errorText": text}));
            }
        }
        self.done = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::event::ev;

    fn run(t: &mut TurnChunks, events: &[TetherEvent]) -> Vec<Value> {
        let mut out = Vec::new();
        for e in events {
            t.event(e, &mut out);
        }
        out
    }

    fn types(chunks: &[Value]) -> Vec<&str> {
        chunks.iter().map(|c| c["type"].as_str().unwrap()).collect()
    }

    fn delta(text: &str, offset: u64) -> TetherEvent {
        ev(
            "message.delta",
            None,
            Some("t_1"),
            json!({"text": text, "offset": offset}),
        )
    }

    fn complete(text: &str, status: &str, reason: Option<&str>) -> TetherEvent {
        let mut p = json!({"text": text, "status": status});
        if let Some(r) = reason {
            p["failure_reason"] = json!(r);
        }
        ev("message.complete", Some(9), Some("t_1"), p)
    }

    #[test]
    fn a_whole_turn() {
        let mut t = TurnChunks::new("t_1");
        let start = t.start("s_x", Some("abc"));
        assert_eq!(start["messageId"], "t_1");
        assert_eq!(start["messageMetadata"]["tether"]["sessionId"], "s_x");
        let out = run(
            &mut t,
            &[
                ev("message.user", Some(2), Some("t_1"), json!({"text": "hi"})),
                ev("message.start", Some(3), Some("t_1"), json!({})),
                ev(
                    "tool.start",
                    Some(4),
                    Some("t_1"),
                    json!({"tool_id": "k", "name": "ls", "args": {"a": 1}}),
                ),
                ev(
                    "tool.complete",
                    Some(5),
                    Some("t_1"),
                    json!({"tool_id": "k", "name": "ls", "result": {"a": 1}, "is_error": false}),
                ),
                ev(
                    "todo.updated",
                    Some(6),
                    Some("t_1"),
                    json!({"items": [], "revision": 1}),
                ),
                delta("hel", 0),
                ev(
                    "message.delta",
                    None,
                    Some("t_2"),
                    json!({"text": "other", "offset": 0}),
                ),
                delta("lo", 3),
                complete("hello", "complete", None),
                delta("late", 5),
            ],
        );
        assert_eq!(
            types(&out),
            vec![
                "start-step",
                "tool-input-available",
                "tool-output-available",
                "data-todos",
                "text-start",
                "text-delta",
                "text-delta",
                "text-end",
                "finish-step",
                "finish"
            ]
        );
        let text: String = out
            .iter()
            .filter(|c| c["type"] == "text-delta")
            .map(|c| c["delta"].as_str().unwrap())
            .collect();
        assert_eq!(text, "hello");
        assert_eq!(out[1]["input"], json!({"a": 1}));
        assert_eq!(out[1]["providerExecuted"], true);
        assert_eq!(out[9]["finishReason"], "stop");
        assert!(t.is_done());
    }

    #[test]
    fn a_replay_from_the_text_so_far_sends_each_byte_once() {
        let mut t = TurnChunks::new("t_1");
        let mut out = Vec::new();
        t.text_so_far("hello wo", &mut out);
        out.extend(run(
            &mut t,
            &[
                delta("wo", 6),
                delta("world", 6),
                complete("hello world!", "complete", None),
            ],
        ));
        let text: String = out
            .iter()
            .filter(|c| c["type"] == "text-delta")
            .map(|c| c["delta"].as_str().unwrap())
            .collect();
        assert_eq!(text, "hello world!");
        assert_eq!(out.iter().filter(|c| c["type"] == "text-start").count(), 1);
    }

    #[test]
    fn a_failed_turn_ends_with_its_error() {
        let mut t = TurnChunks::new("t_1");
        let out = run(
            &mut t,
            &[
                ev("message.start", Some(3), Some("t_1"), json!({})),
                ev("error", Some(4), Some("t_1"), json!({"message": "boom"})),
                complete("", "error", Some("engine_error")),
            ],
        );
        assert_eq!(
            types(&out),
            vec!["start-step", "finish-step", "message-metadata", "error"]
        );
        assert_eq!(out[3]["errorText"], "boom");
        assert_eq!(
            out[2]["messageMetadata"]["tether"]["failureReason"],
            "engine_error"
        );
        let mut t = TurnChunks::new("t_1");
        let out = run(&mut t, &[complete("", "error", Some("host_crash"))]);
        assert_eq!(
            out.last().unwrap()["errorText"],
            "the turn failed: host_crash"
        );
    }

    #[test]
    fn an_interrupted_turn_ends_with_abort_after_its_text() {
        let mut t = TurnChunks::new("t_1");
        let out = run(
            &mut t,
            &[
                delta("par", 0),
                delta("x", 9),
                complete("partial", "interrupted", None),
            ],
        );
        assert_eq!(
            types(&out),
            vec![
                "start-step",
                "text-start",
                "text-delta",
                "text-delta",
                "text-end",
                "finish-step",
                "message-metadata",
                "abort"
            ]
        );
        assert_eq!(out[3]["delta"], "tial", "the hole is filled from the end");
        assert_eq!(out[7]["reason"], "interrupted");
    }

    #[test]
    fn reasoning_and_a_tool_error() {
        let mut t = TurnChunks::new("t_1");
        let out = run(
            &mut t,
            &[
                ev(
                    "reasoning.delta",
                    None,
                    Some("t_1"),
                    json!({"text": "hm", "offset": 0}),
                ),
                ev(
                    "tool.complete",
                    Some(5),
                    Some("t_1"),
                    json!({"tool_id": "k", "name": "ls", "result": "no such file", "is_error": true}),
                ),
                complete("", "complete", None),
            ],
        );
        assert_eq!(
            types(&out),
            vec![
                "start-step",
                "reasoning-start",
                "reasoning-delta",
                "tool-input-available",
                "tool-output-error",
                "reasoning-end",
                "finish-step",
                "finish"
            ]
        );
        assert_eq!(out[4]["errorText"], "no such file");
    }
}
