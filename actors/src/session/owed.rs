//! Completions owed after a failed append.
//!
//! A turn is accepted once its `message.user` is on disk, and from then on
//! it must end with exactly one `message.complete`. When the append that
//! carries that `message.complete` fails (disk full, I/O error), the
//! pipeline drops it with everything after it and rewinds the seq: the
//! turn would end in memory but never on disk, and no peer would ever see
//! its end (until a gateway restart found the turn marker). So the failure
//! path keeps such completions here and emits them again, with backoff,
//! until one is committed. A `message.complete` whose `message.user` failed
//! in the same append is not owed: that prompt was refused with 5070/5071.
//!
//! The turn marker is not cleared on disk while a completion is owed (the
//! patch that clears it failed with the events), so a gateway that dies
//! meanwhile still ends the turn at its next start; and the session is not
//! parked while it owes anything.

use std::collections::HashSet;
use std::time::Duration;

use ractor::ActorRef;
use serde::Deserialize;
use serde_json::value::RawValue;
use tether_protocol::{now_ms, EventType, TraceId, TurnId};
use tracing::{info, warn};

use super::pipeline::DurableFrame;
use super::{SessionMsg, SessionState};
use crate::event::{EventRecord, TurnTag};

/// First retry after a failure; doubled after each failed retry.
const FIRST_RETRY: Duration = Duration::from_millis(250);
/// Retries never wait longer than this.
const MAX_RETRY: Duration = Duration::from_secs(10);

/// The completions a session still owes, and when it tries again.
#[derive(Debug)]
pub(crate) struct Owed {
    completions: Vec<EventRecord>,
    /// Whether a retry timer is running.
    retry_scheduled: bool,
    /// Wait before the next retry.
    backoff: Duration,
}

impl Default for Owed {
    fn default() -> Self {
        Self {
            completions: Vec::new(),
            retry_scheduled: false,
            backoff: FIRST_RETRY,
        }
    }
}

impl Owed {
    pub(crate) fn is_empty(&self) -> bool {
        self.completions.is_empty()
    }
}

/// The parts of an encoded event's params the failure path needs.
#[derive(Deserialize)]
struct Params {
    #[serde(rename = "type")]
    kind: String,
    turn_id: Option<String>,
    trace_id: Option<String>,
    payload: Box<RawValue>,
}

/// The turns that lost durable events of their own (a host's `tool.start`,
/// a `todo.updated`…) in an append that failed: not their prompt (that
/// turn was never accepted) nor their ending (owed, above).
pub(super) fn turns_with_events_dropped(dropped: &[(u64, DurableFrame)]) -> HashSet<String> {
    dropped
        .iter()
        .filter_map(|(_, d)| serde_json::from_str::<Params>(d.params.get()).ok())
        .filter(|p| {
            p.kind != EventType::MessageUser.as_str()
                && p.kind != EventType::MessageComplete.as_str()
        })
        .filter_map(|p| p.turn_id)
        .collect()
}

impl SessionState {
    /// Called with the durable events an append failure dropped: keeps
    /// the completions of accepted turns, and schedules their retry.
    pub(super) fn owe_completions(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        dropped: &[(u64, DurableFrame)],
    ) {
        let dropped: Vec<Params> = dropped
            .iter()
            .filter_map(|(_, d)| serde_json::from_str::<Params>(d.params.get()).ok())
            .collect();
        // Turns whose prompt was in the failed append were never accepted.
        let refused: HashSet<&str> = dropped
            .iter()
            .filter(|p| p.kind == EventType::MessageUser.as_str())
            .filter_map(|p| p.turn_id.as_deref())
            .collect();
        let mut owed = Vec::new();
        for p in &dropped {
            if p.kind != EventType::MessageComplete.as_str() {
                continue;
            }
            let (Some(turn_id), Some(trace_id)) = (&p.turn_id, &p.trace_id) else {
                continue;
            };
            if refused.contains(turn_id.as_str()) {
                continue;
            }
            let tag = TurnTag {
                turn_id: TurnId::from(turn_id.clone()),
                trace_id: TraceId::from(trace_id.clone()),
            };
            let rec = EventRecord::new(EventType::MessageComplete, &p.payload, Some(tag), now_ms());
            warn!(session_id = %self.id, turn_id = %turn_id, "message.complete not written; owed");
            owed.push(rec);
        }
        if owed.is_empty() {
            return;
        }
        self.owed.completions.extend(owed);
        self.schedule_repay(myself);
    }

    fn schedule_repay(&mut self, myself: &ActorRef<SessionMsg>) {
        if self.owed.retry_scheduled {
            return;
        }
        let wait = self.owed.backoff;
        self.owed.backoff = (wait * 2).min(MAX_RETRY);
        self.owed.retry_scheduled = true;
        myself.send_after(wait, || SessionMsg::RepayCompletions);
    }

    /// The retry timer fired: emit every owed completion again. A failure
    /// puts them back here through [`Self::owe_completions`]; a commit
    /// clears the turn marker with them (the patch goes with the append).
    pub(super) fn repay_completions(&mut self, myself: &ActorRef<SessionMsg>) {
        self.owed.retry_scheduled = false;
        self.pay_owed_now();
        self.send_unsent(myself);
    }

    /// Emits every owed completion now, without waiting for the retry
    /// (the session's work is ending: they go out with its last append).
    pub(super) fn pay_owed_now(&mut self) {
        let owed = std::mem::take(&mut self.owed.completions);
        if owed.is_empty() {
            return;
        }
        info!(session_id = %self.id, count = owed.len(), "writing owed message.complete");
        for rec in owed {
            self.emit(rec);
        }
        self.turns.marker_dirty = true;
    }

    /// An append was committed: the store takes writes again, so the next
    /// failure starts over from the first retry delay.
    pub(super) fn store_recovered(&mut self) {
        if self.owed.is_empty() {
            self.owed.backoff = FIRST_RETRY;
        }
    }
}
