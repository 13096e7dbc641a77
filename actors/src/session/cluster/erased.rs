//! A session erased, all of it or its older events, by another node, seen
//! from a node that holds it live.
//!
//! - Deleted: a follower whose owner ran `session.delete` (sent there,
//!   forwarded by this node or by any other). Its peers here get
//!   `session.deleted` and it stops, as the owner's copy did (`delete.rs`);
//!   from then on this node answers 4001 for it like any unknown session.
//!   (A closed session is held live nowhere: one erased closed, by a delete
//!   or by retention, has nobody to tell.)
//! - Trimmed: the retention sweep, on whichever node holds the lease,
//!   removed events before a new `retained_from_seq`. The owner or follower
//!   here forgets them as the sweeping node's own copy does
//!   (`crate::retention`), so both answer `truncated` alike.
//!
//! The store notifies every node in the transaction that removes the row or
//! moves `retained_from_seq` (`tether_erased`); the notification is only a
//! hint, so the row is read and only what it says counts. A resync after
//! the listener reconnected wakes every follower the same way: a
//! notification lost meanwhile is made up for them (an owner that missed
//! one learns of a trim at the next, or when it is next brought live).

use ractor::ActorRef;
use tracing::debug;

use super::ClusterMsg;
use crate::session::{SessionMsg, SessionState};

impl SessionState {
    /// A notification (or a resync) says the session may have been erased
    /// or trimmed: its row is read, off the mailbox. A session deleting
    /// itself is answered by its own erase.
    pub(in crate::session) fn erased_wake(&mut self, myself: &ActorRef<SessionMsg>) {
        if self.deleting.is_some() {
            return;
        }
        let reader = self.ctx.reader.clone();
        let profile = self.profile.clone();
        let id = self.id.clone();
        let me = myself.clone();
        tokio::spawn(async move {
            let msg = match reader.get_session(&profile, &id).await {
                Ok(None) => SessionMsg::Cluster(ClusterMsg::ErasedElsewhere),
                Ok(Some(row)) => SessionMsg::Trimmed {
                    retained_from_seq: row.retained_from_seq,
                },
                Err(e) => {
                    // The next notification or resync reads again.
                    debug!(session_id = %id, error = %e, "could not read an erased session's row");
                    return;
                }
            };
            let _ = me.cast(msg);
        });
    }
}
