//! A front-end's chat or thread id, and the tether session it names.
//!
//! The id is the client's (the AI SDK's chat `id`, AG-UI's `threadId`).
//! Within a profile it names exactly one session, whose id is derived from
//! the profile and the chat id: `s_chat_` and 32 lower-case hex digits of
//! SHA-256 over both. Deriving it needs no table beside the sessions: the
//! first request creates the session under that id, every later one finds
//! it there, and two profiles' "chat-1" are two sessions. The same id
//! names the same session on both front-end routes.

use sha2::{Digest, Sha256};
use tether_protocol::SessionId;

/// The longest chat id accepted, in bytes.
pub const MAX_CHAT_ID: usize = 128;

/// Why a chat id was refused (the route answers 400 with it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChatIdError {
    #[error("the chat id is empty")]
    Empty,
    #[error("the chat id is longer than {MAX_CHAT_ID} bytes")]
    TooLong,
    #[error("the chat id may only hold letters, digits and - _ . : ~ (and is not . or ..)")]
    Character,
}

/// A validated chat id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatId(String);

impl ChatId {
    /// Checks `id`: 1 to [`MAX_CHAT_ID`] bytes of ASCII letters, digits and
    /// `-_.:~`, and not `.` or `..` (which a URL would collapse: the AI
    /// SDK's reconnect URL carries the id as a path segment).
    pub fn parse(id: &str) -> Result<ChatId, ChatIdError> {
        if id.is_empty() {
            return Err(ChatIdError::Empty);
        }
        if id.len() > MAX_CHAT_ID {
            return Err(ChatIdError::TooLong);
        }
        let allowed =
            |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':' | '~');
        if !id.chars().all(allowed) || id == "." || id == ".." {
            return Err(ChatIdError::Character);
        }
        Ok(ChatId(id.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The session this chat is in `profile`.
    pub fn session_id(&self, profile: &str) -> SessionId {
        let mut h = Sha256::new();
        h.update(b"tether chat\0");
        h.update(profile.as_bytes());
        h.update([0]);
        h.update(self.0.as_bytes());
        let digest = h.finalize();
        let mut id = String::with_capacity(7 + 32);
        id.push_str("s_chat_");
        for b in &digest[..16] {
            use std::fmt::Write;
            let _ = write!(id, "{b:02x}");
        }
        SessionId::from(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_checked() {
        for good in [
            "chat-1",
            "a",
            "2f9c1e0a-7b1d-4c3e-9a55-0e1f2a3b4c5d",
            "A.b:c~d_e",
            "...",
        ] {
            assert!(ChatId::parse(good).is_ok(), "{good}");
        }
        assert_eq!(ChatId::parse(""), Err(ChatIdError::Empty));
        assert_eq!(ChatId::parse(&"x".repeat(129)), Err(ChatIdError::TooLong));
        assert!(ChatId::parse(&"x".repeat(128)).is_ok());
        for bad in [".", "..", "a b", "a/b", "a%2F", "é", "a\0", "a?b", "a#b"] {
            assert_eq!(ChatId::parse(bad), Err(ChatIdError::Character), "{bad:?}");
        }
    }

    #[test]
    fn a_chat_is_one_session_per_profile() {
        let chat = ChatId::parse("chat-1").unwrap();
        let a = chat.session_id("alice");
        assert_eq!(a, chat.session_id("alice"));
        assert_ne!(a, chat.session_id("bob"));
        assert_ne!(a, ChatId::parse("chat-2").unwrap().session_id("alice"));
        // The profile and the id are not just concatenated.
        assert_ne!(
            ChatId::parse("b-c").unwrap().session_id("a"),
            ChatId::parse("c").unwrap().session_id("a-b")
        );
        let s = a.as_str();
        assert_eq!(s.len(), 7 + 32);
        assert!(s.starts_with("s_chat_"));
        assert!(s[7..]
            .chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
    }
}
