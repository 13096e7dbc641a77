//! A follower's transient events: the owner's deltas, sent across nodes
//! best effort (`crate::delta_relay`), and the running turn they build.
//!
//! Each batch names the last durable seq the owner had emitted before it;
//! the follower fans it out only once it has relayed that seq (held until
//! then, a bounded few), so a delta never reaches a client before the
//! stored events it followed. From the stored `message.user` and the deltas
//! it saw, the follower knows the turn that runs and its text so far: what
//! a resume here answers as `active_turn`. That text is exact from offset 0
//! up to the first delta that did not cross (a later one at a larger
//! offset is still delivered; clients place text at its offset), and the
//! turn's `message.complete` carries the whole text either way.

use std::collections::VecDeque;
use std::sync::Arc;

use serde::Deserialize;
use tether_protocol::{ActiveTurn, EventType};

use crate::delta_relay::parse_body;
use crate::event::{frame_of, EventRecord, TurnTag};
use crate::session::SessionState;

/// Batches held for a seq not relayed yet, at most; older ones are dropped.
const HELD: usize = 64;

/// What a follower knows of transient events.
#[derive(Debug, Default)]
pub(crate) struct FollowedDeltas {
    /// Batches waiting for their seq, oldest first.
    held: VecDeque<(u64, Vec<EventRecord>)>,
    /// The turn running on the owner, as the stored events and the deltas
    /// that crossed tell it.
    turn: Option<FollowedTurn>,
    /// The last turn whose `message.complete` was relayed: its deltas
    /// (which cross by another path than stored events, and may come
    /// later) are dropped, so none follows its end.
    ended: Option<tether_protocol::TurnId>,
}

#[derive(Debug)]
struct FollowedTurn {
    tag: TurnTag,
    started_at_ms: i64,
    /// The seq of its `message.user`.
    user_seq: Option<u64>,
    /// Text from offset 0, as far as it is known without a hole.
    text: String,
}

impl FollowedDeltas {
    /// A stored event was relayed: the turn it starts or ends.
    pub(in crate::session) fn relayed(&mut self, rec: &EventRecord) {
        match rec.kind {
            EventType::MessageUser => {
                self.turn = rec.turn.clone().map(|tag| FollowedTurn {
                    tag,
                    started_at_ms: rec.ts_ms,
                    user_seq: rec.seq,
                    text: String::new(),
                })
            }
            EventType::MessageComplete => {
                self.turn = None;
                self.ended = rec.turn.as_ref().map(|t| t.turn_id.clone());
            }
            _ => {}
        }
    }

    /// `active_turn` as this follower knows it.
    pub(in crate::session) fn active_turn(&self) -> Option<ActiveTurn> {
        self.turn.as_ref().map(|t| ActiveTurn {
            turn_id: t.tag.turn_id.clone(),
            trace_id: t.tag.trace_id.clone(),
            text: t.text.clone(),
            started_at: tether_protocol::format_ts(t.started_at_ms),
            user_seq: t.user_seq,
        })
    }

    /// A `message.delta` of the running turn extends its text when it
    /// starts where the known text ends.
    fn saw(&mut self, rec: &EventRecord) {
        #[derive(Deserialize)]
        struct Delta<'a> {
            #[serde(borrow)]
            text: std::borrow::Cow<'a, str>,
            offset: u64,
        }
        let Some(turn) = self.turn.as_mut() else {
            return;
        };
        if rec.kind != EventType::MessageDelta || rec.turn.as_ref() != Some(&turn.tag) {
            return;
        }
        if let Ok(d) = serde_json::from_str::<Delta>(rec.payload.get()) {
            if d.offset == turn.text.len() as u64 {
                turn.text.push_str(&d.text);
            }
        }
    }
}

impl SessionState {
    /// A batch of the owner's transient events for this follower.
    pub(in crate::session) fn follow_deltas(&mut self, body: &str) {
        let Some((after, events)) = parse_body(body) else {
            return;
        };
        if self.cluster.following.is_none() {
            return;
        }
        if after <= self.commit.committed_seq() {
            self.fan_out_transients(&events);
            return;
        }
        let held = &mut self.cluster.followed_deltas.held;
        if held.len() >= HELD {
            held.pop_front();
        }
        held.push_back((after, events));
    }

    /// After a stored event was relayed: the batches that waited for it.
    pub(in crate::session) fn release_held_deltas(&mut self) {
        let upto = self.commit.committed_seq();
        while self
            .cluster
            .followed_deltas
            .held
            .front()
            .is_some_and(|(after, _)| *after <= upto)
        {
            if let Some((_, events)) = self.cluster.followed_deltas.held.pop_front() {
                self.fan_out_transients(&events);
            }
        }
    }

    fn fan_out_transients(&mut self, events: &[EventRecord]) {
        for rec in events {
            let ended = &self.cluster.followed_deltas.ended;
            if rec
                .turn
                .as_ref()
                .is_some_and(|t| Some(&t.turn_id) == ended.as_ref())
            {
                continue;
            }
            self.cluster.followed_deltas.saw(rec);
            let frame = frame_of(&rec.params_of(&self.id));
            let delta = rec.delta_meta(&self.id, &frame).map(Arc::new);
            self.fan_out(&frame, crate::session::pipeline::transient_class(delta));
        }
    }
}
