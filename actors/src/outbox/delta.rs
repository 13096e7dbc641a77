//! A queued delta that later deltas of the same stream are merged into
//! while it waits (PROTOCOL Part 4, "Delivery budget"), and the latency
//! budget that may hold it back a little so that more can join it.

use std::sync::Arc;

use bytes::Bytes;
use tokio::time::Instant;

use crate::event::DeltaMeta;

/// The largest frame a merge may make: past it a delta starts a frame of
/// its own. Bounds both what one frame makes a client parse at once and
/// how much the head of a queue (which the outbox bound does not count)
/// can grow while it waits.
pub(super) const MAX_MERGED_FRAME: usize = 64 * 1024;

/// A queued delta and the escaped text of the deltas merged into it since.
#[derive(Debug)]
pub(super) struct QueuedDelta {
    /// The first delta's frame, written as is when nothing was merged.
    frame: Bytes,
    meta: Arc<DeltaMeta>,
    /// Escaped text of the deltas merged behind the first one, in order,
    /// spliced into the first frame when the writer takes the item: a
    /// merge costs a copy of the new text, never an encoding.
    merged: Vec<u8>,
    /// Raw text bytes carried: the offset a continuation must have is
    /// `meta.offset + text_len`.
    text_len: u64,
    /// Not written before this instant unless another frame is queued
    /// behind it; `None` once nothing holds it (a budget of 0).
    pub hold_until: Option<Instant>,
}

impl QueuedDelta {
    pub(super) fn new(frame: Bytes, meta: Arc<DeltaMeta>, hold_until: Option<Instant>) -> Self {
        QueuedDelta {
            text_len: meta.text_len,
            frame,
            meta,
            merged: Vec::new(),
            hold_until,
        }
    }

    /// Bytes this item counts against the bound: the frame it will write.
    pub(super) fn counted(&self) -> usize {
        self.frame.len() + self.merged.len()
    }

    /// The bytes `next` (whose frame is `next_frame`) would add if merged,
    /// or `None` when it does not continue this delta or the merged frame
    /// would pass [`MAX_MERGED_FRAME`].
    pub(super) fn would_add(&self, next: &DeltaMeta, next_frame: &[u8]) -> Option<usize> {
        if !self.meta.continued_by(next, self.text_len) {
            return None;
        }
        let add = next.escaped_text(next_frame).len();
        (self.counted() + add <= MAX_MERGED_FRAME).then_some(add)
    }

    /// Joins `next`'s text (the caller checked [`Self::would_add`] and the
    /// bound); returns the bytes added.
    pub(super) fn merge(&mut self, next: &DeltaMeta, next_frame: &[u8]) -> usize {
        let text = next.escaped_text(next_frame);
        self.merged.extend_from_slice(text);
        self.text_len += next.text_len;
        text.len()
    }

    /// Whether the budget still holds this delta back at `now`.
    pub(super) fn held_at(&self, now: Instant) -> bool {
        self.hold_until.is_some_and(|t| t > now)
    }

    pub(super) fn into_frame(self) -> Bytes {
        if self.merged.is_empty() {
            return self.frame;
        }
        self.meta.spliced(&self.frame, &self.merged)
    }
}
