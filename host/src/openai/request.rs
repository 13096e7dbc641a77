//! The request bodies the openai engine sends: a turn as a streamed chat
//! completion, and a compress as a request for a summary.
//!
//! A session's `config` (its `engine` pin or its profile's engine config)
//! may choose the model and the sampling, but never where the request goes:
//! the base URL and the API key are the host's flags, because a config can
//! come from any client and must not be able to send the operator's key to
//! another server.

use serde_json::{json, Map, Value};
use tether_protocol::{Message, MessageRole};

/// What a compress asks of the model. The history comes before it as the
/// conversation itself, so the model sees the roles as they were.
const SUMMARY_REQUEST: &str = "Summarize the conversation so far, for yourself: \
     it will replace the conversation in your context. Keep the facts, decisions, \
     open questions and anything the user asked you to remember; leave out \
     pleasantries. Answer with the summary only.";

/// A `config` key has the wrong type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the session's engine config is not usable: `{key}` must be {expected}")]
pub struct ConfigError {
    key: &'static str,
    expected: &'static str,
}

/// The body of a turn's request: `history` then `prompt` as `messages`,
/// streamed, with usage in the last chunk.
pub fn turn_body(
    model: &str,
    history: &[Message],
    prompt: &str,
    config: &Map<String, Value>,
) -> Result<Value, ConfigError> {
    let mut messages = Vec::with_capacity(history.len() + 2);
    if let Some(system) = string(config, "system")? {
        messages.push(message("system", system));
    }
    messages.extend(history.iter().filter_map(from_history));
    messages.push(message("user", prompt));
    let mut body = Map::new();
    body.insert(
        "model".into(),
        string(config, "model")?.unwrap_or(model).into(),
    );
    body.insert("messages".into(), messages.into());
    body.insert("stream".into(), true.into());
    body.insert("stream_options".into(), json!({"include_usage": true}));
    for key in ["temperature", "top_p"] {
        if let Some(value) = config.get(key).filter(|v| !v.is_null()) {
            if !value.is_number() {
                return Err(ConfigError {
                    key,
                    expected: "a number",
                });
            }
            body.insert(key.into(), value.clone());
        }
    }
    if let Some(value) = config.get("max_tokens").filter(|v| !v.is_null()) {
        match value.as_u64() {
            Some(n) if n > 0 => body.insert("max_tokens".into(), n.into()),
            _ => {
                return Err(ConfigError {
                    key: "max_tokens",
                    expected: "a positive integer",
                })
            }
        };
    }
    Ok(Value::Object(body))
}

/// The body of a compress: the history, then the request for a summary
/// (`focus`, when the client gave one, says what to keep above all).
pub fn summary_body(model: &str, history: &[Message], args: &Value) -> Value {
    let mut ask = SUMMARY_REQUEST.to_owned();
    if let Some(focus) = args
        .get("focus")
        .and_then(Value::as_str)
        .filter(|f| !f.trim().is_empty())
    {
        ask.push_str(" Focus on: ");
        ask.push_str(focus.trim());
    }
    let mut messages: Vec<Value> = history.iter().filter_map(from_history).collect();
    messages.push(message("user", &ask));
    json!({
        "model": model,
        "messages": messages,
        "stream": true,
        "stream_options": {"include_usage": true},
    })
}

/// A transcript entry as a chat message. A tool result becomes a user
/// message (the model made no tool call this engine could pair it with,
/// and every chat template accepts a user message); an empty assistant
/// message (a turn interrupted before its first word) is left out.
fn from_history(m: &Message) -> Option<Value> {
    match m.role {
        MessageRole::User => Some(message("user", &m.text)),
        MessageRole::System => Some(message("system", &m.text)),
        MessageRole::Assistant if m.text.is_empty() => None,
        MessageRole::Assistant => Some(message("assistant", &m.text)),
        MessageRole::Tool => Some(message("user", &format!("Tool result: {}", m.text))),
    }
}

fn message(role: &str, content: &str) -> Value {
    json!({"role": role, "content": content})
}

/// `config[key]` as a non-empty string; absent, null and `""` are `None`.
fn string<'a>(
    config: &'a Map<String, Value>,
    key: &'static str,
) -> Result<Option<&'a str>, ConfigError> {
    match config.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(ConfigError {
            key,
            expected: "a string",
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(role: MessageRole, text: &str) -> Message {
        Message {
            seq: 1,
            role,
            text: text.into(),
            turn_id: None,
            ts: String::new(),
            status: None,
            failure_reason: None,
            error: None,
        }
    }

    fn config(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => panic!("not an object"),
        }
    }

    #[test]
    fn history_then_prompt_with_the_flag_model() {
        let history = [
            entry(MessageRole::System, "be brief"),
            entry(MessageRole::User, "hi"),
            entry(MessageRole::Assistant, "hello"),
            entry(MessageRole::Tool, "{\"ok\":true}"),
            entry(MessageRole::Assistant, ""),
        ];
        let body = turn_body("m1", &history, "next", &Map::new()).unwrap();
        assert_eq!(
            body,
            json!({
                "model": "m1",
                "messages": [
                    {"role": "system", "content": "be brief"},
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": "hello"},
                    {"role": "user", "content": "Tool result: {\"ok\":true}"},
                    {"role": "user", "content": "next"},
                ],
                "stream": true,
                "stream_options": {"include_usage": true},
            })
        );
    }

    #[test]
    fn config_overrides() {
        let c = config(json!({
            "model": "m2", "temperature": 0.2, "top_p": 1, "max_tokens": 64,
            "system": "you are terse", "unrelated": [1]
        }));
        let body = turn_body("m1", &[], "q", &c).unwrap();
        assert_eq!(body["model"], "m2");
        assert_eq!(body["temperature"], 0.2);
        assert_eq!(body["top_p"], 1);
        assert_eq!(body["max_tokens"], 64);
        assert_eq!(
            body["messages"][0],
            json!({"role": "system", "content": "you are terse"})
        );
        assert!(body.get("unrelated").is_none());
        // null and "" mean "not set".
        let c = config(json!({"model": "", "temperature": null}));
        let body = turn_body("m1", &[], "q", &c).unwrap();
        assert_eq!(body["model"], "m1");
        assert!(body.get("temperature").is_none());
    }

    #[test]
    fn mistyped_config_is_refused_by_name() {
        for (c, key) in [
            (json!({"model": 3}), "`model` must be a string"),
            (
                json!({"temperature": "hot"}),
                "`temperature` must be a number",
            ),
            (
                json!({"max_tokens": 0}),
                "`max_tokens` must be a positive integer",
            ),
            (
                json!({"max_tokens": 1.5}),
                "`max_tokens` must be a positive integer",
            ),
            (json!({"system": {}}), "`system` must be a string"),
        ] {
            let e = turn_body("m", &[], "q", &config(c)).unwrap_err();
            assert!(e.to_string().ends_with(key), "{e}");
        }
    }

    #[test]
    fn a_summary_asks_after_the_history() {
        let history = [entry(MessageRole::User, "hi")];
        let body = summary_body("m", &history, &json!({"focus": "names"}));
        let messages = body["messages"].as_array().unwrap();
        assert_eq!(messages.len(), 2);
        assert_eq!(messages[0], json!({"role": "user", "content": "hi"}));
        let ask = messages[1]["content"].as_str().unwrap();
        assert!(ask.starts_with("Summarize the conversation"), "{ask}");
        assert!(ask.ends_with("Focus on: names"), "{ask}");
        assert_eq!(body["stream"], true);
    }
}
