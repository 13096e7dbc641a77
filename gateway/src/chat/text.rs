//! How much of a turn's text a stream has sent.
//!
//! Deltas carry the byte offset of their text in the turn's text (PROTOCOL
//! 1.10), so a view can send each byte once whatever reaches it: a delta
//! that repeats text already sent (the text so far of a resume, then the
//! live deltas queued behind it) is cut to what is new, and after a hole
//! (deltas dropped for a slow reader) nothing more is sent until the
//! turn's end, whose whole text supplies the rest. What was sent is
//! therefore always a prefix of the turn's text.

/// The prefix of one text (a turn's answer or its reasoning) sent so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SentText {
    sent: usize,
    /// A delta was missed: wait for the whole text.
    hole: bool,
}

impl SentText {
    /// A stream that has already sent `sent` bytes (a resumed one).
    pub fn from_sent(sent: u64) -> SentText {
        SentText {
            sent: usize::try_from(sent).unwrap_or(usize::MAX),
            hole: false,
        }
    }

    /// Bytes sent so far.
    pub fn sent(&self) -> u64 {
        self.sent as u64
    }

    /// The new part of a delta of `text` at `offset`, if it continues what
    /// was sent and adds to it.
    pub fn delta<'a>(&mut self, offset: u64, text: &'a str) -> Option<&'a str> {
        if self.hole {
            return None;
        }
        let offset = usize::try_from(offset).ok()?;
        if offset > self.sent {
            self.hole = true;
            return None;
        }
        let end = offset.checked_add(text.len())?;
        if end <= self.sent {
            return None;
        }
        // Not at a character boundary: the delta does not line up with
        // what was sent; the turn's end will.
        let Some(new) = text.get(self.sent - offset..) else {
            self.hole = true;
            return None;
        };
        self.sent = end;
        Some(new)
    }

    /// What the turn's whole text adds to what was sent.
    pub fn rest<'a>(&mut self, whole: &'a str) -> Option<&'a str> {
        let new = whole.get(self.sent..).filter(|s| !s.is_empty())?;
        self.sent = whole.len();
        self.hole = false;
        Some(new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_byte_is_sent_once() {
        let mut s = SentText::default();
        assert_eq!(s.delta(0, "hel"), Some("hel"));
        assert_eq!(s.delta(3, "lo "), Some("lo "));
        // A resume's text so far, then a delta queued behind it that
        // repeats part of it.
        assert_eq!(s.delta(0, "hello wo"), Some("wo"));
        assert_eq!(s.delta(6, "wo"), None);
        assert_eq!(s.delta(6, "world"), Some("rld"));
        assert_eq!(s.rest("hello world"), None);
    }

    #[test]
    fn after_a_hole_the_end_supplies_the_rest() {
        let mut s = SentText::default();
        assert_eq!(s.delta(0, "ab"), Some("ab"));
        assert_eq!(s.delta(4, "ef"), None, "cd was dropped");
        assert_eq!(s.delta(6, "gh"), None, "nothing after a hole");
        assert_eq!(s.rest("abcdefgh"), Some("cdefgh"));
        assert_eq!(s.rest("abcdefgh"), None);
    }

    #[test]
    fn never_splits_a_character() {
        // "é" is two bytes.
        let mut s = SentText::default();
        assert_eq!(s.delta(0, "é"), Some("é"));
        assert_eq!(s.delta(0, "éa"), Some("a"));
        let mut s = SentText::from_sent(1);
        assert_eq!(s.delta(0, "éa"), None, "it would split the é");
        assert_eq!(s.sent(), 1);
    }
}
