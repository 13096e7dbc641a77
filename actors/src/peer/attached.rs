//! The sessions a peer is attached to, to detach from when it goes.
//!
//! A list, not a hash map: nearly every peer is attached to one session or
//! a few, and this is held by every idle connection. A hash map's first
//! insert allocates four buckets (about 250 bytes); a list of one entry,
//! one. Lookups are linear in the sessions this one peer attached to.

use ractor::ActorRef;
use tether_protocol::SessionId;

use crate::session::SessionMsg;

/// (profile, session) → the session's actor.
type Key = (String, SessionId);

#[derive(Default)]
pub struct Attached {
    entries: Vec<(Key, ActorRef<SessionMsg>)>,
}

impl Attached {
    /// Records an attachment, replacing the actor of one already recorded.
    pub fn insert(&mut self, key: Key, actor: ActorRef<SessionMsg>) {
        match self.entries.iter_mut().find(|(k, _)| *k == key) {
            Some(entry) => entry.1 = actor,
            None => {
                // One at a time: most peers never attach to a second.
                self.entries.reserve_exact(1);
                self.entries.push((key, actor));
            }
        }
    }

    /// Forgets an attachment, answering the session's actor if it was one.
    pub fn remove(&mut self, key: &Key) -> Option<ActorRef<SessionMsg>> {
        let at = self.entries.iter().position(|(k, _)| k == key)?;
        Some(self.entries.swap_remove(at).1)
    }

    /// Whether the peer is attached to no session.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Forgets every attachment, answering their sessions' actors.
    pub fn drain(&mut self) -> impl Iterator<Item = ActorRef<SessionMsg>> + '_ {
        self.entries.drain(..).map(|(_, actor)| actor)
    }
}
