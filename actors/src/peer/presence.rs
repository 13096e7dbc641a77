//! The peer's side of presence: `gateway.hello` (who this connection says
//! it is, once, before it attaches anywhere) and `session.presence`.

use std::sync::Arc;

use serde_json::value::RawValue;
use tether_protocol::{
    format_ts, now_ms, to_raw, ClientInfo, HelloResult, PresenceEntry, PresenceParams,
    PresenceResult, RpcError,
};

use super::dispatch::Reached;
use super::PeerState;
use crate::session::SessionMsg;

impl PeerState {
    /// `gateway.hello`: the description holds for every session this
    /// connection attaches from now on, so it may be given once, before the
    /// first attach (a session already attached would keep the old one).
    pub(super) fn hello(&mut self, info: ClientInfo) -> Result<Box<RawValue>, RpcError> {
        if self.described {
            return Err(RpcError::invalid_params(
                "params",
                "gateway.hello was already sent on this connection",
            ));
        }
        if !self.attached.is_empty() {
            return Err(RpcError::invalid_params(
                "params",
                "gateway.hello must come before the connection attaches to a session",
            ));
        }
        self.described = true;
        self.client = Some(Arc::new(info));
        Ok(to_raw(&HelloResult {
            peer_id: self.peer_id.clone(),
            profile: self.identity.profile.clone(),
        }))
    }

    /// This peer's presence entry as a session it attaches now shows it.
    pub(super) fn presence_entry(&self) -> Arc<PresenceEntry> {
        Arc::new(PresenceEntry {
            peer_id: self.peer_id.clone(),
            profile: self.identity.profile.clone(),
            client: self.client.as_deref().cloned(),
            transport: self.identity.transport,
            node: self.ctx.cluster.as_ref().map(|c| c.node_id().to_string()),
            attached_at: format_ts(now_ms()),
        })
    }

    /// `session.presence`: asked of the live session; one that is not live
    /// here has no peer here, and on a cluster the other nodes' rows say
    /// who is attached there.
    pub(super) async fn presence(&mut self, p: PresenceParams) -> Result<Box<RawValue>, RpcError> {
        let reached = self
            .ask_session(
                p.profile.as_deref(),
                &p.session_id,
                false,
                self.timeout(),
                |reply| SessionMsg::Presence { reply },
            )
            .await?;
        let result = match reached {
            Reached::Live { answer, .. } => answer??,
            Reached::Stored(_) | Reached::Closed(_) => {
                let mut peers = Vec::new();
                if let Some(cluster) = &self.ctx.cluster {
                    let rows = cluster
                        .others_presence(&p.session_id)
                        .await
                        .map_err(|e| RpcError::storage_unavailable(e.to_string()))?;
                    for (_, text) in rows {
                        if let Ok(entries) = serde_json::from_str::<Vec<PresenceEntry>>(&text) {
                            peers.extend(entries);
                        }
                    }
                    peers.sort_by(|a, b| a.peer_id.as_str().cmp(b.peer_id.as_str()));
                }
                PresenceResult {
                    session_id: p.session_id,
                    peers,
                }
            }
            Reached::NotFound => return Err(RpcError::session_not_found()),
        };
        Ok(to_raw(&result))
    }
}
