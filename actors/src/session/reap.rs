//! The session's side of the reapers: reporting when it is orphaned,
//! adopted or settled, and parking itself when the Registry asks.
//!
//! The reaper's view of a session is only advisory. The session decides a
//! park in its own mailbox, where peers, turns and the queue are exact: it
//! refuses with a peer attached, a turn running, a prompt queued, a
//! compression in flight, or events not yet committed.

use ractor::{ActorRef, RpcReplyPort};
use tether_protocol::SessionStatus;
use tether_store::SessionPatch;
use tether_store::StoreError;
use tracing::{debug, info, warn};

use super::{ClusterMsg, SessionMsg, SessionState};
use crate::reaper::{ParkReason, ReaperMsg};
use crate::store_writer::StoreWriterMsg;

/// What the reaper was last told about this session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Reported {
    orphaned: bool,
    busy: bool,
}

impl SessionState {
    /// Work the reapers must not interrupt by parking.
    pub(super) fn busy(&self) -> bool {
        self.turns.running.is_some()
            || !self.turns.queue.is_empty()
            || self.compacting.is_some()
            || self.pending_compress.is_some()
            || !self.pending_submits.is_empty()
            || !self.owed.is_empty()
    }

    /// Tells the reaper about a change of orphaned/busy since the last
    /// report (`force` reports to a reaper that knows nothing yet).
    pub(super) fn report_to_reaper(&mut self, force: bool) {
        if matches!(self.status, SessionStatus::Closed | SessionStatus::Parked) {
            return;
        }
        let now = Reported {
            orphaned: self.peers.is_empty(),
            busy: self.busy(),
        };
        self.gauges
            .busy
            .store(now.busy, std::sync::atomic::Ordering::Relaxed);
        let before = if force { None } else { self.reported };
        if before == Some(now) {
            return;
        }
        let Some(reaper) = self.ctx.reaper() else {
            // No reaper now; the next one asks every session to report.
            self.reported = None;
            return;
        };
        let key = (self.profile.clone(), self.id.clone());
        let msg = match (before, now.orphaned) {
            (Some(b), true) if b.orphaned => {
                if b.busy && !now.busy {
                    ReaperMsg::Settled { key }
                } else {
                    // Busy again while orphaned (a submit without attach):
                    // the reaper reads `busy` from the gauges when it looks.
                    self.reported = Some(now);
                    return;
                }
            }
            (_, true) => ReaperMsg::Orphaned {
                key,
                gauges: self.gauges.clone(),
            },
            (Some(b), false) if !b.orphaned => {
                self.reported = Some(now);
                return;
            }
            (_, false) => ReaperMsg::Adopted { key },
        };
        self.reported = Some(now);
        let _ = reaper.cast(msg);
    }

    /// The Registry asks to park. With `Stale`, the silent running turn is
    /// interrupted first (and the park itself comes once that is committed).
    pub(super) fn park(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        reason: ParkReason,
        reply: RpcReplyPort<bool>,
    ) {
        if !self.peers.is_empty() || self.status == SessionStatus::Closed {
            let _ = reply.send(false);
            return;
        }
        if reason == ParkReason::Stale && self.turns.running.is_some() {
            info!(session_id = %self.id, "orphaned turn silent past the staleness window; interrupting");
            self.stop_turns(myself, None);
            let _ = reply.send(false);
            return;
        }
        if self.busy() || !self.commit.is_quiet() {
            let _ = reply.send(false);
            return;
        }
        let Some(writer) = self.ctx.writer() else {
            let _ = reply.send(false);
            return;
        };
        // Everything is committed; only the status is left to write. The
        // writer is FIFO, so the next load's barrier comes after this patch.
        self.set_status(SessionStatus::Parked);
        if self.ctx.cluster.is_some() {
            // On a cluster the store has the last word: a peer attached on
            // another node refuses the park (`InUse`), so the answer waits
            // for the patch (the registry holds requests meanwhile).
            let (written, parked) = tokio::sync::oneshot::channel();
            let _ = writer.cast(StoreWriterMsg::Patch {
                session_id: self.id.clone(),
                patch: SessionPatch {
                    status: Some(SessionStatus::Parked),
                    ..SessionPatch::default()
                },
                reply: Some(written.into()),
            });
            let me = myself.clone();
            tokio::spawn(async move {
                let result = parked.await.unwrap_or_else(|_| {
                    Err(StoreError::Unavailable(
                        "the park's patch was dropped".into(),
                    ))
                });
                let _ = me.cast(SessionMsg::Cluster(ClusterMsg::ParkWritten {
                    result,
                    reason,
                    reply,
                }));
            });
            return;
        }
        let _ = writer.cast(StoreWriterMsg::Patch {
            session_id: self.id.clone(),
            patch: SessionPatch {
                status: Some(SessionStatus::Parked),
                ..SessionPatch::default()
            },
            reply: None,
        });
        self.parked(myself, reason, reply);
    }

    /// The park is decided: say so and stop.
    fn parked(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        reason: ParkReason,
        reply: RpcReplyPort<bool>,
    ) {
        self.gauges
            .parked
            .store(true, std::sync::atomic::Ordering::Release);
        info!(session_id = %self.id, reason = reason.as_str(), latest_seq = self.commit.committed_seq(), "session parked");
        let _ = reply.send(true);
        myself.stop(Some("parked".into()));
    }

    /// A cluster's park patch was answered. Written: the session is
    /// released (so the next node to need it claims it at once instead of
    /// after a lease; releasing before the patch would have made the
    /// writer refuse it) and stops. Refused (`InUse`: peers on another
    /// node; or the store failed): it stays live.
    pub(super) fn park_written(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        result: Result<(), StoreError>,
        reason: ParkReason,
        reply: RpcReplyPort<bool>,
    ) {
        match result {
            Ok(()) => {
                if let Some(cluster) = self.ctx.cluster.clone() {
                    if let Some(fence) = cluster.fence(&self.id) {
                        let id = self.id.clone();
                        tokio::spawn(async move {
                            if let Err(e) = cluster.release(&id, fence).await {
                                warn!(session_id = %id, node_id = %cluster.node_id(), error = %e, "could not release a parked session; it moves after a lease");
                            }
                        });
                    }
                }
                self.parked(myself, reason, reply);
            }
            Err(e) => {
                match &e {
                    StoreError::InUse { peers, .. } => {
                        debug!(session_id = %self.id, peers, "not parked: peers attached on other nodes")
                    }
                    _ => warn!(session_id = %self.id, error = %e, "park not written; staying live"),
                }
                self.set_status(SessionStatus::Idle);
                let _ = reply.send(false);
            }
        }
    }
}
