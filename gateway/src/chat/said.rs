//! What both front-ends' requests carry: the conversation as the client
//! holds it, whose last message is the prompt and whose earlier messages
//! seed the chat's session when it is created. Each protocol says how its
//! message reads ([`Said`]); the rules are one.

use tether_protocol::{SeedMessage, SeedRole};

/// One message of a front-end's request.
pub trait Said {
    /// Its role as a seed takes it; `None` for one tether has no place for
    /// (a tool result, activity, reasoning), which is read and skipped.
    fn seed_role(&self) -> Option<SeedRole>;

    /// Its text, in order; empty when it has none.
    fn text(&self) -> String;
}

/// The prompt: the last message, a user message with text. `not_user` is
/// what a client is told when the last message is someone else's.
pub fn prompt<M: Said>(messages: &[M], not_user: &'static str) -> Result<String, &'static str> {
    let last = messages
        .last()
        .ok_or("messages is empty: there is no prompt")?;
    if last.seed_role() != Some(SeedRole::User) {
        return Err(not_user);
    }
    let text = last.text();
    if text.is_empty() {
        return Err("the prompt has no text");
    }
    Ok(text)
}

/// The messages before the prompt that have a role and text, as a new
/// session's seed.
pub fn seed<M: Said>(messages: &[M]) -> Vec<SeedMessage> {
    let before = messages.len().saturating_sub(1);
    messages[..before]
        .iter()
        .filter_map(|m| {
            let role = m.seed_role()?;
            let text = m.text();
            (!text.is_empty()).then_some(SeedMessage { role, text })
        })
        .collect()
}
