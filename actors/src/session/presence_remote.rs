//! Presence across the nodes of a cluster (docs/ARCHITECTURE.md, "Cluster",
//! "Presence across nodes").
//!
//! Nodes never talk to each other, so presence goes through PostgreSQL like
//! everything else: each node writes, beside its count of a session's
//! peers, their presence entries (`cluster/peer_count.rs`, the latest value
//! only, so a storm of attaches is a few writes), and notifies the other
//! nodes in the same transaction. A node that has peers on the session
//! reads the other live nodes' entries when notified, after a listener
//! reconnect, when the poll of the counts sees one change (a dead node's
//! peers vanish with its lease) and when its first peer attaches: one
//! read in flight at a time, one more if asked meanwhile. What it reads
//! feeds the same diff as its own peers (`presence.rs`).

use std::collections::BTreeMap;
use std::sync::Arc;

use ractor::ActorRef;
use tether_protocol::{PeerId, PresenceEntry, SessionId};
use tether_store::cluster::{Cluster, ClusterError, NodeId};
use tracing::{debug, warn};

use super::cluster::ClusterMsg;
use super::{SessionMsg, SessionState};

/// The entries the other live nodes wrote for `session_id`. A node's array
/// that does not parse (a newer node's) is left out and logged.
pub(super) async fn read_remote(
    cluster: &Cluster,
    session_id: &SessionId,
) -> Result<BTreeMap<PeerId, Arc<PresenceEntry>>, ClusterError> {
    let rows = cluster.others_presence(session_id).await?;
    Ok(parse_rows(session_id, rows))
}

fn parse_rows(
    session_id: &SessionId,
    rows: Vec<(NodeId, String)>,
) -> BTreeMap<PeerId, Arc<PresenceEntry>> {
    let mut all = BTreeMap::new();
    for (node, text) in rows {
        match serde_json::from_str::<Vec<PresenceEntry>>(&text) {
            Ok(entries) => {
                for e in entries {
                    all.insert(e.peer_id.clone(), Arc::new(e));
                }
            }
            Err(e) => {
                warn!(session_id = %session_id, node_id = %node, error = %e, "unreadable presence row; left out");
            }
        }
    }
    all
}

impl SessionState {
    /// On a cluster: writes who is attached here (with the count).
    pub(super) fn publish_presence(&mut self, myself: &ActorRef<SessionMsg>) {
        if self.ctx.cluster.is_none() {
            return;
        }
        let entries: Vec<&PresenceEntry> = self.peers.values().map(|s| &*s.presence).collect();
        match serde_json::to_string(&entries) {
            Ok(text) => self.cluster.set_presence(self.peers.len(), text),
            Err(e) => warn!(session_id = %self.id, error = %e, "presence not encoded"),
        }
        // The first peer here learns who is elsewhere.
        if !self.peers.is_empty() && self.presence.remote.is_empty() {
            self.presence_wake(myself);
        }
    }

    /// Another node's peers may have changed: read them again, if anyone
    /// here is there to be told.
    pub(super) fn presence_wake(&mut self, myself: &ActorRef<SessionMsg>) {
        let Some(cluster) = self.ctx.cluster.clone() else {
            return;
        };
        if self.peers.is_empty() {
            self.presence.remote_changed(BTreeMap::new());
            return;
        }
        if self.presence.reading {
            self.presence.read_again = true;
            return;
        }
        self.presence.reading = true;
        let id = self.id.clone();
        let me = myself.clone();
        tokio::spawn(async move {
            let read = read_remote(&cluster, &id).await;
            let _ = me.cast(SessionMsg::Cluster(ClusterMsg::PresenceRead { read }));
        });
    }

    /// What that read found.
    pub(super) fn presence_read(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        read: Result<BTreeMap<PeerId, Arc<PresenceEntry>>, ClusterError>,
    ) {
        self.presence.reading = false;
        match read {
            Ok(remote) => self.presence.remote_changed(remote),
            // The next notification or poll reads again.
            Err(e) => debug!(session_id = %self.id, error = %e, "presence of other nodes not read"),
        }
        if std::mem::take(&mut self.presence.read_again) {
            self.presence_wake(myself);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_merge_and_bad_ones_are_left_out() {
        let s = SessionId::from("s_1");
        let a = r#"[{"peer_id":"p_1","profile":"x","client":null,"transport":"ws","node":"n1","attached_at":"t"}]"#;
        let rows = vec![
            (NodeId::from("n1".to_owned()), a.to_owned()),
            (NodeId::from("n2".to_owned()), "{oops".to_owned()),
        ];
        let all = parse_rows(&s, rows);
        assert_eq!(all.len(), 1);
        assert_eq!(all[&PeerId::from("p_1")].node.as_deref(), Some("n1"));
    }
}
