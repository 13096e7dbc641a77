//! This node's count of a session's peers, kept in the store on a cluster
//! (docs/ARCHITECTURE.md, "Liveness of peers"): the owner's park counts every live node's peers
//! under the ownership row's lock and is refused (`InUse`) while any are
//! left, so a session followed elsewhere is not parked under its clients.
//!
//! The count changes in the session's mailbox; a task of its own writes the
//! latest value (never an older one after a newer), and 0 when the session
//! stops. A count that could not be written is tried again a second later;
//! a dead node's counts stop counting with its lease.

use std::time::Duration;

use tether_protocol::SessionId;
use tether_store::cluster::Cluster;
use tokio::sync::watch;
use tracing::debug;

/// Wait before writing again a count the store refused.
const RETRY: Duration = Duration::from_secs(1);

/// What this node publishes: the count, and who those peers are (a JSON
/// array of presence entries, once the session has said).
#[derive(Debug, Clone, Default, PartialEq)]
struct Published {
    peers: u64,
    presence: Option<std::sync::Arc<str>>,
}

/// The sending side; dropping it (the session stops) writes 0.
#[derive(Debug)]
pub(crate) struct PeerCount {
    tx: watch::Sender<Published>,
}

impl PeerCount {
    /// On a cluster, a writer of this node's count of `session_id`'s peers.
    pub fn start(cluster: Option<&Cluster>, session_id: &SessionId) -> Option<PeerCount> {
        let cluster = cluster?.clone();
        let (tx, rx) = watch::channel(Published::default());
        tokio::spawn(write_latest(cluster, session_id.clone(), rx));
        Some(PeerCount { tx })
    }

    pub fn set(&self, peers: usize) {
        let peers = peers as u64;
        self.tx.send_if_modified(|p| {
            let changed = p.peers != peers;
            p.peers = peers;
            changed
        });
    }

    /// The count and who those peers are (`session/presence_remote.rs`).
    pub fn set_presence(&self, peers: usize, presence: String) {
        let presence: std::sync::Arc<str> = presence.into();
        self.tx.send_if_modified(|p| {
            let changed = p.peers != peers as u64 || p.presence.as_ref() != Some(&presence);
            p.peers = peers as u64;
            p.presence = Some(presence);
            changed
        });
    }
}

async fn write_latest(cluster: Cluster, session_id: SessionId, mut rx: watch::Receiver<Published>) {
    let mut written = Published::default();
    loop {
        let want = rx.borrow_and_update().clone();
        if want != written {
            let done = match &want.presence {
                Some(presence) => cluster
                    .set_presence(&session_id, want.peers, presence)
                    .await
                    .map(|_| ()),
                None => cluster.set_peers(&session_id, want.peers).await.map(|_| ()),
            };
            match done {
                Ok(_) => written = want,
                Err(e) => {
                    debug!(session_id = %session_id, node_id = %cluster.node_id(), error = %e, "peer count not written; retrying");
                    tokio::select! {
                        _ = tokio::time::sleep(RETRY) => continue,
                        changed = rx.changed() => if changed.is_ok() { continue } else { break },
                    }
                }
            }
        }
        if rx.changed().await.is_err() {
            break;
        }
    }
    if written.peers != 0 {
        if let Err(e) = cluster.set_peers(&session_id, 0).await {
            debug!(session_id = %session_id, error = %e, "final peer count not written; it dies with the node's lease");
        }
    }
}
