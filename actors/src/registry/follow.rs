//! The registry's side of following (a cluster, docs/ARCHITECTURE.md "Followers"):
//! one `EventListener` per node wakes the follower of each session a
//! notification names (a resync wakes them all), and a poll of the owners
//! every second finds followed sessions whose owner died (a dead node
//! cannot notify anyone), whose follower then takes them over. A forward
//! notification wakes the owner of its session (`session/forwarded.rs`);
//! an erased (or trimmed) session's notification, whichever node holds it
//! live.

use std::time::Duration;

use ractor::ActorRef;
use tether_protocol::SessionId;
use tether_store::cluster::{Cluster, Ownership, Wake};
use tracing::{debug, warn};

use super::{RegistryMsg, RegistryState};
use crate::ctx::Ctx;
use crate::session::{ClusterMsg, SessionMsg};

/// How often the owners of followed sessions are read.
const POLL_EVERY: Duration = Duration::from_secs(1);
/// Backoff after the listener could not (re)connect.
const LISTEN_RETRY: Duration = Duration::from_millis(500);

/// The listener's task and the poll's ticker, both ended with the registry.
pub(super) struct Tasks {
    listener: tokio::task::JoinHandle<()>,
    poll: tokio::task::JoinHandle<()>,
}

impl Drop for Tasks {
    fn drop(&mut self) {
        self.listener.abort();
        self.poll.abort();
    }
}

/// Starts listening and polling, on a cluster.
pub(super) fn start(ctx: &Ctx, myself: &ActorRef<RegistryMsg>) -> Option<Tasks> {
    let cluster = ctx.cluster.clone()?;
    let mut listener = match cluster.listener() {
        Ok(l) => l,
        Err(e) => {
            warn!(node_id = %cluster.node_id(), error = %e, "cannot listen for other nodes' events; followers rely on the poll");
            return None;
        }
    };
    let registry = myself.clone();
    let me = cluster.node_id().clone();
    let listener = tokio::spawn(async move {
        loop {
            let msg = match listener.recv().await {
                Ok(Wake::Events { session_id, .. }) => RegistryMsg::FollowWake {
                    session_id: Some(session_id),
                },
                Ok(Wake::Forward { session_id, .. }) => RegistryMsg::ForwardWake {
                    session_id: Some(session_id),
                },
                Ok(Wake::Deltas(d)) if d.from_node != me => RegistryMsg::FollowDeltas {
                    session_id: d.session_id,
                    body: d.body,
                },
                // Its own: this node owns those sessions.
                Ok(Wake::Deltas(_)) => continue,
                Ok(Wake::Presence {
                    session_id,
                    from_node,
                }) if from_node != me => RegistryMsg::PresenceWake {
                    session_id: Some(session_id),
                },
                // Its own write: this node knows its peers.
                Ok(Wake::Presence { .. }) => continue,
                // Its own erase too: the owner's delete ignores it.
                Ok(Wake::Erased { session_id }) => RegistryMsg::ErasedWake {
                    session_id: Some(session_id),
                },
                Ok(Wake::Resync) => {
                    if registry
                        .cast(RegistryMsg::ForwardWake { session_id: None })
                        .is_err()
                        || registry
                            .cast(RegistryMsg::PresenceWake { session_id: None })
                            .is_err()
                        || registry
                            .cast(RegistryMsg::ErasedWake { session_id: None })
                            .is_err()
                    {
                        return;
                    }
                    RegistryMsg::FollowWake { session_id: None }
                }
                Err(e) => {
                    debug!(error = %e, "event listener down; retrying");
                    tokio::time::sleep(LISTEN_RETRY).await;
                    continue;
                }
            };
            if registry.cast(msg).is_err() {
                return;
            }
        }
    });
    let poll = myself.send_interval(POLL_EVERY, || RegistryMsg::PollOwners);
    Some(Tasks { listener, poll })
}

impl RegistryState {
    /// Deltas of a followed session, from its owner.
    pub(super) fn follow_deltas(&self, session_id: &SessionId, body: String) {
        if let Some(live) = self
            .followers
            .get(session_id)
            .and_then(|key| self.live.get(key))
        {
            let _ = live
                .actor
                .cast(SessionMsg::Cluster(ClusterMsg::FollowDeltas { body }));
        }
    }

    /// A notification for `session_id` (or, `None`, a resync for all).
    pub(super) fn follow_wake(&self, session_id: Option<SessionId>) {
        let wake = |key| {
            if let Some(live) = self.live.get(key) {
                let _ = live.actor.cast(SessionMsg::Cluster(ClusterMsg::FollowWake));
            }
        };
        match session_id {
            Some(id) => {
                if let Some(key) = self.followers.get(&id) {
                    wake(key);
                }
            }
            None => self.followers.values().for_each(wake),
        }
    }

    /// Another node wrote who is attached to `session_id` there (or, `None`,
    /// a resync: to any live session): the session reads the presence rows
    /// again (`session/presence_remote.rs`).
    pub(super) fn presence_wake(&self, session_id: Option<SessionId>) {
        let wake = |live: &super::Live| {
            let _ = live
                .actor
                .cast(SessionMsg::Cluster(ClusterMsg::PresenceWake));
        };
        match session_id {
            Some(id) => {
                if let Some(live) = self.by_id.get(&id).and_then(|key| self.live.get(key)) {
                    wake(live);
                }
            }
            None => self.live.values().for_each(wake),
        }
    }

    /// Some node erased `session_id` or trimmed its events (or, `None`, a
    /// resync: maybe any followed session): the live session here, if any,
    /// reads its row and acts on it (`session/cluster/erased.rs`). On a
    /// resync only followers look, one read each: an owner deletes its own
    /// sessions.
    pub(super) fn erased_wake(&self, session_id: Option<SessionId>) {
        let wake = |live: &super::Live| {
            let _ = live.actor.cast(SessionMsg::Cluster(ClusterMsg::ErasedWake));
        };
        match session_id {
            Some(id) => {
                if let Some(live) = self.by_id.get(&id).and_then(|key| self.live.get(key)) {
                    wake(live);
                }
            }
            None => self
                .followers
                .values()
                .filter_map(|key| self.live.get(key))
                .for_each(wake),
        }
    }

    /// A request was forwarded for `session_id` (or, `None`, a resync: for
    /// any live session). Only an owner acts on it, and only the session
    /// knows whether it is one (a follower may have just taken over, before
    /// this map hears of it): a follower ignores it.
    pub(super) fn forward_wake(
        &self,
        myself: &ActorRef<RegistryMsg>,
        session_id: Option<SessionId>,
    ) {
        let Some(id) = session_id else {
            for live in self.live.values() {
                let _ = live
                    .actor
                    .cast(SessionMsg::Cluster(ClusterMsg::ForwardsWake));
            }
            return;
        };
        match self.by_id.get(&id).and_then(|key| self.live.get(key)) {
            Some(live) => {
                let _ = live
                    .actor
                    .cast(SessionMsg::Cluster(ClusterMsg::ForwardsWake));
            }
            None => self.load_to_answer(myself, id),
        }
    }

    /// A forward for a session that is not live here: if this node owns it
    /// (its actor stopped since, a crash for instance), it is brought back
    /// so that it runs the forward; the forwarder sends the profile along,
    /// which the notification does not carry. Every node hears every
    /// forward, so the others only look at the ownership row.
    fn load_to_answer(&self, myself: &ActorRef<RegistryMsg>, id: SessionId) {
        let Some(cluster) = self.ctx.cluster.clone() else {
            return;
        };
        let myself = myself.clone();
        tokio::spawn(async move {
            match cluster.owner_of(&id).await {
                Ok(Some((Some(owner), _))) if owner == *cluster.node_id() => {}
                _ => return,
            }
            let pending = match cluster.pending_forwards(&id).await {
                Ok(p) => p,
                Err(e) => return debug!(session_id = %id, error = %e, "could not read forwards"),
            };
            let profile = pending.iter().find_map(|row| {
                let params: serde_json::Value = serde_json::from_str(&row.params).ok()?;
                params.get("profile")?.as_str().map(str::to_owned)
            });
            let Some(profile) = profile else {
                return;
            };
            debug!(session_id = %id, node_id = %cluster.node_id(), "bringing an owned session back for a forwarded request");
            let _ = myself
                .call(
                    |reply| RegistryMsg::Forward {
                        key: (profile, id),
                        load: true,
                        msg: SessionMsg::Cluster(ClusterMsg::ForwardsWake),
                        reply,
                    },
                    None,
                )
                .await;
        });
    }

    /// Every second: tells the owned sessions whose fence this node no
    /// longer holds (a late heartbeat's `recheck` forgot it: another node
    /// claimed them) that they are lost, before they next write or fan out
    /// a host frame; then reads the owners of the followed sessions, on a
    /// task.
    pub(super) fn poll_owners(&self, myself: &ActorRef<RegistryMsg>) {
        let Some(cluster) = self.ctx.cluster.clone() else {
            return;
        };
        for (key, live) in &self.live {
            if !self.followers.contains_key(&key.1) && cluster.fence(&key.1).is_none() {
                let _ = live.actor.cast(SessionMsg::Cluster(ClusterMsg::Lost));
            }
        }
        self.count_other_peers(myself, &cluster);
        if self.followers.is_empty() {
            return;
        }
        let ids: Vec<SessionId> = self.followers.keys().cloned().collect();
        let myself = myself.clone();
        tokio::spawn(async move {
            match cluster.owners(&ids).await {
                Ok(owners) => {
                    let _ = myself.cast(RegistryMsg::Owners { owners });
                }
                Err(e) => debug!(error = %e, "owner poll failed"),
            }
        });
    }

    /// Reads how many peers the other live nodes have on each live session
    /// here (one read), for `SessionInfo.peers` and listings.
    fn count_other_peers(&self, myself: &ActorRef<RegistryMsg>, cluster: &Cluster) {
        if self.live.is_empty() {
            return;
        }
        let ids: Vec<SessionId> = self.live.keys().map(|k| k.1.clone()).collect();
        let cluster = cluster.clone();
        let myself = myself.clone();
        tokio::spawn(async move {
            match cluster.others_peers(&ids).await {
                Ok(counts) => {
                    let _ = myself.cast(RegistryMsg::OtherPeers { ids, counts });
                }
                Err(e) => debug!(error = %e, "peer count poll failed"),
            }
        });
    }

    /// Publishes what [`Self::count_other_peers`] read: every session it
    /// asked about has its count (0 when none were found), and one whose
    /// count changed is told.
    pub(super) fn other_peers(&self, ids: Vec<SessionId>, counts: Vec<(SessionId, u64)>) {
        let counts: std::collections::HashMap<SessionId, u64> = counts.into_iter().collect();
        let asked: std::collections::HashSet<SessionId> = ids.into_iter().collect();
        for (key, live) in &self.live {
            if !asked.contains(&key.1) {
                continue;
            }
            let n = counts.get(&key.1).copied().unwrap_or(0);
            let before = live.gauges.other_peers.swap(
                u32::try_from(n).unwrap_or(u32::MAX),
                std::sync::atomic::Ordering::Relaxed,
            );
            if u64::from(before) != n {
                // A `close_on_disconnect` session may have lost its last
                // peer on another node.
                let _ = live
                    .actor
                    .cast(SessionMsg::Cluster(ClusterMsg::OtherPeersChanged));
            }
        }
    }

    /// A live session of this node follows it now: notifications reach it
    /// from here on, and it reads once more for what came before.
    pub(super) fn demoted(&mut self, key: super::SessionKey) {
        let Some(live) = self.live.get(&key) else {
            return;
        };
        let _ = live.actor.cast(SessionMsg::Cluster(ClusterMsg::FollowWake));
        self.followers.insert(key.1.clone(), key);
    }

    /// Sessions this node owns now stop being followers; those whose owner
    /// is dead or gone are told so.
    pub(super) fn owners(&mut self, owners: Vec<Ownership>) {
        let Some(me) = self.ctx.cluster.as_ref().map(|c| c.node_id().clone()) else {
            return;
        };
        let fences = self.ctx.cluster.as_ref().map(|c| c.fences().clone());
        for o in owners {
            let held = fences
                .as_ref()
                .is_some_and(|f| f.get(&o.session_id).is_some());
            if o.owner.as_ref() == Some(&me) && held {
                self.followers.remove(&o.session_id);
                continue;
            }
            // Owned by this node in the store but no fence held here: it
            // stood down (or lost it) and nobody took it since. The
            // follower claims it again, as it would a dead node's.
            if o.owner.as_ref() != Some(&me) && o.owner_live {
                if let (Some(owner), Some(live)) = (
                    o.owner,
                    self.followers
                        .get(&o.session_id)
                        .and_then(|key| self.live.get(key)),
                ) {
                    let _ = live
                        .actor
                        .cast(SessionMsg::Cluster(ClusterMsg::OwnerNow { owner }));
                }
                continue;
            }
            if let Some(live) = self
                .followers
                .get(&o.session_id)
                .and_then(|key| self.live.get(key))
            {
                let _ = live.actor.cast(SessionMsg::Cluster(ClusterMsg::OwnerGone));
            }
        }
    }
}
