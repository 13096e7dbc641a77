//! Which turn a `regenerate-message`, or an edited user message, replaces.
//!
//! The new turn is submitted with `replaces` (PROTOCOL 1.4,
//! `prompt.submit`): the replaced turn and everything after it leave the
//! history the new turn (and every later one) sees, while its events stay
//! in the log. The turn is found in the chat's transcript:
//!
//! - `regenerate-message` with `messageId`: the assistant message with that
//!   id (a turn id); without one, the chat's last answered turn;
//! - `submit-message` with `messageId` (an edit): the turn of the user
//!   message with that id (`{turn}-user`), or, for an id the client made
//!   up itself, the turn of the user message at the same place (the n-th
//!   user message of the transcript, n the number of user messages in the
//!   request).
//!
//! Seeded messages belong to no turn and cannot be replaced (409).

use axum::http::StatusCode;
use serde_json::Value;

use super::body::{ChatRequest, Trigger};
use super::messages::ui_messages;
use super::routes::segment_events;
use crate::chat::error::Refusal;
use crate::chat::peer::ViewPeer;
use crate::chat::request::Asked;
use crate::http::status_text;

/// The turn the request replaces (`None`: nothing to replace, a plain
/// submit), or the refusal.
pub async fn replaced_turn(
    peer: &mut ViewPeer,
    asked: &Asked,
    req: &ChatRequest,
) -> Result<Option<String>, Refusal> {
    let events = segment_events(peer, asked).await?;
    let messages = ui_messages(&events);
    pick(&messages, req).map_err(|why| status_text(StatusCode::CONFLICT, &why).into())
}

/// The choice itself, over the transcript's UI messages.
fn pick(messages: &[Value], req: &ChatRequest) -> Result<Option<String>, String> {
    let turn_of = |m: &Value| {
        m["metadata"]["tether"]["turnId"]
            .as_str()
            .map(str::to_string)
    };
    match (req.trigger, req.message_id.as_deref()) {
        (Trigger::Regenerate, Some(id)) => {
            let m = messages
                .iter()
                .find(|m| m["id"] == id && m["role"] == "assistant")
                .ok_or_else(|| format!("message {id} is not an answer of this chat"))?;
            turn_of(m)
                .map(Some)
                .ok_or_else(|| format!("message {id} was seeded: it belongs to no turn"))
        }
        (Trigger::Regenerate, None) => {
            let m = messages
                .iter()
                .rev()
                .find(|m| m["role"] == "assistant")
                .ok_or("the chat has no answer to regenerate")?;
            turn_of(m)
                .map(Some)
                .ok_or_else(|| "the last answer was seeded: it belongs to no turn".to_string())
        }
        (Trigger::Submit, Some(id)) => {
            let users: Vec<&Value> = messages.iter().filter(|m| m["role"] == "user").collect();
            let m = users
                .iter()
                .find(|m| m["id"] == id)
                .or_else(|| users.get(req.user_messages().checked_sub(1)?))
                .ok_or_else(|| format!("message {id} is not a prompt of this chat"))?;
            let turn = m["id"]
                .as_str()
                .and_then(|id| id.strip_suffix("-user"))
                .ok_or_else(|| format!("message {id} was seeded: it belongs to no turn"))?;
            Ok(Some(turn.to_string()))
        }
        (Trigger::Submit, None) => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::event::ev;
    use serde_json::json;

    fn transcript() -> Vec<Value> {
        ui_messages(&[
            ev("message.user", Some(2), None, json!({"text": "seeded"})),
            ev(
                "message.complete",
                Some(3),
                None,
                json!({"text": "seeded a", "status": "complete"}),
            ),
            ev("message.user", Some(4), Some("t_1"), json!({"text": "q1"})),
            ev(
                "message.complete",
                Some(5),
                Some("t_1"),
                json!({"text": "a1", "status": "complete"}),
            ),
            ev("message.user", Some(6), Some("t_2"), json!({"text": "q2"})),
            ev(
                "message.complete",
                Some(7),
                Some("t_2"),
                json!({"text": "a2", "status": "complete"}),
            ),
        ])
    }

    fn req(trigger: &str, message_id: Option<&str>, users: usize) -> ChatRequest {
        let messages: Vec<Value> = (0..users)
            .map(|i| json!({"id": format!("c{i}"), "role": "user", "parts": [{"type": "text", "text": "q"}]}))
            .collect();
        serde_json::from_value(
            json!({"id": "c", "trigger": trigger, "messageId": message_id, "messages": messages}),
        )
        .expect("request")
    }

    #[test]
    fn regenerate_replaces_the_named_or_the_last_answer() {
        let t = transcript();
        assert_eq!(
            pick(&t, &req("regenerate-message", None, 3)),
            Ok(Some("t_2".into()))
        );
        assert_eq!(
            pick(&t, &req("regenerate-message", Some("t_1"), 2)),
            Ok(Some("t_1".into()))
        );
        assert!(
            pick(&t, &req("regenerate-message", Some("msg-3"), 1)).is_err(),
            "seeded"
        );
        assert!(pick(&t, &req("regenerate-message", Some("t_9"), 1)).is_err());
        assert!(pick(&[], &req("regenerate-message", None, 1)).is_err());
    }

    #[test]
    fn an_edit_replaces_the_prompts_turn() {
        let t = transcript();
        assert_eq!(
            pick(&t, &req("submit-message", Some("t_1-user"), 2)),
            Ok(Some("t_1".into()))
        );
        // An id the client made: the prompt at the same place.
        assert_eq!(
            pick(&t, &req("submit-message", Some("abc"), 3)),
            Ok(Some("t_2".into()))
        );
        assert!(
            pick(&t, &req("submit-message", Some("abc"), 1)).is_err(),
            "seeded"
        );
        assert!(pick(&t, &req("submit-message", Some("abc"), 7)).is_err());
        assert_eq!(pick(&t, &req("submit-message", None, 3)), Ok(None));
    }
}
