//! The segment's messages kept encoded, so that a `turn.start` copies its
//! history instead of rebuilding it.
//!
//! Every turn sends the whole history before its prompt. Cloning each
//! message and serializing it again for every turn cost O(history)
//! allocations per turn, the cost that grew fastest with a session's
//! length in the turn benchmark. Each message is encoded once, when it is
//! noted; the history before a seq is then a prefix of one string.

use tether_protocol::{History, Message};

/// The messages as JSON objects joined by commas, and where each one ends
/// (with its seq, increasing), so the history before any seq is a prefix.
#[derive(Debug, Default)]
pub(crate) struct EncodedHistory {
    json: String,
    ends: Vec<(u64, usize)>,
}

impl EncodedHistory {
    pub(crate) fn from_messages(messages: &[Message]) -> Self {
        let mut h = EncodedHistory::default();
        for m in messages {
            h.push(m);
        }
        h
    }

    pub(crate) fn push(&mut self, m: &Message) {
        // A `Message` is strings and numbers: it always encodes.
        let Ok(text) = serde_json::to_string(m) else {
            return;
        };
        if !self.json.is_empty() {
            self.json.push(',');
        }
        self.json.push_str(&text);
        self.ends.push((m.seq, self.json.len()));
    }

    pub(crate) fn clear(&mut self) {
        self.json.clear();
        self.ends.clear();
    }

    /// The history a host reads for a prompt at `before`: the messages
    /// with `seq < before`.
    pub(crate) fn before(&self, before: u64) -> History {
        let n = self.ends.partition_point(|(seq, _)| *seq < before);
        let end = n.checked_sub(1).map_or(0, |i| self.ends[i].1);
        History::from_encoded(&self.json[..end])
    }

    /// Every message, decoded (a compression, which is rare).
    pub(crate) fn messages(&self) -> Vec<Message> {
        self.before(u64::MAX).messages().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tether_protocol::MessageRole;

    fn msg(seq: u64, text: &str) -> Message {
        Message {
            seq,
            role: MessageRole::User,
            text: text.into(),
            turn_id: None,
            ts: "2026-12-01T00:00:00.000Z".into(),
            status: None,
            failure_reason: None,
            error: None,
        }
    }

    #[test]
    fn the_history_before_a_seq_is_the_messages_before_it_encoded_as_serde_would() {
        let all = [msg(1, "a \"q\""), msg(4, "b"), msg(9, "c\n")];
        let mut h = EncodedHistory::from_messages(&all);
        for (before, n) in [
            (0, 0),
            (1, 0),
            (2, 1),
            (4, 1),
            (5, 2),
            (9, 2),
            (u64::MAX, 3),
        ] {
            let want = serde_json::to_string(&all[..n]).expect("encodes");
            assert_eq!(h.before(before).as_json(), want, "before {before}");
        }
        assert_eq!(h.messages(), all.to_vec());
        h.clear();
        assert_eq!(h.before(u64::MAX).as_json(), "[]");
    }
}
