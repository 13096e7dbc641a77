//! A session erased by another node, seen from a follower: its owner ran
//! `session.delete` (sent there, forwarded by this node or by any other).
//! Its peers here get `session.deleted` and it stops, as the owner's copy
//! did (`delete.rs`); from then on this node answers 4001 for it like any
//! unknown session. (A closed session is held live nowhere: one erased
//! closed, by a delete or by retention, has nobody to tell.)
//!
//! The store notifies every node in the transaction that removes the row
//! (`tether_erased`); the notification is only a hint, so the row is read
//! first and only its absence counts. A resync after the listener
//! reconnected wakes every follower the same way: a notification lost
//! meanwhile is made up.

use ractor::ActorRef;
use tracing::{debug, info};

use super::ClusterMsg;
use crate::session::{SessionMsg, SessionState};

impl SessionState {
    /// A notification (or a resync) says the session may have been erased:
    /// its row is read, off the mailbox. A session deleting itself is
    /// answered by its own erase.
    pub(in crate::session) fn erased_wake(&mut self, myself: &ActorRef<SessionMsg>) {
        if self.deleting.is_some() {
            return;
        }
        let reader = self.ctx.reader.clone();
        let profile = self.profile.clone();
        let id = self.id.clone();
        let me = myself.clone();
        tokio::spawn(async move {
            let gone = match reader.get_session(&profile, &id).await {
                Ok(row) => row.is_none(),
                Err(e) => {
                    // The next notification or resync reads again.
                    debug!(session_id = %id, error = %e, "could not read an erased session's row");
                    false
                }
            };
            if gone {
                let _ = me.cast(SessionMsg::Cluster(ClusterMsg::ErasedElsewhere));
            }
        });
    }

    /// The row is gone: erased elsewhere. Unless this session started its
    /// own delete meanwhile (which answers for itself), its peers are told
    /// and it stops.
    pub(in crate::session) fn erased_seen(&mut self, myself: &ActorRef<SessionMsg>) {
        if self.deleting.is_some() {
            return;
        }
        info!(session_id = %self.id, following = self.following(), "session erased by another node");
        self.erased_elsewhere(myself);
    }
}
