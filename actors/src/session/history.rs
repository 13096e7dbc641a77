//! The transcript of the current segment, in memory while turns need it.
//!
//! A turn's host needs the history before its prompt; reading it from the
//! store for every turn would put the disk on the turn's path. The session
//! loads the segment once (on a task, when the first turn or compression
//! needs it) and then keeps it current from the events it emits. Idle
//! sessions that never run a turn never load it. It is kept encoded
//! (`encoded_history.rs`): a turn copies its history, never rebuilds it.

use ractor::ActorRef;
use tether_protocol::{EventType, History, Message, RpcError};
use tether_store::EventRow;

use super::encoded_history::EncodedHistory;
use super::turns::dedupe::{keyed, Dedupe, Seen};
use super::{SessionMsg, SessionState};
use crate::transcript::{message_from_row, messages_from_rows, TurnError};

/// The segment in memory, and what an assistant message needs from the
/// events before it.
#[derive(Debug, Default)]
pub(crate) struct Transcript {
    segment: Segment,
    /// The last `error` event of a turn: its `message.complete` comes next
    /// and carries the message (as [`messages_from_rows`] does from the
    /// store), so both paths derive the same transcript.
    turn_error: Option<TurnError>,
    /// The prompts' `dedupe_key`s, derived from the same events
    /// (`turns/dedupe.rs`); trusted once the segment is in memory.
    pub(super) dedupe: Dedupe,
}

/// What a segment read from the store gives: its messages, and the
/// `dedupe_key`s of its prompts.
#[derive(Debug)]
pub(crate) struct LoadedSegment {
    messages: Vec<Message>,
    keys: Vec<(String, Seen)>,
}

#[derive(Debug, Default)]
enum Segment {
    #[default]
    NotLoaded,
    /// The store read of everything committed so far is under way;
    /// messages emitted after that are collected here. `reset` means a
    /// compaction happened meanwhile: what the store returns is the old
    /// segment.
    Loading {
        buffer: Vec<Message>,
        reset: bool,
    },
    Ready(EncodedHistory),
}

impl Transcript {
    /// Keeps the in-memory transcript current with an emitted event; the
    /// message it is, if it is one.
    pub(super) fn note(&mut self, row: &EventRow, kind: EventType) -> Option<Message> {
        if let Some(e) = TurnError::of(row) {
            self.turn_error = Some(e);
        }
        self.dedupe.note_row(row);
        if !kind.is_transcript() {
            return None;
        }
        let message = message_from_row(row, self.turn_error.take().as_ref())?;
        if let Some(turn) = crate::transcript::replaced_turn(row) {
            // Only accepted with the segment in memory (`replace.rs`), so
            // there is always one to cut here.
            if let Segment::Ready(encoded) = &mut self.segment {
                if let Some(seq) = encoded.first_of_turn(&turn) {
                    encoded.truncate_from(seq);
                }
            }
        }
        let compaction = kind == EventType::SessionCompacted;
        match &mut self.segment {
            Segment::NotLoaded => {}
            Segment::Loading { buffer, reset, .. } => {
                if compaction {
                    buffer.clear();
                    *reset = true;
                }
                buffer.push(message.clone());
            }
            Segment::Ready(encoded) => {
                if compaction {
                    encoded.clear();
                }
                encoded.push(&message);
            }
        }
        Some(message)
    }
}

impl SessionState {
    /// The history a host reads for a prompt at seq `before`, if the
    /// transcript is in memory.
    pub(super) fn history_before(&self, before: u64) -> Option<History> {
        match &self.transcript.segment {
            Segment::Ready(encoded) => Some(encoded.before(before)),
            _ => None,
        }
    }

    /// The seq of turn `turn`'s first message in the segment and how many
    /// messages come before it; `None` when the transcript is not in
    /// memory, `Some(None)` when the segment holds no message of the turn.
    pub(super) fn replace_point(
        &self,
        turn: &tether_protocol::TurnId,
    ) -> Option<Option<(u64, u64)>> {
        match &self.transcript.segment {
            Segment::Ready(encoded) => Some(
                encoded
                    .first_of_turn(turn)
                    .map(|seq| (seq, encoded.count_before(seq) as u64)),
            ),
            _ => None,
        }
    }

    /// Whether the segment is in memory (and with it every recent
    /// `dedupe_key`).
    pub(super) fn history_ready(&self) -> bool {
        matches!(self.transcript.segment, Segment::Ready(_))
    }

    /// Every message of the segment, if the transcript is in memory.
    pub(super) fn history_messages(&self) -> Option<Vec<Message>> {
        match &self.transcript.segment {
            Segment::Ready(encoded) => Some(encoded.messages()),
            _ => None,
        }
    }

    /// Starts loading the segment from the store (once).
    pub(super) fn load_transcript(&mut self, myself: &ActorRef<SessionMsg>) {
        if !matches!(self.transcript.segment, Segment::NotLoaded) {
            return;
        }
        // Committed events are in the store (the segment as of `upto`); the
        // ones still pending are taken from memory so nothing falls between
        // the two. None of them is a compaction: one is only made from a
        // transcript in memory, which is never dropped once loaded.
        let upto = self.commit.committed_seq();
        let buffer = self
            .commit
            .pending_durable()
            .filter_map(|d| d.message.clone())
            .collect();
        self.transcript.segment = Segment::Loading {
            buffer,
            reset: false,
        };
        let reader = self.ctx.reader.clone();
        let id = self.id.clone();
        let myself = myself.clone();
        tokio::spawn(async move {
            let result = reader
                .segment_events(&id, upto)
                .await
                .map(|rows| LoadedSegment {
                    messages: messages_from_rows(&rows),
                    keys: rows.iter().filter_map(keyed).collect(),
                })
                .map_err(RpcError::from);
            let _ = myself.cast(SessionMsg::TranscriptLoaded { result });
        });
    }

    pub(super) fn transcript_loaded(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        result: Result<LoadedSegment, RpcError>,
    ) {
        let Segment::Loading { buffer, reset, .. } = std::mem::take(&mut self.transcript.segment)
        else {
            return;
        };
        match result {
            Ok(LoadedSegment { mut messages, keys }) => {
                if reset {
                    messages.clear();
                }
                messages.extend(buffer);
                // Keys of a segment a compaction closed meanwhile stay:
                // a compaction ends no prompt's window.
                self.transcript.dedupe.merge_older(keys);
                self.transcript.segment = Segment::Ready(EncodedHistory::from_messages(&messages));
                self.dispatch_turn(myself);
                self.resume_pending_compress(myself);
                self.resume_pending_submits(myself);
            }
            Err(e) => {
                tracing::warn!(session_id = %self.id, error = %e, "transcript load failed");
                self.transcript.segment = Segment::NotLoaded;
                if let Some(turn_id) = self.turns.running.as_ref().map(|t| t.tag.turn_id.clone()) {
                    let msg = format!("could not read the session history: {}", e.message);
                    self.finish_turn(
                        myself,
                        &turn_id,
                        tether_protocol::CompleteStatus::Error,
                        None,
                        Some(("storage_unavailable", &msg)),
                    );
                }
                for p in std::mem::take(&mut self.pending_submits) {
                    let _ = p.reply.send(Err(e.clone()));
                }
                if let Some((_, reply)) = self.pending_compress.take() {
                    let _ = reply.send(Err(e));
                }
            }
        }
    }
}
