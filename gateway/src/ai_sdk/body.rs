//! The body `DefaultChatTransport` posts (the AI SDK's `HttpChatTransport`):
//! `{id, messages, trigger, messageId, ...}`, where each message is a UI
//! message `{id, role, parts, metadata?}`. Only the fields tether reads
//! are typed; anything else an app adds with `body` is ignored.

use serde::Deserialize;
use serde_json::Value;
use tether_protocol::{SeedMessage, SeedRole};

use crate::chat::said::{self, Said};

/// `POST /v1/ai-sdk/chat`.
#[derive(Debug, Deserialize)]
pub struct ChatRequest {
    pub id: String,
    #[serde(default)]
    pub messages: Vec<UiMessage>,
    #[serde(default)]
    pub trigger: Trigger,
    /// With `submit-message`: the user message being edited; with
    /// `regenerate-message`: the assistant message being replaced.
    #[serde(default, rename = "messageId")]
    pub message_id: Option<String>,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum Trigger {
    #[default]
    #[serde(rename = "submit-message")]
    Submit,
    #[serde(rename = "regenerate-message")]
    Regenerate,
}

/// A UI message as the client holds it.
#[derive(Debug, Clone, Deserialize)]
pub struct UiMessage {
    pub role: Role,
    #[serde(default)]
    pub parts: Vec<Value>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
}

impl Said for UiMessage {
    fn seed_role(&self) -> Option<SeedRole> {
        Some(match self.role {
            Role::System => SeedRole::System,
            Role::User => SeedRole::User,
            Role::Assistant => SeedRole::Assistant,
        })
    }

    /// The text parts, in order. Other parts (files, tools, reasoning,
    /// data) have no place in a tether transcript.
    fn text(&self) -> String {
        self.parts
            .iter()
            .filter(|p| p["type"] == "text")
            .filter_map(|p| p["text"].as_str())
            .collect()
    }
}

impl ChatRequest {
    /// The prompt: the last message's text, which must be a user message
    /// with text.
    pub fn prompt(&self) -> Result<String, &'static str> {
        said::prompt(&self.messages, "the last message must be the user's prompt")
    }

    /// The conversation before the prompt, as the seed of a chat's new
    /// session: role and text of each message that has text.
    pub fn seed(&self) -> Vec<SeedMessage> {
        said::seed(&self.messages)
    }

    /// How many user messages the request holds (the prompt included).
    pub fn user_messages(&self) -> usize {
        self.messages
            .iter()
            .filter(|m| m.role == Role::User)
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn req(v: Value) -> ChatRequest {
        serde_json::from_value(v).expect("a request")
    }

    #[test]
    fn the_prompt_is_the_last_user_message_and_the_rest_seeds() {
        let r = req(json!({
            "id": "c", "trigger": "submit-message", "extra": 1,
            "messages": [
                {"id": "1", "role": "system", "parts": [{"type": "text", "text": "be brief"}]},
                {"id": "2", "role": "user", "parts": [{"type": "text", "text": "hi"}]},
                {"id": "3", "role": "assistant", "parts": [
                    {"type": "step-start"},
                    {"type": "dynamic-tool", "toolName": "x", "toolCallId": "a", "state": "output-available"},
                    {"type": "text", "text": "hel"}, {"type": "text", "text": "lo"}]},
                {"id": "4", "role": "assistant", "parts": [{"type": "reasoning", "text": "hmm"}]},
                {"id": "5", "role": "user", "parts": [{"type": "file", "url": "x"}, {"type": "text", "text": "again"}]}
            ]
        }));
        assert_eq!(r.trigger, Trigger::Submit);
        assert_eq!(r.prompt().unwrap(), "again");
        let seed: Vec<_> = r.seed().into_iter().map(|m| (m.role, m.text)).collect();
        assert_eq!(
            seed,
            vec![
                (SeedRole::System, "be brief".to_string()),
                (SeedRole::User, "hi".to_string()),
                (SeedRole::Assistant, "hello".to_string()),
            ]
        );
        assert_eq!(r.user_messages(), 2);
    }

    #[test]
    fn a_request_without_a_prompt_is_refused() {
        assert!(req(json!({"id": "c", "messages": []})).prompt().is_err());
        let r = req(
            json!({"id": "c", "messages": [{"role": "assistant", "parts": [{"type": "text", "text": "x"}]}]}),
        );
        assert!(r.prompt().is_err());
        let r = req(json!({"id": "c", "messages": [{"role": "user", "parts": []}]}));
        assert!(r.prompt().is_err());
        let r: Result<ChatRequest, _> =
            serde_json::from_value(json!({"id": "c", "trigger": "resume-stream"}));
        assert!(r.is_err());
        let r: Result<ChatRequest, _> =
            serde_json::from_value(json!({"id": "c", "messages": [{"role": "tool"}]}));
        assert!(r.is_err());
        let r = req(json!({"id": "c", "trigger": "regenerate-message", "messageId": "t_1"}));
        assert_eq!(
            (r.trigger, r.message_id.as_deref()),
            (Trigger::Regenerate, Some("t_1"))
        );
    }
}
