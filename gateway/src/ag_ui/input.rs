//! AG-UI's `RunAgentInput` (`@ag-ui/core`): `{threadId, runId, messages,
//! tools, context, state, forwardedProps, ...}`. tether reads the thread,
//! the prompt (the last message, a user message) and, for a thread's first
//! run, the messages before it as the session's seed. `tools`, `context`,
//! `state` and `forwardedProps` are accepted and not used: tether's
//! compute host owns the tools and the state (docs/PROTOCOL.md).

use serde::Deserialize;
use serde_json::Value;
use tether_protocol::{SeedMessage, SeedRole};

use crate::chat::said::{self, Said};

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunAgentInput {
    pub thread_id: String,
    #[serde(default)]
    pub messages: Vec<InputMessage>,
}

/// A message of the input; roles tether has no place for (tool results,
/// activity, reasoning) are read and skipped.
#[derive(Debug, Deserialize)]
pub struct InputMessage {
    pub role: String,
    #[serde(default)]
    pub content: Value,
}

impl Said for InputMessage {
    fn seed_role(&self) -> Option<SeedRole> {
        match self.role.as_str() {
            "system" | "developer" => Some(SeedRole::System),
            "user" => Some(SeedRole::User),
            "assistant" => Some(SeedRole::Assistant),
            _ => None,
        }
    }

    /// `content` as a string, or its text parts, in order.
    fn text(&self) -> String {
        match &self.content {
            Value::String(s) => s.clone(),
            Value::Array(parts) => parts
                .iter()
                .filter(|p| p["type"] == "text")
                .filter_map(|p| p["text"].as_str())
                .collect(),
            _ => String::new(),
        }
    }
}

impl RunAgentInput {
    /// The prompt: the last message, a user message with text.
    pub fn prompt(&self) -> Result<String, &'static str> {
        said::prompt(
            &self.messages,
            "the last message must be the user's prompt (tools run on tether's compute host, not in the client)",
        )
    }

    /// The messages before the prompt, as a new session's seed.
    pub fn seed(&self) -> Vec<SeedMessage> {
        said::seed(&self.messages)
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_prompt_and_the_seed() {
        let input: RunAgentInput = serde_json::from_value(json!({
            "threadId": "th-1", "runId": "r1", "tools": [], "context": [], "state": {}, "forwardedProps": {},
            "messages": [
                {"id": "1", "role": "developer", "content": "be brief"},
                {"id": "2", "role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "image", "source": {}}]},
                {"id": "3", "role": "assistant", "content": "hello", "toolCalls": []},
                {"id": "4", "role": "tool", "content": "42", "toolCallId": "x"},
                {"id": "5", "role": "user", "content": "again"}
            ]
        }))
        .unwrap();
        assert_eq!(input.thread_id, "th-1");
        assert_eq!(input.prompt().unwrap(), "again");
        let seed: Vec<_> = input.seed().into_iter().map(|m| (m.role, m.text)).collect();
        assert_eq!(
            seed,
            vec![
                (SeedRole::System, "be brief".to_string()),
                (SeedRole::User, "hi".to_string()),
                (SeedRole::Assistant, "hello".to_string())
            ]
        );
        let input: RunAgentInput = serde_json::from_value(
            json!({"threadId": "t", "messages": [{"role": "tool", "content": "1"}]}),
        )
        .unwrap();
        assert!(input.prompt().is_err());
        assert!(serde_json::from_value::<RunAgentInput>(json!({"messages": []})).is_err());
    }
}
