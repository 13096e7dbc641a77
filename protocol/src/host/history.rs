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
//!
//! A host that keeps histories between turns (`history_cache_bytes` in its
//! `hello`) is sent only what it has not seen: the session also marks where
//! each message ends and a digest of everything up to there ([`Mark`]), so
//! the gateway's host actor can tell that what a host holds is still a
//! prefix of the segment and cut the rest off it ([`History::after`]).

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;

use crate::methods::Message;

/// A JSON array of [`Message`]s, as text, and where the session marked
/// its messages (only a history the session built has marks; none travel
/// on the wire).
#[derive(Debug, Clone)]
pub struct History {
    text: Box<str>,
    marks: Option<Arc<[Mark]>>,
}

/// Where one message of an encoded segment ends, and what came up to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mark {
    /// The byte just past the message, in the items text (without the
    /// array's brackets).
    pub end: usize,
    /// A digest of every message up to and including this one: equal
    /// digests at the same count mean the same prefix, however the
    /// segment was rebuilt since (a session reloaded from the store, a
    /// compaction). Only ever compared within one gateway process.
    pub digest: u64,
}

impl Mark {
    /// The digest after `item`, the encoded message that follows a
    /// prefix whose digest is `before` (0 for the empty prefix).
    pub fn chain(before: u64, item: &str) -> u64 {
        // SipHash with fixed keys: stable within a process, which is all
        // that is asked (a host's holdings never outlive its gateway).
        let mut h = std::collections::hash_map::DefaultHasher::new();
        before.hash(&mut h);
        item.hash(&mut h);
        h.finish()
    }
}

impl History {
    /// The empty history, `[]`.
    pub fn empty() -> Self {
        Self::unmarked("[]".into())
    }

    fn unmarked(text: Box<str>) -> Self {
        History { text, marks: None }
    }

    /// Encodes `messages` (tests, and the rare caller that holds them).
    pub fn from_messages(messages: &[Message]) -> Self {
        serde_json::to_string(messages)
            .map(|text| Self::unmarked(text.into_boxed_str()))
            .unwrap_or_else(|_| Self::empty())
    }

    /// The array of `items`: JSON objects joined by commas, each one as
    /// serde encoded a [`Message`] (the session's own encoding, so it is not
    /// parsed again here: at a few hundred messages that parse was the
    /// largest cost of a turn in the gateway). Whoever reads the line it
    /// goes into parses it anyway: a host checks every line it reads.
    ///
    /// `marks` are where each item ends in `items`, with its digest; an
    /// empty list for no items. Marks that do not fit `items` are dropped
    /// (the history is then sent whole, which is always right).
    pub fn from_encoded(items: &str, marks: &[Mark]) -> Self {
        let mut text = String::with_capacity(items.len() + 2);
        text.push('[');
        text.push_str(items);
        text.push(']');
        let fits = match marks.last() {
            Some(last) => last.end == items.len(),
            None => items.is_empty(),
        };
        History {
            text: text.into_boxed_str(),
            marks: fits.then(|| marks.into()),
        }
    }

    /// Raw JSON read straight from a line, if it is an array.
    ///
    /// The text is kept as it came, except for line breaks: the history is
    /// spliced into a line again ([`crate::ToHost::to_line`]), where one
    /// would end the line early. A raw line break in JSON can only be
    /// whitespace between tokens (strings must escape it), so it becomes a
    /// space. Only a hand-made frame has one; the property tests found it.
    pub fn from_raw(raw: Box<RawValue>) -> Option<Self> {
        if !raw.get().starts_with('[') {
            return None;
        }
        let text = Box::<str>::from(raw);
        // memchr: a history can be long, and `str::contains` with a char
        // set walks it a char at a time.
        let text = if memchr::memchr2(b'\n', b'\r', text.as_bytes()).is_some() {
            text.replace(['\n', '\r'], " ").into_boxed_str()
        } else {
            text
        };
        Some(Self::unmarked(text))
    }

    /// How many messages the session marked (`None`: not marked).
    pub fn marked_len(&self) -> Option<usize> {
        self.marks.as_ref().map(|m| m.len())
    }

    /// The digest of the whole history (`None`: not marked).
    pub fn digest(&self) -> Option<u64> {
        let marks = self.marks.as_ref()?;
        Some(marks.last().map_or(0, |m| m.digest))
    }

    /// The messages after the first `count`, as array items (no
    /// brackets), when the first `count` are the prefix whose digest is
    /// `digest`; `None` when they are not (or the history is not marked).
    pub fn after(&self, count: usize, digest: u64) -> Option<&str> {
        let marks = self.marks.as_ref()?;
        let items = &self.text[1..self.text.len() - 1];
        if count == 0 {
            return (digest == 0).then_some(items);
        }
        let mark = marks.get(count - 1)?;
        if mark.digest != digest {
            return None;
        }
        // Past the message and the comma after it, if any.
        Some(items.get(mark.end + 1..).unwrap_or(""))
    }

    /// The history's messages; `Err` when what was sent is not an array of
    /// `Message`s (an engine then fails the turn).
    pub fn messages(&self) -> Result<Vec<Message>, serde_json::Error> {
        serde_json::from_str(&self.text)
    }

    /// The JSON text.
    pub fn as_json(&self) -> &str {
        &self.text
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
        self.text == other.text
    }
}

/// As raw JSON, through serde's raw-value path, which checks the text
/// first. A `turn.start` line is not written this way but spliced
/// ([`crate::ToHost::to_line`]); this is for everything else that
/// serializes a history (an engine's request, tests).
impl Serialize for History {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let raw =
            RawValue::from_string(self.text.to_string()).map_err(serde::ser::Error::custom)?;
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
