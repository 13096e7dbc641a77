//! A queued delta that later deltas of the same stream can be merged into
//! while the peer is behind (PROTOCOL 1.8, "Delta coalescing").

use std::sync::Arc;

use bytes::Bytes;

use crate::event::DeltaMeta;

/// A queued delta and the text of the deltas merged into it since.
#[derive(Debug)]
pub(super) struct QueuedDelta {
    /// The first delta's frame, written as is when nothing was merged.
    frame: Bytes,
    meta: Arc<DeltaMeta>,
    /// Text of the deltas merged behind the first one, in order. Kept as
    /// text and encoded once when the writer takes the item, so merging
    /// `n` deltas costs O(total text), not `n` re-encodings.
    merged: String,
    /// Bytes this item counts against the bound.
    counted: usize,
}

impl QueuedDelta {
    pub(super) fn new(frame: Bytes, meta: Arc<DeltaMeta>) -> QueuedDelta {
        QueuedDelta {
            counted: frame.len(),
            frame,
            meta,
            merged: String::new(),
        }
    }

    /// Bytes this item counts against the bound: its frame and every text
    /// merged into it since.
    pub(super) fn counted(&self) -> usize {
        self.counted
    }

    /// Whether `next` is the delta right after the text this item carries.
    pub(super) fn continued_by(&self, next: &DeltaMeta) -> bool {
        self.meta.continued_by(next, self.text_len())
    }

    /// Joins `next`'s text (the caller checked `continued_by` and the
    /// bound); returns the bytes added.
    pub(super) fn merge(&mut self, next: &DeltaMeta) -> usize {
        let len = next.text.len();
        self.merged.push_str(&next.text);
        self.counted += len;
        len
    }

    /// Offset just past the text this item carries now.
    fn text_len(&self) -> u64 {
        (self.meta.text.len() + self.merged.len()) as u64
    }

    pub(super) fn into_frame(self) -> Bytes {
        if self.merged.is_empty() {
            return self.frame;
        }
        let mut text = String::with_capacity(self.meta.text.len() + self.merged.len());
        text.push_str(&self.meta.text);
        text.push_str(&self.merged);
        self.meta.frame_with_text(&text)
    }
}
