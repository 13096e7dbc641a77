//! A turn's history as it travels: the JSON array of `Message`s, kept as
//! text from the session that encodes it to the engine that reads it.
//!
//! Every `turn.start` carries the whole current segment, so in a long
//! session it is most of every turn's bytes. The session encodes each
//! message once, when it is noted, and hands out the prefix before a
//! prompt without parsing it again ([`History::from_encoded`]); the host
//! actor splices it into the line as is ([`crate::ToHost::to_line`]);
//! the host loop takes it from the line undecoded; only an engine that
//! reads the history (openai, command) decodes it, with
//! [`History::messages`]. Echo never does.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;

use crate::methods::Message;

/// A JSON array of [`Message`]s, as text.
#[derive(Debug, Clone)]
pub struct History(Box<str>);

impl History {
    /// The empty history, `[]`.
    pub fn empty() -> Self {
        History("[]".into())
    }

    /// Encodes `messages` (tests, and the rare caller that holds them).
    pub fn from_messages(messages: &[Message]) -> Self {
        serde_json::to_string(messages)
            .map(|text| History(text.into_boxed_str()))
            .unwrap_or_else(|_| Self::empty())
    }

    /// The array of `items`: JSON objects joined by commas, each one as
    /// serde encoded a [`Message`] (the session's own encoding, so it is not
    /// parsed again here: at a few hundred messages that parse was the
    /// largest cost of a turn in the gateway). Whoever reads the line it
    /// goes into parses it anyway: a host checks every line it reads.
    pub fn from_encoded(items: &str) -> Self {
        let mut text = String::with_capacity(items.len() + 2);
        text.push('[');
        text.push_str(items);
        text.push(']');
        History(text.into_boxed_str())
    }

    /// Raw JSON read straight from a line, if it is an array.
    pub fn from_raw(raw: Box<RawValue>) -> Option<Self> {
        raw.get()
            .starts_with('[')
            .then(|| History(Box::<str>::from(raw)))
    }

    /// The history's messages; `Err` when what was sent is not an array of
    /// `Message`s (an engine then fails the turn).
    pub fn messages(&self) -> Result<Vec<Message>, serde_json::Error> {
        serde_json::from_str(&self.0)
    }

    /// The JSON text.
    pub fn as_json(&self) -> &str {
        &self.0
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
        self.0 == other.0
    }
}

/// As raw JSON, through serde's raw-value path, which checks the text
/// first. A `turn.start` line is not written this way but spliced
/// ([`crate::ToHost::to_line`]); this is for everything else that
/// serializes a history (an engine's request, tests).
impl Serialize for History {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let raw = RawValue::from_string(self.0.to_string()).map_err(serde::ser::Error::custom)?;
        raw.serialize(serializer)
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
