//! The segment's messages kept encoded, so that a `turn.start` copies its
//! history instead of rebuilding it.
//!
//! Every turn sends the whole history before its prompt. Cloning each
//! message and serializing it again for every turn cost O(history)
//! allocations per turn, the cost that grew fastest with a session's
//! length in the turn benchmark. Each message is encoded once, when it is
//! noted; the history before a seq is then a prefix of one string.
//!
//! Each message is marked with where it ends and a digest of the segment
//! up to it, so that a host that holds an earlier prefix is sent only the
//! rest (`actors/src/host/held.rs`).

use tether_protocol::{History, Mark, Message, TurnId};

/// The messages as JSON objects joined by commas, and where each one ends
/// (with its seq, increasing), so the history before any seq is a prefix.
#[derive(Debug, Default)]
pub(crate) struct EncodedHistory {
    json: String,
    seqs: Vec<u64>,
    marks: Vec<Mark>,
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
        let digest = Mark::chain(self.marks.last().map_or(0, |m| m.digest), &text);
        self.seqs.push(m.seq);
        self.marks.push(Mark {
            end: self.json.len(),
            digest,
        });
    }

    pub(crate) fn clear(&mut self) {
        self.json.clear();
        self.seqs.clear();
        self.marks.clear();
    }

    /// The seq of turn `turn`'s first message, if the segment holds one
    /// (decodes the messages: a replacing prompt, which is rare).
    pub(crate) fn first_of_turn(&self, turn: &TurnId) -> Option<u64> {
        self.messages()
            .into_iter()
            .find(|m| m.turn_id.as_ref() == Some(turn))
            .map(|m| m.seq)
    }

    /// How many messages come before seq `seq`.
    pub(crate) fn count_before(&self, seq: u64) -> usize {
        self.seqs.partition_point(|s| *s < seq)
    }

    /// Drops the messages from seq `seq` on (a replacing prompt).
    pub(crate) fn truncate_from(&mut self, seq: u64) {
        let n = self.count_before(seq);
        let end = n.checked_sub(1).map_or(0, |i| self.marks[i].end);
        self.json.truncate(end);
        self.seqs.truncate(n);
        self.marks.truncate(n);
    }

    /// The history a host reads for a prompt at `before`: the messages
    /// with `seq < before`.
    pub(crate) fn before(&self, before: u64) -> History {
        let n = self.seqs.partition_point(|seq| *seq < before);
        let end = n.checked_sub(1).map_or(0, |i| self.marks[i].end);
        History::from_encoded(&self.json[..end], &self.marks[..n])
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
            let history = h.before(before);
            assert_eq!(history.as_json(), want, "before {before}");
            assert_eq!(history.marked_len(), Some(n), "before {before}");
        }
        // A host that holds the first message is sent the other two.
        let whole = h.before(u64::MAX);
        let one = h.before(2).digest().expect("marked");
        let rest = whole.after(1, one).expect("the first is a prefix");
        assert_eq!(
            format!("[{rest}]"),
            serde_json::to_string(&all[1..]).expect("encodes")
        );
        assert_eq!(whole.after(1, one ^ 1), None, "another first message");
        assert_eq!(whole.after(3, whole.digest().expect("marked")), Some(""));
        assert_eq!(h.messages(), all.to_vec());
        h.clear();
        assert_eq!(h.before(u64::MAX).as_json(), "[]");
    }

    #[test]
    fn a_truncated_history_is_the_prefix_it_was() {
        let mut a = msg(4, "b");
        a.turn_id = Some("t_1".into());
        let all = [msg(1, "a"), a, msg(9, "c")];
        let mut h = EncodedHistory::from_messages(&all);
        assert_eq!(h.first_of_turn(&"t_1".into()), Some(4));
        assert_eq!(h.first_of_turn(&"t_2".into()), None);
        let prefix = h.before(4);
        h.truncate_from(4);
        assert_eq!(h.before(u64::MAX).as_json(), prefix.as_json());
        assert_eq!(h.before(u64::MAX).digest(), prefix.digest());
        h.push(&msg(10, "d"));
        let want = serde_json::to_string(&[msg(1, "a"), msg(10, "d")]).expect("encodes");
        assert_eq!(h.before(u64::MAX).as_json(), want);
        assert_eq!(h.count_before(u64::MAX), 2);
    }
}
