//! `session.branch` as a peer asks it: the copy itself is `crate::branch`.
//! A live parent makes the branch on its owner (on a follower the request
//! is forwarded there); a stored or closed one is branched from its row.

use serde_json::value::RawValue;
use tether_protocol::{to_raw, BranchParams, RpcError};

use super::dispatch::Reached;
use super::PeerState;
use crate::branch::{branch, BranchAsk};
use crate::session::SessionMsg;

impl PeerState {
    pub(super) async fn branch(&mut self, p: BranchParams) -> Result<Box<RawValue>, RpcError> {
        if let Some(title) = &p.title {
            crate::title::check(title, self.ctx.config.max_title_bytes)?;
        }
        let profile = self
            .scope(p.profile.as_deref())
            .ok_or_else(RpcError::session_not_found)?;
        let ask = BranchAsk {
            profile: profile.clone(),
            upto_seq: p.upto_seq,
            title: p.title.clone(),
        };
        let session_id = p.session_id.clone();
        let write = p.into();
        // On a cluster a parked parent is brought live first, so that it has
        // an owner to branch it (the branch's transaction checks its fence).
        let load = self.ctx.cluster.is_some();
        let found = self
            .ask_session(Some(&profile), &session_id, load, self.timeout(), |reply| {
                SessionMsg::Write { write, reply }
            })
            .await?;
        match found {
            Reached::Live { answer, .. } => answer?,
            Reached::Stored(row) | Reached::Closed(row) => {
                let latest = row.latest_seq;
                branch(&self.ctx, &row, latest, ask)
                    .await
                    .map(|v| to_raw(&v))
            }
            Reached::NotFound => Err(RpcError::session_not_found()),
        }
    }
}
