//! `session.branch` of a live session, on its owner: on a cluster the
//! branch's transaction is a write of the parent (its fence is checked), so
//! it is made here, from what this owner has committed. The copy runs on a
//! task (`crate::branch`): reading the store never holds up this actor.

use ractor::RpcReplyPort;
use serde_json::Value;
use tether_protocol::RpcError;

use super::SessionState;
use crate::branch::{branch, BranchAsk};

pub(crate) type BranchReply = RpcReplyPort<Result<Value, RpcError>>;

impl SessionState {
    pub(super) fn branch(&self, ask: BranchAsk, reply: BranchReply) {
        let ctx = self.ctx.clone();
        let id = self.id.clone();
        // A branch copies only what is on disk.
        let latest = self.commit.committed_seq();
        tokio::spawn(async move {
            let result = async {
                let parent = ctx
                    .reader
                    .get_session(&ask.profile, &id)
                    .await?
                    .ok_or_else(RpcError::session_not_found)?;
                branch(&ctx, &parent, latest, ask).await
            }
            .await;
            let _ = reply.send(result);
        });
    }
}
