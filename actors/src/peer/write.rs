//! A request that changes one session, as a peer asks it: its session runs
//! it (`session/write.rs`; on a cluster, its owner), brought live for it.
//! Four need more of the peer: a branch of a session that is not live is
//! made from its row, a handoff is announced once inserted, closing a
//! closed session succeeds again, and a closed session is deleted without
//! being brought live (`retention/delete.rs`).

use serde_json::value::RawValue;
use tether_protocol::codes::SESSION_CLOSED;
use tether_protocol::{to_raw, CloseResult, RpcError, SessionWrite};

use super::PeerState;
use crate::session::{host_wait, SessionMsg};

impl PeerState {
    pub(super) async fn write(&mut self, write: SessionWrite) -> Result<Box<RawValue>, RpcError> {
        match write {
            SessionWrite::SessionBranch(p) => self.branch(p).await,
            SessionWrite::HandoffRequest(p) => self.handoff_request(p).await,
            SessionWrite::SessionClose(p) => match self.ask_write(p.into()).await {
                Err(e) if e.code == SESSION_CLOSED => Ok(to_raw(&CloseResult { closed: true })),
                closed => closed,
            },
            SessionWrite::SessionDelete(p) => {
                let Some(profile) = self.scope(p.profile.as_deref()) else {
                    return Err(RpcError::session_not_found());
                };
                // Any life of the id: the client's `life`, if it sent one,
                // is not its to give.
                let deleted = crate::retention::delete_session(
                    &self.ctx,
                    &profile,
                    &p.session_id,
                    None,
                    self.timeout(),
                )
                .await?;
                Ok(to_raw(&deleted))
            }
            // The session's answer is the whole of it.
            write => self.ask_write(write).await,
        }
    }

    /// Brings the session live and has it run `write`.
    pub(super) async fn ask_write(&self, write: SessionWrite) -> Result<Box<RawValue>, RpcError> {
        let wait = self.timeout() + host_wait(&write, &self.ctx.config);
        let session_id = write.session_id().clone();
        let profile = write.profile().map(str::to_owned);
        self.ask_live(profile.as_deref(), &session_id, wait, |reply| {
            SessionMsg::Write { write, reply }
        })
        .await?
    }
}
