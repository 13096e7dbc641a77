//! The `command` engine (docs/ENGINES.md): every turn runs an agent program,
//! `sh -c CMD`, that reads the turn as JSON on stdin and answers on stdout.
//!
//! - env: `TETHER_SESSION_ID`, `TETHER_TURN_ID`, `TETHER_TRACE_ID`, and
//!   `TETHER_OP` (`turn`, or `compress`).
//! - stdin: `{"history":[Message],"prompt","config"}`, then closed.
//! - stdout: a line that is a JSON object whose `type` is a host event type
//!   (PROTOCOL Part 2) is that event, its payload the other fields (or its
//!   `payload` object); any other line is reply text, newline included.
//! - exit 0 completes the turn with the text streamed; another status fails
//!   it (`engine_error`) with the tail of stderr.
//! - an interrupt sends SIGTERM to the agent's process group, SIGKILL 2 s
//!   later.
//! - `compress` runs the same command with `TETHER_OP=compress`; its whole
//!   stdout, trimmed, is the summary.

mod agent;

use std::process::ExitStatus;

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Map, Value};
use tether_protocol::{
    History, Message, StatusUpdatePayload, TextPayload, TodoItem, ToolCompletePayload,
    ToolStartPayload, TurnStart, HOST_EVENT_TYPES,
};

use super::engine::{AsyncEngine, Cancel, CompressResult, TurnOutcome, TurnSink};
use crate::CompressError;
use agent::{Agent, Line, Step};

/// `turn.error` reason for everything that goes wrong with the agent.
const ENGINE_ERROR: &str = "engine_error";
/// The longest compress summary taken from an agent.
const MAX_SUMMARY: usize = 1024 * 1024;

pub struct CommandEngine {
    /// Run through `sh -c`.
    command: String,
}

impl CommandEngine {
    pub fn new(command: String) -> Self {
        Self { command }
    }
}

impl AsyncEngine for CommandEngine {
    const NAME: &'static str = "command";

    async fn turn(&self, turn: TurnStart, out: &TurnSink, cancel: &Cancel) -> TurnOutcome {
        // Written straight to text: the history goes in as the host read it,
        // rather than built into a `Value` tree and written out again.
        #[derive(Serialize)]
        struct Input<'a> {
            history: &'a History,
            prompt: &'a str,
            config: &'a Map<String, Value>,
        }
        let input = serde_json::to_string(&Input {
            history: &turn.history,
            prompt: &turn.prompt,
            config: &turn.config,
        });
        let input = match input {
            Ok(input) => input,
            Err(e) => return failed(format!("invalid history: {e}")),
        };
        let envs = [
            ("TETHER_OP", "turn".to_owned()),
            ("TETHER_SESSION_ID", turn.session_id.to_string()),
            ("TETHER_TURN_ID", turn.turn_id.to_string()),
            ("TETHER_TRACE_ID", turn.trace_id.to_string()),
        ];
        let mut agent = match Agent::spawn(&self.command, &envs, input.into_bytes()) {
            Ok(agent) => agent,
            Err(e) => return failed(format!("cannot start the agent: {e}")),
        };
        loop {
            let step = tokio::select! {
                // An interrupt wins over output that is already waiting.
                biased;
                () = cancel.cancelled() => {
                    agent.stop().await;
                    return TurnOutcome::Interrupted;
                }
                step = agent.step() => step,
            };
            match step {
                Ok(Step::Line(line)) => match forward(&line, out).await {
                    Ok(()) => {}
                    Err(Forward::Closed) => {
                        // stdout is gone: nobody reads the outcome anyway.
                        agent.stop().await;
                        return TurnOutcome::Interrupted;
                    }
                    Err(Forward::Bad(message)) => {
                        agent.stop().await;
                        return failed(message);
                    }
                },
                Ok(Step::Exited(status)) if status.success() => {
                    return TurnOutcome::Complete { text: out.text() };
                }
                Ok(Step::Exited(status)) => {
                    return failed(exit_message(status, &agent.stderr_tail().await));
                }
                Err(e) => {
                    agent.stop().await;
                    return failed(format!("cannot read the agent's output: {e}"));
                }
            }
        }
    }

    async fn summarize(
        &self,
        history: &[Message],
        args: &Value,
    ) -> Result<CompressResult, CompressError> {
        let input = json!({
            "history": history,
            "prompt": "",
            "config": {},
            "args": args,
        });
        let envs = [("TETHER_OP", "compress".to_owned())];
        let mut agent = Agent::spawn(&self.command, &envs, input.to_string().into_bytes())
            .map_err(CompressError::AgentStart)?;
        let mut summary = String::new();
        loop {
            match agent.step().await {
                Ok(Step::Line(line)) => {
                    if summary.len() + line.text.len() > MAX_SUMMARY {
                        return Err(CompressError::TooLong { limit: MAX_SUMMARY });
                    }
                    summary.push_str(&line.text);
                }
                Ok(Step::Exited(status)) if status.success() => break,
                Ok(Step::Exited(status)) => {
                    let tail = agent.stderr_tail().await;
                    return Err(CompressError::AgentExit(exit_message(status, &tail)));
                }
                Err(e) => return Err(CompressError::AgentRead(e)),
            }
        }
        Ok(CompressResult {
            summary: summary.trim().to_owned(),
            removed: history.len() as u64,
        })
    }
}

fn failed(message: String) -> TurnOutcome {
    TurnOutcome::Failed {
        reason: ENGINE_ERROR.into(),
        message,
    }
}

/// "the agent exited with status 3: <stderr tail>".
fn exit_message(status: ExitStatus, stderr: &str) -> String {
    use std::os::unix::process::ExitStatusExt;
    let how = match (status.code(), status.signal()) {
        (Some(code), _) => format!("the agent exited with status {code}"),
        (None, Some(signal)) => format!("the agent was killed by signal {signal}"),
        (None, None) => "the agent failed".to_owned(),
    };
    if stderr.is_empty() {
        format!("{how} (nothing on stderr)")
    } else {
        format!("{how}: {stderr}")
    }
}

/// Why a line could not be passed on.
enum Forward {
    /// The host's stdout is gone.
    Closed,
    /// An event line the gateway could not use.
    Bad(String),
}

impl From<super::io::Closed> for Forward {
    fn from(_: super::io::Closed) -> Self {
        Forward::Closed
    }
}

/// Passes one stdout line on: as the event it is, or as reply text.
async fn forward(line: &Line, out: &TurnSink) -> Result<(), Forward> {
    let Some((kind, payload)) = line.whole.then(|| as_event(&line.text)).flatten() else {
        return Ok(out.delta(&line.text).await?);
    };
    // Checked here rather than left to the gateway, which drops a malformed
    // event with only a log line: the agent's author gets the reason in the
    // turn's error instead.
    match kind.as_str() {
        "message.delta" => {
            out.delta(&parse::<TextPayload>(&kind, payload)?.text)
                .await?
        }
        "reasoning.delta" => {
            let text = parse::<TextPayload>(&kind, payload)?.text;
            out.reasoning_delta(&text).await?;
        }
        "tool.start" => {
            let p = parse::<ToolStartPayload>(&kind, payload)?;
            out.tool_start(&p.tool_id, &p.name, p.args).await?;
        }
        "tool.complete" => {
            let p = parse::<ToolCompletePayload>(&kind, payload)?;
            out.tool_complete(&p.tool_id, &p.name, p.result, p.is_error)
                .await?;
        }
        "todo.updated" => {
            #[derive(serde::Deserialize)]
            struct Todo {
                items: Vec<TodoItem>,
            }
            out.todo_updated(parse::<Todo>(&kind, payload)?.items)
                .await?;
        }
        _ => {
            let p = parse::<StatusUpdatePayload>(&kind, payload)?;
            out.event(&kind, &p).await?;
        }
    }
    Ok(())
}

/// `(type, payload)` when `text` is a JSON object with one of
/// [`HOST_EVENT_TYPES`]. The payload is its `payload` object if it has one, else
/// the object without `type`.
fn as_event(text: &str) -> Option<(String, Value)> {
    let text = text.trim();
    if !text.starts_with('{') {
        return None;
    }
    let Ok(Value::Object(mut object)) = serde_json::from_str::<Value>(text) else {
        return None;
    };
    let kind = match object.get("type") {
        Some(Value::String(kind)) if HOST_EVENT_TYPES.contains(&kind.as_str()) => kind.clone(),
        _ => return None,
    };
    object.remove("type");
    let payload = match object.remove("payload") {
        Some(payload @ Value::Object(_)) if object.is_empty() => payload,
        Some(other) => {
            object.insert("payload".into(), other);
            Value::Object(object)
        }
        None => Value::Object(object),
    };
    Some((kind, payload))
}

fn parse<T: DeserializeOwned>(kind: &str, payload: Value) -> Result<T, Forward> {
    serde_json::from_value(payload)
        .map_err(|e| Forward::Bad(format!("the agent printed a bad `{kind}` event: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_lines_are_recognized_in_both_shapes() {
        let (kind, payload) =
            as_event(r#"{"type":"tool.start","tool_id":"t","name":"n","args":{}}"#).unwrap();
        assert_eq!(kind, "tool.start");
        assert_eq!(payload, json!({"tool_id":"t","name":"n","args":{}}));
        let (kind, payload) =
            as_event("{\"type\":\"message.delta\",\"payload\":{\"text\":\"hi\"}}\n").unwrap();
        assert_eq!(kind, "message.delta");
        assert_eq!(payload, json!({"text":"hi"}));
    }

    #[test]
    fn other_lines_are_text() {
        for line in [
            "hello\n",
            "{\"type\":\"message.user\",\"text\":\"x\"}\n",
            "{\"kind\":\"tool.start\"}\n",
            "[1,2]\n",
            "{not json\n",
            "\"message.delta\"\n",
        ] {
            assert!(as_event(line).is_none(), "{line}");
        }
    }

    #[test]
    fn a_signal_and_an_empty_stderr_are_named() {
        use std::os::unix::process::ExitStatusExt;
        let killed = ExitStatus::from_raw(9);
        assert_eq!(
            exit_message(killed, ""),
            "the agent was killed by signal 9 (nothing on stderr)"
        );
        let failed = ExitStatus::from_raw(3 << 8);
        assert_eq!(
            exit_message(failed, "boom"),
            "the agent exited with status 3: boom"
        );
    }
}
