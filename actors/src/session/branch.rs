//! `session.branch` of a live session, on its owner: on a cluster the
//! branch's transaction is a write of the parent (its fence is checked), so
//! it is made here, from what this owner has committed. The copy runs on a
//! task (`crate::branch`): reading the store never holds up this actor.

use ractor::ActorRef;
use serde_json::Value;
use tether_protocol::{BranchParams, RpcError};

use super::write::{FirstWrite, Reply, Write};
use super::{SessionMsg, SessionState};
use crate::branch::{branch, BranchAsk};

impl Write for BranchParams {
    type Answer = Value;
    // The new session, not one of this session's events.
    const FIRST_WRITE: FirstWrite = FirstWrite::Elsewhere;

    fn run(self, session: &mut SessionState, _myself: &ActorRef<SessionMsg>, reply: Reply<Value>) {
        let ask = BranchAsk {
            profile: session.profile.clone(),
            upto_seq: self.upto_seq,
            title: self.title,
        };
        session.branch(ask, reply);
    }
}

impl SessionState {
    fn branch(&self, ask: BranchAsk, reply: Reply<Value>) {
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
