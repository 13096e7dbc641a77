//! What a model server says, read leniently: the `data` of one streamed
//! chat-completion chunk, and the message of an HTTP error body.
//!
//! OpenAI-compatible servers differ in the details (Ollama and vLLM put
//! reasoning in `delta.reasoning`, DeepSeek and llama.cpp in
//! `delta.reasoning_content`; a mid-stream failure may arrive as an `error`
//! object; usage comes in a last chunk with no choices), so fields are read
//! by hand from a `serde_json::Value` instead of a strict struct that would
//! reject a server for an extra or missing field the engine does not use.

use serde_json::Value;

/// How much of a server's error message or bad chunk goes into a turn's
/// error message.
pub const MAX_QUOTE: usize = 300;

/// One `data` payload of the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Chunk {
    /// `[DONE]`: the stream is over.
    Done,
    /// A completion chunk; every field may be absent.
    Delta {
        content: Option<String>,
        reasoning: Option<String>,
        finish_reason: Option<String>,
        usage: Option<Value>,
    },
    /// The server reported an error inside the stream.
    Error(String),
}

/// The `data` is not a chunk.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a malformed chunk from the model server ({reason}): {data}")]
pub struct Malformed {
    reason: String,
    /// The start of the chunk.
    data: String,
}

/// Reads one event's `data`.
pub fn parse(data: &str) -> Result<Chunk, Malformed> {
    let data = data.trim();
    if data == "[DONE]" {
        return Ok(Chunk::Done);
    }
    let malformed = |reason: &str| Malformed {
        reason: reason.to_owned(),
        data: truncate(data, MAX_QUOTE),
    };
    let value: Value = serde_json::from_str(data).map_err(|e| malformed(&e.to_string()))?;
    let Value::Object(chunk) = &value else {
        return Err(malformed("not a JSON object"));
    };
    if let Some(error) = chunk.get("error").filter(|e| !e.is_null()) {
        return Ok(Chunk::Error(error_message(error)));
    }
    let first = match chunk.get("choices") {
        None | Some(Value::Null) => None,
        Some(Value::Array(choices)) => choices
            .iter()
            .find(|c| c.get("index").and_then(Value::as_u64).unwrap_or(0) == 0),
        Some(_) => return Err(malformed("`choices` is not an array")),
    };
    let delta = first.and_then(|c| c.get("delta"));
    let text = |key: &str| {
        delta
            .and_then(|d| d.get(key))
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    Ok(Chunk::Delta {
        content: text("content"),
        reasoning: text("reasoning_content").or_else(|| text("reasoning")),
        finish_reason: first
            .and_then(|c| c.get("finish_reason"))
            .and_then(Value::as_str)
            .map(str::to_owned),
        usage: chunk.get("usage").filter(|u| u.is_object()).cloned(),
    })
}

/// The message of an error body or object: `{"error":{"message"}}` (OpenAI,
/// vLLM), `{"error":"..."}` (Ollama), `{"message"}` or `{"detail"}` (others),
/// else the body itself; truncated.
pub fn error_body_message(body: &str) -> String {
    let body = body.trim();
    let message = match serde_json::from_str::<Value>(body) {
        Ok(Value::Object(o)) => match o.get("error").filter(|e| !e.is_null()) {
            Some(error) => error_message(error),
            None => ["message", "detail"]
                .iter()
                .find_map(|k| o.get(*k).and_then(Value::as_str))
                .unwrap_or(body)
                .to_owned(),
        },
        _ => body.to_owned(),
    };
    truncate(&message, MAX_QUOTE)
}

/// `error` as a string, or its `message`, or its JSON.
fn error_message(error: &Value) -> String {
    let message = match error {
        Value::String(s) => s.clone(),
        other => match other.get("message").and_then(Value::as_str) {
            Some(m) => m.to_owned(),
            None => other.to_string(),
        },
    };
    truncate(&message, MAX_QUOTE)
}

/// `s` cut to at most `max` bytes on a character boundary, with `…` when
/// something was cut.
pub fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn delta(content: Option<&str>, reasoning: Option<&str>) -> Chunk {
        Chunk::Delta {
            content: content.map(str::to_owned),
            reasoning: reasoning.map(str::to_owned),
            finish_reason: None,
            usage: None,
        }
    }

    #[test]
    fn content_and_both_reasoning_spellings() {
        let c = r#"{"id":"x","choices":[{"index":0,"delta":{"role":"assistant","content":"Hi"},"finish_reason":null}]}"#;
        assert_eq!(parse(c).unwrap(), delta(Some("Hi"), None));
        let r = r#"{"choices":[{"index":0,"delta":{"reasoning_content":"hmm","content":null}}]}"#;
        assert_eq!(parse(r).unwrap(), delta(None, Some("hmm")));
        let r = r#"{"choices":[{"delta":{"reasoning":"so"}}]}"#;
        assert_eq!(parse(r).unwrap(), delta(None, Some("so")));
        // A role-only first chunk carries nothing.
        let empty = r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#;
        assert_eq!(parse(empty).unwrap(), delta(None, None));
    }

    #[test]
    fn finish_reason_usage_and_done() {
        let end = r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#;
        assert!(
            matches!(parse(end).unwrap(), Chunk::Delta { finish_reason: Some(r), .. } if r == "stop")
        );
        let usage =
            r#"{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}"#;
        let Chunk::Delta { usage, .. } = parse(usage).unwrap() else {
            panic!("not a delta")
        };
        assert_eq!(
            usage,
            Some(json!({"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}))
        );
        assert_eq!(parse(" [DONE] ").unwrap(), Chunk::Done);
    }

    #[test]
    fn errors_in_the_stream() {
        assert_eq!(
            parse(r#"{"error":{"message":"overloaded","type":"server_error"}}"#).unwrap(),
            Chunk::Error("overloaded".into())
        );
        assert_eq!(
            parse(r#"{"error":"model crashed"}"#).unwrap(),
            Chunk::Error("model crashed".into())
        );
    }

    #[test]
    fn malformed_chunks_are_named() {
        let e = parse("{not json").unwrap_err().to_string();
        assert!(
            e.starts_with("a malformed chunk from the model server ("),
            "{e}"
        );
        assert!(e.ends_with("): {not json"), "{e}");
        assert!(parse("[1,2]").is_err());
        assert!(parse(r#"{"choices":{}}"#).is_err());
        let long = format!("{{\"x\":\"{}", "a".repeat(5000));
        assert!(parse(&long).unwrap_err().to_string().len() < 500);
    }

    #[test]
    fn error_bodies() {
        assert_eq!(
            error_body_message(r#"{"error":{"message":"bad key","code":"invalid_api_key"}}"#),
            "bad key"
        );
        assert_eq!(
            error_body_message(r#"{"error":"model 'x' not found"}"#),
            "model 'x' not found"
        );
        assert_eq!(error_body_message(r#"{"detail":"nope"}"#), "nope");
        assert_eq!(error_body_message("  Bad Gateway\n"), "Bad Gateway");
        assert_eq!(error_body_message(&"é".repeat(400)).len(), 300 + "…".len());
    }
}
