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

/// The sending side; dropping it (the session stops) writes 0.
#[derive(Debug)]
pub(crate) struct PeerCount {
    tx: watch::Sender<u64>,
}

impl PeerCount {
    /// On a cluster, a writer of this node's count of `session_id`'s peers.
    pub fn start(cluster: Option<&Cluster>, session_id: &SessionId) -> Option<PeerCount> {
        let cluster = cluster?.clone();
        let (tx, rx) = watch::channel(0);
        tokio::spawn(write_latest(cluster, session_id.clone(), rx));
        Some(PeerCount { tx })
    }

    pub fn set(&self, peers: usize) {
        let peers = peers as u64;
        self.tx.send_if_modified(|n| {
            let changed = *n != peers;
            *n = peers;
            changed
        });
    }
}

async fn write_latest(cluster: Cluster, session_id: SessionId, mut rx: watch::Receiver<u64>) {
    let mut written = 0;
    loop {
        let want = *rx.borrow_and_update();
        if want != written {
            match cluster.set_peers(&session_id, want).await {
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
    if written != 0 {
        if let Err(e) = cluster.set_peers(&session_id, 0).await {
            debug!(session_id = %session_id, error = %e, "final peer count not written; it dies with the node's lease");
        }
    }
}
