//! A turn's history as it travels: the JSON array of `Message`s, kept as
//! text from the session that encodes it to the engine that reads it.
//!
//! Every `turn.start` carries the whole current segment, so in a long
//! session it is most of every turn's bytes. The session encodes each
//! message once, when it is noted, and hands out the prefix before a
//! prompt; the host supervisor writes it as is; the host loop passes it on
//! undecoded; only an engine that reads the history (openai, command)
//! decodes it, with [`History::messages`]. Echo never does.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;

use crate::methods::Message;

/// A JSON array of [`Message`]s, as text.
#[derive(Debug, Clone)]
pub struct History(Box<RawValue>);

impl History {
    /// The empty history, `[]`.
    pub fn empty() -> Self {
        // "[]" is valid JSON: from_string cannot fail on it.
        History(
            RawValue::from_string("[]".to_owned()).unwrap_or_else(|_| RawValue::NULL.to_owned()),
        )
    }

    /// Encodes `messages` (tests, and the rare caller that holds them).
    pub fn from_messages(messages: &[Message]) -> Self {
        serde_json::value::to_raw_value(messages)
            .map(History)
            .unwrap_or_else(|_| Self::empty())
    }

    /// `text`, if it is a JSON array (its items are checked when an engine
    /// reads them, by [`History::messages`]).
    pub fn from_array_text(text: String) -> Option<Self> {
        if !text.trim_start().starts_with('[') {
            return None;
        }
        RawValue::from_string(text).ok().map(History)
    }

    /// Raw JSON read straight from a line, if it is an array.
    pub fn from_raw(raw: Box<RawValue>) -> Option<Self> {
        raw.get().starts_with('[').then_some(History(raw))
    }

    /// The history's messages; `Err` when what was sent is not an array of
    /// `Message`s (an engine then fails the turn).
    pub fn messages(&self) -> Result<Vec<Message>, serde_json::Error> {
        serde_json::from_str(self.0.get())
    }

    /// The JSON text.
    pub fn as_json(&self) -> &str {
        self.0.get()
    }
}

impl Default for History {
    fn default() -> Self {
        Self::empty()
    }
}

/// Two histories are equal when their texts are: the same messages
/// encoded alike (tests compare frames).
impl PartialEq for History {
    fn eq(&self, other: &Self) -> bool {
        self.0.get() == other.0.get()
    }
}

impl Serialize for History {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

/// Decodes the messages and encodes them again: this is the path through
/// serde's buffering (an internally tagged enum), where raw text cannot be
/// had. A `turn.start` line is read by [`crate::HostLine::decode`], which
/// takes the array as text without decoding it ([`History::from_raw`]).
impl<'de> Deserialize<'de> for History {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Vec::<Message>::deserialize(deserializer).map(|m| History::from_messages(&m))
    }
}
