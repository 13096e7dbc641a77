//! One tether turn as an AG-UI run: a pure mapping from the turn's events
//! (PROTOCOL 1.5) to AG-UI 1.x events that `@ag-ui/client`'s verifier
//! accepts, each with the id (`cursor.rs`) a client resumes from.
//! docs/PROTOCOL.md has the table. Each stored event maps to a fixed list
//! of steps, so that a replay knows which of them a client already has:
//!
//! | tether | steps |
//! |---|---|
//! | `message.user` | 0 `RUN_STARTED` (runId = the turn id), 1 `STATE_SNAPSHOT` (the todos, if any) |
//! | `tool.start` | 0 `TOOL_CALL_START`, 1 `TOOL_CALL_ARGS` (the args as JSON), 2 `TOOL_CALL_END` |
//! | `tool.complete` | 0 `TOOL_CALL_RESULT` |
//! | `todo.updated` | 0 `STATE_SNAPSHOT` `{"todos": {items, revision}}` |
//! | `message.complete` | 0 `TEXT_MESSAGE_START`, 1 `TEXT_MESSAGE_CONTENT` (text the deltas did not bring), 2 `TEXT_MESSAGE_END`, 3 `REASONING_MESSAGE_END`, 4 `REASONING_END`, 5 `RUN_FINISHED` (`outcome` `cancelled` when interrupted) or `RUN_ERROR` |
//!
//! and the deltas, which have no seq: `message.delta` is
//! `TEXT_MESSAGE_START` (first) and `TEXT_MESSAGE_CONTENT`,
//! `reasoning.delta` is `REASONING_START` and `REASONING_MESSAGE_START`
//! (first) and `REASONING_MESSAGE_CONTENT`.

use serde_json::{json, Value};
use tether_protocol::EventType;

use super::cursor::Cursor;
use crate::chat::event::TetherEvent;
use crate::chat::text::SentText;

/// Events to send, each with its id.
pub type Sent = Vec<(Cursor, Value)>;

/// The steps of `message.complete`.
mod complete {
    pub const TEXT_START: u8 = 0;
    pub const TEXT_CONTENT: u8 = 1;
    pub const TEXT_END: u8 = 2;
    pub const REASONING_MESSAGE_END: u8 = 3;
    pub const REASONING_END: u8 = 4;
    pub const RUN_END: u8 = 5;
}

/// One run, as its turn's events arrive.
#[derive(Debug)]
pub struct RunEvents {
    thread_id: String,
    turn_id: String,
    cursor: Cursor,
    text: SentText,
    text_open: bool,
    reasoning: SentText,
    reasoning_message_open: bool,
    reasoning_span_open: bool,
    /// The turn's `error` event, which its failed end reports.
    error: Option<String>,
    /// The session's todos, sent as state when the run starts.
    todos: Option<Value>,
    /// On a resume: the steps of this seq below this one were sent.
    skip: Option<(u64, u8)>,
    done: bool,
}

impl RunEvents {
    /// A run followed from its start (its `message.user`).
    pub fn new(thread_id: &str, turn_id: &str, todos: Option<Value>) -> RunEvents {
        RunEvents {
            thread_id: thread_id.to_string(),
            turn_id: turn_id.to_string(),
            cursor: Cursor::default(),
            text: SentText::default(),
            text_open: false,
            reasoning: SentText::default(),
            reasoning_message_open: false,
            reasoning_span_open: false,
            error: None,
            todos,
            skip: None,
            done: false,
        }
    }

    /// A run resumed at `cursor`, whose stored event `at` (seq
    /// `cursor.seq`, the first one replayed) names the turn. A resumed
    /// stream is verified from its start, so it opens again what the
    /// client has open: the run, the text and reasoning messages, a tool
    /// call cut half-way (`out`). `None` when `at` belongs to no turn.
    pub fn resume(
        thread_id: &str,
        cursor: Cursor,
        at: &TetherEvent,
        todos: Option<Value>,
        out: &mut Sent,
    ) -> Option<RunEvents> {
        let turn = at.turn_id.as_deref()?;
        let ending = at.kind == EventType::MessageComplete;
        let before = |step: u8| !ending || cursor.step <= step;
        let mut run = RunEvents::new(thread_id, turn, todos);
        run.cursor = cursor;
        run.text = SentText::from_sent(cursor.text);
        run.reasoning = SentText::from_sent(cursor.reasoning);
        run.text_open = cursor.text > 0 && before(complete::TEXT_END);
        run.reasoning_message_open =
            cursor.reasoning > 0 && before(complete::REASONING_MESSAGE_END);
        run.reasoning_span_open = cursor.reasoning > 0 && before(complete::REASONING_END);
        run.skip = Some((cursor.seq, cursor.step));
        if ending && cursor.step > complete::RUN_END {
            run.done = true;
            return Some(run);
        }
        out.push((cursor, run.run_started()));
        if run.text_open {
            out.push((cursor, run.text_start()));
        }
        if run.reasoning_span_open {
            out.push((
                cursor,
                json!({"type": "REASONING_START", "messageId": run.reasoning_span_id()}),
            ));
        }
        if run.reasoning_message_open {
            out.push((cursor, run.reasoning_message_start()));
        }
        if at.kind == EventType::ToolStart && (1..3).contains(&cursor.step) {
            out.push((cursor, run.tool_start(at)));
        }
        Some(run)
    }

    pub fn is_done(&self) -> bool {
        self.done
    }

    /// The run's turn.
    pub fn turn_id(&self) -> &str {
        &self.turn_id
    }

    /// The turn's text so far, from a resume (`active_turn.text`).
    pub fn text_so_far(&mut self, text: &str, out: &mut Sent) {
        if let Some(new) = self.text.delta(0, text) {
            let new = new.to_string();
            self.text_delta(&new, out);
        }
    }

    /// The events of one tether event (nothing for another turn's).
    pub fn event(&mut self, ev: &TetherEvent, out: &mut Sent) {
        if self.done {
            return;
        }
        if ev.kind == EventType::SessionClosed {
            // A close ends its turns first: only a run that never came.
            let seq = ev.seq.unwrap_or(self.cursor.seq);
            let err = json!({"type": "RUN_ERROR", "message": "the session was closed", "code": "session_closed"});
            self.step(seq, complete::RUN_END, err, out);
            self.done = true;
            return;
        }
        if !ev.of_turn(&self.turn_id) {
            return;
        }
        if let (Some(seq), Some((skip_seq, _))) = (ev.seq, self.skip) {
            if seq > skip_seq {
                self.skip = None;
            }
        }
        let seq = ev.seq.unwrap_or(0);
        match ev.kind {
            EventType::MessageUser => {
                let started = self.run_started();
                self.step(seq, 0, started, out);
                if let Some(todos) = self.todos.take() {
                    self.step(
                        seq,
                        1,
                        json!({"type": "STATE_SNAPSHOT", "snapshot": {"todos": todos}}),
                        out,
                    );
                }
            }
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
            EventType::ToolStart => {
                let start = self.tool_start(ev);
                self.step(seq, 0, start, out);
                let args = ev
                    .payload
                    .get("args")
                    .map(Value::to_string)
                    .unwrap_or_else(|| "null".into());
                let id = self.tool_call_id(ev);
                self.step(
                    seq,
                    1,
                    json!({"type": "TOOL_CALL_ARGS", "toolCallId": id, "delta": args}),
                    out,
                );
                self.step(
                    seq,
                    2,
                    json!({"type": "TOOL_CALL_END", "toolCallId": id}),
                    out,
                );
            }
            EventType::ToolComplete => {
                let id = self.tool_call_id(ev);
                let content = match ev.payload.get("result") {
                    Some(Value::String(s)) => s.clone(),
                    Some(other) => other.to_string(),
                    None => "null".into(),
                };
                let result = json!({"type": "TOOL_CALL_RESULT", "messageId": format!("{id}-result"),
                    "toolCallId": id, "content": content, "role": "tool"});
                self.step(seq, 0, result, out);
            }
            EventType::TodoUpdated => {
                let snapshot = json!({"type": "STATE_SNAPSHOT", "snapshot": {"todos": ev.payload}});
                self.step(seq, 0, snapshot, out);
            }
            EventType::Error => self.error = Some(ev.text("message").to_string()),
            EventType::MessageComplete => self.complete(ev, seq, out),
            _ => {}
        }
    }

    /// Sends step `step` of stored event `seq`, unless a resumed client
    /// has it already.
    fn step(&mut self, seq: u64, step: u8, event: Value, out: &mut Sent) {
        self.cursor = Cursor {
            seq,
            step: step + 1,
            text: self.text.sent(),
            reasoning: self.reasoning.sent(),
        };
        let sent = matches!(self.skip, Some((s, k)) if s == seq && step < k);
        if !sent {
            out.push((self.cursor, event));
        }
    }

    /// Sends an event of a delta (no seq: the cursor counts its bytes).
    fn transient(&mut self, event: Value, out: &mut Sent) {
        self.cursor.text = self.text.sent();
        self.cursor.reasoning = self.reasoning.sent();
        out.push((self.cursor, event));
    }

    fn run_started(&self) -> Value {
        json!({"type": "RUN_STARTED", "threadId": self.thread_id, "runId": self.turn_id})
    }

    fn text_start(&self) -> Value {
        json!({"type": "TEXT_MESSAGE_START", "messageId": self.turn_id, "role": "assistant"})
    }

    fn reasoning_span_id(&self) -> String {
        format!("{}-thinking", self.turn_id)
    }

    fn reasoning_message_id(&self) -> String {
        format!("{}-reasoning", self.turn_id)
    }

    fn reasoning_message_start(&self) -> Value {
        json!({"type": "REASONING_MESSAGE_START", "messageId": self.reasoning_message_id(), "role": "reasoning"})
    }

    /// Tool ids are the host's, unique within a turn only; AG-UI's are
    /// unique in the thread.
    fn tool_call_id(&self, ev: &TetherEvent) -> String {
        format!("{}-{}", self.turn_id, ev.text("tool_id"))
    }

    fn tool_start(&self, ev: &TetherEvent) -> Value {
        json!({"type": "TOOL_CALL_START", "toolCallId": self.tool_call_id(ev),
            "toolCallName": ev.text("name"), "parentMessageId": self.turn_id})
    }

    fn text_delta(&mut self, delta: &str, out: &mut Sent) {
        if !self.text_open {
            self.text_open = true;
            out.push((self.cursor, self.text_start()));
        }
        let content =
            json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": self.turn_id, "delta": delta});
        self.transient(content, out);
    }

    fn reasoning_delta(&mut self, delta: &str, out: &mut Sent) {
        if !self.reasoning_span_open {
            self.reasoning_span_open = true;
            out.push((
                self.cursor,
                json!({"type": "REASONING_START", "messageId": self.reasoning_span_id()}),
            ));
        }
        if !self.reasoning_message_open {
            self.reasoning_message_open = true;
            out.push((self.cursor, self.reasoning_message_start()));
        }
        let content = json!({"type": "REASONING_MESSAGE_CONTENT", "messageId": self.reasoning_message_id(), "delta": delta});
        self.transient(content, out);
    }

    fn complete(&mut self, ev: &TetherEvent, seq: u64, out: &mut Sent) {
        if let Some(rest) = self.text.rest(ev.text("text")) {
            let rest = rest.to_string();
            if !self.text_open {
                self.text_open = true;
                let start = self.text_start();
                self.step(seq, complete::TEXT_START, start, out);
            }
            let content =
                json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": self.turn_id, "delta": rest});
            self.step(seq, complete::TEXT_CONTENT, content, out);
        }
        if self.text_open {
            self.text_open = false;
            let end = json!({"type": "TEXT_MESSAGE_END", "messageId": self.turn_id});
            self.step(seq, complete::TEXT_END, end, out);
        }
        if self.reasoning_message_open {
            self.reasoning_message_open = false;
            let end =
                json!({"type": "REASONING_MESSAGE_END", "messageId": self.reasoning_message_id()});
            self.step(seq, complete::REASONING_MESSAGE_END, end, out);
        }
        if self.reasoning_span_open {
            self.reasoning_span_open = false;
            let end = json!({"type": "REASONING_END", "messageId": self.reasoning_span_id()});
            self.step(seq, complete::REASONING_END, end, out);
        }
        let (thread, run) = (&self.thread_id, &self.turn_id);
        let end = match ev.text("status") {
            "complete" => json!({"type": "RUN_FINISHED", "threadId": thread, "runId": run}),
            "interrupted" => json!({"type": "RUN_FINISHED", "threadId": thread, "runId": run,
                "outcome": {"type": "cancelled"}}),
            _ => {
                let reason = ev.opt_text("failure_reason");
                let message = match (&self.error, reason) {
                    (Some(e), _) => e.clone(),
                    (None, Some(r)) => format!("the turn failed: {r}"),
                    (None, None) => "the turn failed".to_string(),
                };
                let mut e = json!({"type": "RUN_ERROR", "message": message});
                if let Some(r) = reason {
                    e["code"] = json!(r);
                }
                e
            }
        };
        self.step(seq, complete::RUN_END, end, out);
        self.done = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::event::ev;

    fn turn() -> Vec<TetherEvent> {
        vec![
            ev("message.user", Some(2), Some("t_1"), json!({"text": "q"})),
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
                "message.delta",
                None,
                Some("t_1"),
                json!({"text": "hel", "offset": 0}),
            ),
            ev(
                "message.delta",
                None,
                Some("t_2"),
                json!({"text": "other", "offset": 0}),
            ),
            ev(
                "message.delta",
                None,
                Some("t_1"),
                json!({"text": "lo ", "offset": 3}),
            ),
            ev(
                "todo.updated",
                Some(6),
                Some("t_1"),
                json!({"items": [], "revision": 1}),
            ),
            ev(
                "message.delta",
                None,
                Some("t_1"),
                json!({"text": "world", "offset": 6}),
            ),
            ev(
                "message.complete",
                Some(7),
                Some("t_1"),
                json!({"text": "hello world", "status": "complete"}),
            ),
        ]
    }

    fn todos() -> Option<Value> {
        Some(json!({"items": [{"id": "1"}], "revision": 3}))
    }

    /// What `@ag-ui/client`'s verifier checks of messages and tool
    /// calls: content and ends only for what is open.
    fn verify(sent: &[(Cursor, Value)]) {
        let mut open: Vec<String> = Vec::new();
        for (_, e) in sent {
            let id = e["messageId"]
                .as_str()
                .or(e["toolCallId"].as_str())
                .unwrap_or("")
                .to_string();
            match e["type"].as_str().unwrap() {
                "TEXT_MESSAGE_START"
                | "TOOL_CALL_START"
                | "REASONING_MESSAGE_START"
                | "REASONING_START" => {
                    assert!(!open.contains(&id), "{id} opened twice: {sent:?}");
                    open.push(id);
                }
                "TEXT_MESSAGE_CONTENT" | "TOOL_CALL_ARGS" | "REASONING_MESSAGE_CONTENT" => {
                    assert!(open.contains(&id), "{id} not open: {sent:?}")
                }
                "TEXT_MESSAGE_END"
                | "TOOL_CALL_END"
                | "REASONING_MESSAGE_END"
                | "REASONING_END" => {
                    assert!(open.contains(&id), "{id} not open: {sent:?}");
                    open.retain(|o| *o != id);
                }
                "RUN_FINISHED" => assert!(open.is_empty(), "still open at the end: {open:?}"),
                _ => {}
            }
        }
    }

    fn live(events: &[TetherEvent]) -> Sent {
        let mut run = RunEvents::new("th", "t_1", todos());
        let mut out = Vec::new();
        for e in events {
            run.event(e, &mut out);
        }
        assert!(run.is_done());
        out
    }

    fn types(sent: &[(Cursor, Value)]) -> Vec<&str> {
        sent.iter()
            .map(|(_, e)| e["type"].as_str().unwrap())
            .collect()
    }

    fn text(sent: &[(Cursor, Value)]) -> String {
        sent.iter()
            .filter(|(_, e)| e["type"] == "TEXT_MESSAGE_CONTENT")
            .map(|(_, e)| e["delta"].as_str().unwrap())
            .collect()
    }

    #[test]
    fn a_whole_run() {
        let out = live(&turn());
        verify(&out);
        assert_eq!(
            types(&out),
            vec![
                "RUN_STARTED",
                "STATE_SNAPSHOT",
                "TOOL_CALL_START",
                "TOOL_CALL_ARGS",
                "TOOL_CALL_END",
                "TOOL_CALL_RESULT",
                "TEXT_MESSAGE_START",
                "TEXT_MESSAGE_CONTENT",
                "TEXT_MESSAGE_CONTENT",
                "STATE_SNAPSHOT",
                "TEXT_MESSAGE_CONTENT",
                "TEXT_MESSAGE_END",
                "RUN_FINISHED"
            ]
        );
        assert_eq!(text(&out), "hello world");
        assert_eq!(out[0].1["runId"], "t_1");
        assert_eq!(out[3].1["delta"], "{\"a\":1}");
        assert_eq!(out[2].1["toolCallId"], "t_1-k");
        let ids: Vec<String> = out.iter().map(|(c, _)| c.to_string()).collect();
        assert_eq!(ids[0], "2.1.0.0");
        assert_eq!(ids[4], "4.3.0.0");
        assert_eq!(
            ids[7], "5.1.3.0",
            "a delta keeps the seq and counts its bytes"
        );
        assert_eq!(ids[12], "7.6.11.0");
    }

    /// Every cut of the live stream, resumed at the id of the last event
    /// received, gives what was missed, exactly: the same events, or the
    /// same text in other pieces.
    #[test]
    fn a_resume_from_any_event_misses_nothing_and_repeats_nothing() {
        let events = turn();
        let whole = live(&events);
        for cut in 0..whole.len() {
            let cursor = whole[cut].0;
            // The replay from the cursor's seq: the stored events from it
            // (deltas are not stored), then the text so far.
            let replay: Vec<TetherEvent> = events
                .iter()
                .filter(|e| e.seq.is_some_and(|s| s >= cursor.seq))
                .cloned()
                .collect();
            let mut out = Vec::new();
            let mut run =
                RunEvents::resume("th", cursor, &replay[0], todos(), &mut out).expect("a turn");
            if run.is_done() {
                assert_eq!(
                    cut,
                    whole.len() - 1,
                    "only the run's end leaves nothing to send"
                );
                assert!(out.is_empty());
                continue;
            }
            let reopened = out.len();
            for e in &replay {
                run.event(e, &mut out);
            }
            assert!(run.is_done(), "cut {cut}");
            let got = &out[reopened..];
            // Nothing twice: the text adds up, every other event once.
            let sent_text = text(&whole[..=cut]) + &text(got);
            assert_eq!(sent_text, "hello world", "cut {cut}: {got:?}");
            let structural = |s: &[(Cursor, Value)]| -> Vec<String> {
                s.iter()
                    .filter(|(_, e)| {
                        !matches!(
                            e["type"].as_str(),
                            Some("TEXT_MESSAGE_CONTENT" | "TEXT_MESSAGE_START")
                        )
                    })
                    .map(|(_, e)| e.to_string())
                    .collect()
            };
            let mut all = structural(&whole[..=cut]);
            all.extend(structural(got));
            assert_eq!(all, structural(&whole), "cut {cut}: {got:?}");
            // The resumed stream, verified on its own, opens what the
            // client has open.
            assert_eq!(out[0].1["type"], "RUN_STARTED", "cut {cut}");
            verify(&out);
        }
    }

    #[test]
    fn a_resume_after_the_end_sends_nothing() {
        let whole = live(&turn());
        let last = whole.last().unwrap().0;
        let at = ev(
            "message.complete",
            Some(7),
            Some("t_1"),
            json!({"text": "hello world", "status": "complete"}),
        );
        let mut out = Vec::new();
        let run = RunEvents::resume("th", last, &at, None, &mut out).unwrap();
        assert!(run.is_done());
        assert!(out.is_empty());
    }

    #[test]
    fn interrupted_failed_and_reasoning_runs() {
        let mut run = RunEvents::new("th", "t_1", None);
        let mut out = Vec::new();
        for e in [
            ev("message.user", Some(2), Some("t_1"), json!({"text": "q"})),
            ev(
                "reasoning.delta",
                None,
                Some("t_1"),
                json!({"text": "hm", "offset": 0}),
            ),
            ev(
                "message.complete",
                Some(3),
                Some("t_1"),
                json!({"text": "", "status": "interrupted"}),
            ),
        ] {
            run.event(&e, &mut out);
        }
        assert_eq!(
            types(&out),
            vec![
                "RUN_STARTED",
                "REASONING_START",
                "REASONING_MESSAGE_START",
                "REASONING_MESSAGE_CONTENT",
                "REASONING_MESSAGE_END",
                "REASONING_END",
                "RUN_FINISHED"
            ]
        );
        assert_eq!(out[6].1["outcome"], json!({"type": "cancelled"}));
        let mut run = RunEvents::new("th", "t_1", None);
        let mut out = Vec::new();
        for e in [
            ev("message.user", Some(2), Some("t_1"), json!({"text": "q"})),
            ev("error", Some(3), Some("t_1"), json!({"message": "boom"})),
            ev(
                "message.complete",
                Some(4),
                Some("t_1"),
                json!({"text": "", "status": "error", "failure_reason": "engine_error"}),
            ),
        ] {
            run.event(&e, &mut out);
        }
        assert_eq!(types(&out), vec!["RUN_STARTED", "RUN_ERROR"]);
        assert_eq!(out[1].1["message"], "boom");
        assert_eq!(out[1].1["code"], "engine_error");
    }
}
