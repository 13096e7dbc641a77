//! `close_on_disconnect` over every node: the owner closes the session
//! once its own last peer has left and a fresh read of the other nodes'
//! counts finds none (the registry's poll, a second late at most, only
//! prompts that read). A follower never closes: its peers count on the
//! owner.

use std::sync::atomic::Ordering;
use std::time::Duration;

use ractor::ActorRef;
use tether_store::cluster::ClusterError;
use tracing::warn;

use super::ClusterMsg;
use crate::session::{SessionMsg, SessionState};

/// How long after a failed read of the other nodes' peers the next one waits.
const RECHECK_LEFT: Duration = Duration::from_secs(1);

impl SessionState {
    /// No peer is left here: reads the other nodes' counts (one read at a
    /// time), which closes the session if they have none either.
    pub(in crate::session) fn check_left_elsewhere(&mut self, myself: &ActorRef<SessionMsg>) {
        let Some(cluster) = self.ctx.cluster.clone() else {
            return;
        };
        if self.cluster.checking_left {
            return;
        }
        self.cluster.checking_left = true;
        let id = self.id.clone();
        let me = myself.clone();
        tokio::spawn(async move {
            let others = cluster
                .others_peers(std::slice::from_ref(&id))
                .await
                .map(|counts| counts.iter().map(|(_, n)| *n).sum());
            let _ = me.cast(SessionMsg::Cluster(ClusterMsg::LeftEverywhere { others }));
        });
    }

    /// The fresh read of the other nodes' peers: none, and none here either,
    /// closes the session. A failed read closes nothing; the next read waits
    /// [`RECHECK_LEFT`] (the store may be down: no read per message).
    pub(in crate::session) fn left_everywhere(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        others: Result<u64, ClusterError>,
    ) {
        if others.is_ok() {
            self.cluster.checking_left = false;
        }
        match others {
            Ok(0) if self.peers.is_empty() && !self.following() => {
                self.close_on_disconnect_now(myself)
            }
            Ok(n) => {
                if n > 0 {
                    self.gauges
                        .other_peers
                        .store(u32::try_from(n).unwrap_or(u32::MAX), Ordering::Relaxed);
                }
            }
            Err(e) => {
                warn!(session_id = %self.id, error = %e, "could not read other nodes' peers; not closing yet");
                // `checking_left` stays set until then.
                myself.send_after(RECHECK_LEFT, || {
                    SessionMsg::Cluster(ClusterMsg::RecheckLeft)
                });
            }
        }
    }

    /// [`RECHECK_LEFT`] after a failed read: `close_if_left` may read again.
    pub(in crate::session) fn recheck_left(&mut self) {
        self.cluster.checking_left = false;
    }
}
