//! The `handoff.*` methods (PROTOCOL.md 1.4 "Handoff").
//!
//! The store does each transition as one compare-and-set statement (that is what makes a claim
//! exactly-once, whichever gateway task or process runs it); this file checks what the peer may
//! see, maps the outcomes to the wire, and announces every transition on the session as a
//! durable `status.update` `{"kind":"handoff","text":STATE}`.
//!
//! The announcement follows the committed transition and is awaited (it is on disk, and queued
//! to the session's attached peers, before the reply), but it cannot undo it: when it fails the
//! transition stands and the failure is logged. A session closed meanwhile gets none (nothing
//! follows `session.closed`). `handoff.state` reads the row, which is the truth.

use serde_json::value::RawValue;
use tether_protocol::{
    now_ms, to_raw, ClaimedHandoff, EventType, HandoffClaimParams, HandoffClaimResult,
    HandoffCompleteParams, HandoffCompleteResult, HandoffFailParams, HandoffFailResult, HandoffId,
    HandoffInfo, HandoffRequestParams, HandoffRequestResult, HandoffState, HandoffStateParams,
    HandoffStateResult, RpcError, SessionId, SessionStatus, SessionWrite, StatusUpdatePayload,
};
use tether_store::{CompleteOutcome, FailOutcome};
use tracing::warn;

use super::dispatch::Reached;
use super::PeerState;
use crate::event::EventRecord;
use crate::registry::Resolved;
use crate::session::SessionMsg;

/// The `status.update` kind that announces handoff transitions (PROTOCOL's list of kinds has
/// none for them; docs/PROTOCOL.md Part 4).
pub(crate) const HANDOFF_STATUS_KIND: &str = "handoff";

/// 4090 for a handoff id the peer cannot see: unknown, or another profile's (the two are
/// indistinguishable, as for sessions).
fn no_such_handoff(id: &HandoffId) -> RpcError {
    RpcError::handoff_conflict(format!("handoff {} does not exist", id.as_str()))
}

impl PeerState {
    pub(super) async fn handoff_request(
        &mut self,
        p: HandoffRequestParams,
    ) -> Result<Box<RawValue>, RpcError> {
        let profile = self
            .open_session(p.profile.as_deref(), &p.session_id)
            .await?;
        // The insert is a write of the session: its owner's (`session/handoff.rs`).
        let session_id = p.session_id.clone();
        let mut write = SessionWrite::from(p);
        write.set_profile(profile.clone());
        let answer = self.ask_write(write).await?;
        let result: HandoffRequestResult = serde_json::from_str(answer.get())
            .map_err(|e| RpcError::internal(format!("unreadable handoff.request answer: {e}")))?;
        self.announce(&profile, &session_id, result.state).await;
        Ok(answer)
    }

    pub(super) async fn handoff_claim(
        &mut self,
        p: HandoffClaimParams,
    ) -> Result<Box<RawValue>, RpcError> {
        // A profile the token does not grant sees an empty queue.
        let Some(profile) = self.scope(p.profile.as_deref()) else {
            return Ok(to_raw(&HandoffClaimResult { handoff: None }));
        };
        let claimed = self.ctx.handoffs.claim(&profile, &p.target).await?;
        let handoff = match claimed {
            Some(row) => {
                self.announce(&profile, &row.session_id, row.state).await;
                Some(ClaimedHandoff {
                    handoff_id: row.id,
                    session_id: row.session_id,
                    target: row.target,
                    state: row.state,
                })
            }
            None => None,
        };
        Ok(to_raw(&HandoffClaimResult { handoff }))
    }

    pub(super) async fn handoff_complete(
        &mut self,
        p: HandoffCompleteParams,
    ) -> Result<Box<RawValue>, RpcError> {
        let Some(profile) = self.scope(p.profile.as_deref()) else {
            return Err(no_such_handoff(&p.handoff_id));
        };
        match self.ctx.handoffs.complete(&profile, &p.handoff_id).await? {
            CompleteOutcome::Completed(row) => {
                self.announce(&profile, &row.session_id, row.state).await;
                Ok(to_raw(&HandoffCompleteResult { state: row.state }))
            }
            CompleteOutcome::NotRunning(state) => Err(RpcError::handoff_conflict(format!(
                "handoff {} is {state}, not running",
                p.handoff_id.as_str()
            ))),
            CompleteOutcome::NotFound => Err(no_such_handoff(&p.handoff_id)),
        }
    }

    pub(super) async fn handoff_fail(
        &mut self,
        p: HandoffFailParams,
    ) -> Result<Box<RawValue>, RpcError> {
        let Some(profile) = self.scope(p.profile.as_deref()) else {
            return Err(no_such_handoff(&p.handoff_id));
        };
        match self
            .ctx
            .handoffs
            .fail(&profile, &p.handoff_id, &p.error, p.only_if_pending)
            .await?
        {
            FailOutcome::Failed(row) => {
                self.announce(&profile, &row.session_id, row.state).await;
                Ok(to_raw(&HandoffFailResult {
                    failed: true,
                    state: row.state,
                }))
            }
            FailOutcome::Unchanged(state) => Ok(to_raw(&HandoffFailResult {
                failed: false,
                state,
            })),
            FailOutcome::NotFound => Err(no_such_handoff(&p.handoff_id)),
        }
    }

    pub(super) async fn handoff_state(
        &mut self,
        p: HandoffStateParams,
    ) -> Result<Box<RawValue>, RpcError> {
        // A read: the session need not be live (nor open) to report its handoff.
        let (profile, found) = self
            .resolve(p.profile.as_deref(), &p.session_id, false)
            .await?;
        if matches!(found, Resolved::NotFound) {
            return Err(RpcError::session_not_found());
        }
        let latest = self.ctx.handoffs.latest(&profile, &p.session_id).await?;
        Ok(to_raw(&HandoffStateResult {
            handoff: latest.map(|row| HandoffInfo {
                handoff_id: row.id,
                session_id: row.session_id,
                target: row.target,
                state: row.state,
                error: row.error,
            }),
        }))
    }

    /// The profile of an open session, brought live if needed: 4001 when the peer cannot see
    /// it, 4002 when it is closed or a close has been decided (the session itself knows that
    /// before its row does).
    async fn open_session(
        &self,
        requested: Option<&str>,
        session_id: &SessionId,
    ) -> Result<String, RpcError> {
        let profile = self
            .scope(requested)
            .ok_or_else(RpcError::session_not_found)?;
        let info = self
            .ask_session(Some(&profile), session_id, true, self.timeout(), |reply| {
                SessionMsg::Info { reply }
            })
            .await?
            .answer()?;
        if info.status == SessionStatus::Closed {
            return Err(RpcError::session_closed());
        }
        Ok(profile)
    }

    /// Announces a transition on its session, bringing the session live, and waits until the
    /// durable `status.update` is committed and fanned out. A session that was closed (or
    /// deleted) since gets no announcement: nobody can attach to it any more. Failures are
    /// logged; the transition stands.
    async fn announce(&self, profile: &str, session_id: &SessionId, state: HandoffState) {
        let event = EventRecord::new(
            EventType::StatusUpdate,
            &StatusUpdatePayload {
                kind: HANDOFF_STATUS_KIND.to_string(),
                text: Some(state.as_str().to_string()),
            },
            None,
            now_ms(),
        );
        let emitted = self
            .ask_session(Some(profile), session_id, true, self.timeout(), |reply| {
                SessionMsg::EmitIfOpen {
                    events: vec![event],
                    reply: Some(reply),
                }
            })
            .await;
        let confirmed = match emitted {
            Ok(Reached::Live {
                answer: Ok(true), ..
            }) => {
                // The Flush queues behind the emit, so it answers once the event is on disk. A
                // session that parked or closed since has every event on disk.
                let flushed = self
                    .ask_session(Some(profile), session_id, false, self.timeout(), |reply| {
                        SessionMsg::Flush { reply }
                    })
                    .await;
                match flushed {
                    Ok(Reached::Live { answer, .. }) => answer,
                    Ok(_) => Ok(()),
                    Err(e) => Err(e),
                }
            }
            // Closed meanwhile (nothing may follow `session.closed`), or gone.
            Ok(Reached::Live {
                answer: Ok(false), ..
            })
            | Ok(Reached::Closed(_) | Reached::Stored(_) | Reached::NotFound) => Ok(()),
            Ok(Reached::Live { answer: Err(e), .. }) | Err(e) => Err(e),
        };
        if let Err(e) = confirmed {
            warn!(
                session_id = session_id.as_str(),
                %state,
                error = %e,
                "handoff transition committed but its status.update was not confirmed"
            );
        }
    }
}
