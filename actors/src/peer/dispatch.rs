//! Request dispatch: each method goes to the actor that owns its state.

use std::collections::HashMap;
use std::time::Duration;

use ractor::rpc::CallResult;
use ractor::{ActorRef, Message, RpcReplyPort};
use serde::Serialize;
use serde_json::value::RawValue;
use tether_protocol::{
    to_raw, CreateParams, DetachParams, DetachResult, ListParams, ListResult, PingResult, Request,
    ResumeParams, RpcError, SessionId, SinceParams,
};
use tether_store::SessionRow;

use super::list_page::{sessions_within, Page};
use super::{AfterReply, PeerState};
use crate::info::info_from_row;
use crate::metrics::ReplayKind;
use crate::registry::{CreatedSession, RegistryMsg, Resolved};
use crate::session::replay::since_from_store;
use crate::session::SessionMsg;

/// Sends a request to an actor and waits (bounded) for its answer.
pub(crate) async fn ask<M, T, F>(
    actor: &ActorRef<M>,
    build: F,
    timeout: Duration,
) -> Result<T, RpcError>
where
    M: Message,
    T: Send + 'static,
    F: FnOnce(RpcReplyPort<T>) -> M,
{
    match actor.call(build, Some(timeout)).await {
        Ok(CallResult::Success(v)) => Ok(v),
        Ok(CallResult::Timeout) => Err(late()),
        Ok(CallResult::SenderError) | Err(_) => Err(stopped()),
    }
}

fn late() -> RpcError {
    RpcError::internal("the owning actor did not answer in time")
}

fn stopped() -> RpcError {
    RpcError::internal("the owning actor stopped while handling the request")
}

/// Where a request for a session went (`PeerState::ask_session`).
pub(super) enum Reached<T> {
    /// The live session took it: its actor, and its answer (or why none
    /// came: it did not answer in time, or it stopped while handling it).
    Live {
        actor: ActorRef<SessionMsg>,
        answer: Result<T, RpcError>,
    },
    /// Nobody took it: the session is not live (only without `load`),
    /// closed, or not there.
    Stored(Box<SessionRow>),
    Closed(Box<SessionRow>),
    NotFound,
}

impl<T> Reached<T> {
    /// The live session's actor and answer; 4002 for a closed session, 4001
    /// for one that is not there (or not live, without `load`).
    pub(super) fn into_live(self) -> Result<(ActorRef<SessionMsg>, Result<T, RpcError>), RpcError> {
        match self {
            Reached::Live { actor, answer } => Ok((actor, answer)),
            Reached::Closed(_) => Err(RpcError::session_closed()),
            Reached::Stored(_) | Reached::NotFound => Err(RpcError::session_not_found()),
        }
    }

    /// The live session's answer, or the error `into_live` gives.
    pub(super) fn answer(self) -> Result<T, RpcError> {
        self.into_live().and_then(|(_, answer)| answer)
    }
}

fn ok<T: Serialize>(v: &T) -> Result<Box<RawValue>, RpcError> {
    Ok(to_raw(v))
}

impl PeerState {
    pub(super) async fn dispatch(
        &mut self,
        req: Request,
        after: &mut AfterReply,
    ) -> Result<Box<RawValue>, RpcError> {
        match req {
            Request::Ping => ok(&PingResult { ok: true }),
            Request::SessionCreate(p) => self.create(p).await,
            Request::SessionResume(p) => self.resume(p, after).await,
            Request::SessionDetach(p) => self.detach(p).await,
            Request::SessionList(p) => self.list(p).await,
            Request::EventsSince(p) => self.since(p).await,
            Request::Write(w) => self.write(w).await,
            Request::EventsStats => {
                let registry = self.ctx.registry()?;
                let profile = self.identity.profile.clone();
                let stats = ask(
                    &registry,
                    |reply| RegistryMsg::Stats { profile, reply },
                    self.timeout(),
                )
                .await?;
                ok(&stats)
            }
            // What a token may reach was decided by the admission
            // (`admission.rs`) before any of these runs.
            Request::HandoffClaim(p) => self.handoff_claim(p).await,
            Request::HandoffComplete(p) => self.handoff_complete(p).await,
            Request::HandoffFail(p) => self.handoff_fail(p).await,
            Request::HandoffState(p) => self.handoff_state(p).await,
            Request::RefreshToken(p) => self.refresh_token(p).await,
            Request::GatewayHello(p) => self.hello(p),
            Request::SessionPresence(p) => self.presence(p).await,
        }
    }

    pub(super) fn timeout(&self) -> Duration {
        self.ctx.config.call_timeout
    }

    /// The profile a call is scoped to, or `None` when the caller named a
    /// profile its token does not grant (then the call sees nothing).
    pub(super) fn scope(&self, requested: Option<&str>) -> Option<String> {
        match requested {
            Some(p) if self.identity.fixed && p != self.identity.profile => None,
            Some(p) => Some(p.to_string()),
            None => Some(self.identity.profile.clone()),
        }
    }

    pub(super) async fn resolve(
        &self,
        profile: Option<&str>,
        session_id: &SessionId,
        load: bool,
    ) -> Result<(String, Resolved), RpcError> {
        let Some(profile) = self.scope(profile) else {
            return Err(RpcError::session_not_found());
        };
        let registry = self.ctx.registry()?;
        let key = (profile.clone(), session_id.clone());
        let found = ask(
            &registry,
            |reply| RegistryMsg::Resolve { key, load, reply },
            self.timeout(),
        )
        .await??;
        Ok((profile, found))
    }

    /// Sends a request to a session and waits (within `timeout`) for its
    /// answer. The registry delivers it (`registry/route.rs`), so a session
    /// that parks meanwhile never loses it: there is no retry here, and none
    /// is needed anywhere else. With `load`, a stored session is brought
    /// live for it; without, one that is not live is `Stored`.
    pub(super) async fn ask_session<T, F>(
        &self,
        profile: Option<&str>,
        session_id: &SessionId,
        load: bool,
        timeout: Duration,
        build: F,
    ) -> Result<Reached<T>, RpcError>
    where
        T: Send + 'static,
        F: FnOnce(RpcReplyPort<T>) -> SessionMsg,
    {
        let Some(profile) = self.scope(profile) else {
            return Err(RpcError::session_not_found());
        };
        let registry = self.ctx.registry()?;
        let (tx, answered) = tokio::sync::oneshot::channel();
        let msg = build(tx.into());
        let key = (profile, session_id.clone());
        let routed = ask(
            &registry,
            |reply| RegistryMsg::Forward {
                key,
                load,
                msg,
                reply,
            },
            self.timeout(),
        )
        .await??;
        Ok(match routed {
            Resolved::Live(live) => Reached::Live {
                actor: live.actor,
                answer: match tokio::time::timeout(timeout, answered).await {
                    Ok(Ok(v)) => Ok(v),
                    Ok(Err(_)) => Err(stopped()),
                    Err(_) => Err(late()),
                },
            },
            Resolved::Stored(row) => Reached::Stored(row),
            Resolved::Closed(row) => Reached::Closed(row),
            Resolved::NotFound => Reached::NotFound,
        })
    }

    /// Brings a session live and asks it.
    pub(super) async fn ask_live<T, F>(
        &self,
        profile: Option<&str>,
        session_id: &SessionId,
        timeout: Duration,
        build: F,
    ) -> Result<T, RpcError>
    where
        T: Send + 'static,
        F: FnOnce(RpcReplyPort<T>) -> SessionMsg,
    {
        self.ask_session(profile, session_id, true, timeout, build)
            .await?
            .answer()
    }

    async fn create(&mut self, p: CreateParams) -> Result<Box<RawValue>, RpcError> {
        let Some(profile) = self.scope(p.profile.as_deref()) else {
            return Err(RpcError::session_not_found());
        };
        let attach = (p.attach && self.identity.can_attach).then(|| self.link(p.delivery));
        let registry = self.ctx.registry()?;
        let prof = profile.clone();
        let CreatedSession { result, actor } = ask(
            &registry,
            |reply| RegistryMsg::Create {
                profile: prof,
                id: None,
                params: p,
                attach,
                reply,
            },
            self.timeout(),
        )
        .await??;
        if result.session.peers > 0 {
            self.attached
                .insert((profile, result.session.session_id.clone()), actor);
        }
        ok(&result)
    }

    async fn resume(
        &mut self,
        p: ResumeParams,
        after: &mut AfterReply,
    ) -> Result<Box<RawValue>, RpcError> {
        let Some(profile) = self.scope(p.profile.as_deref()) else {
            return Err(RpcError::session_not_found());
        };
        let attach = p.attach && self.identity.can_attach;
        let peer = attach.then(|| self.link(p.delivery));
        // Scoped already: `key.0` is the profile to ask in.
        let key = (profile, p.session_id.clone());
        let reached = self
            .ask_session(Some(&key.0), &key.1, true, self.timeout(), |reply| {
                SessionMsg::Resume {
                    params: p,
                    peer,
                    reply,
                }
            })
            .await?;
        let (actor, reply) = reached.into_live()?;
        match reply {
            Ok(Ok(r)) => {
                if let Some(events) = &r.result.events {
                    self.ctx.metrics.replayed(ReplayKind::Resume, events.len());
                }
                if r.joining {
                    self.attached.insert(key, actor.clone());
                    after.joins.push(actor);
                }
                ok(&r.result)
            }
            Ok(Err(e)) | Err(e) => {
                if attach {
                    // The session may have added us as joining before failing.
                    let _ = actor.cast(SessionMsg::Detach {
                        peer_id: self.peer_id.clone(),
                        reply: None,
                    });
                }
                Err(e)
            }
        }
    }

    async fn detach(&mut self, p: DetachParams) -> Result<Box<RawValue>, RpcError> {
        let Some(profile) = self.scope(p.profile.as_deref()) else {
            return Err(RpcError::session_not_found());
        };
        let detached = match self.attached.remove(&(profile, p.session_id)) {
            Some(actor) => {
                let peer_id = self.peer_id.clone();
                ask(
                    &actor,
                    |reply| SessionMsg::Detach {
                        peer_id,
                        reply: Some(reply),
                    },
                    self.timeout(),
                )
                .await
                .unwrap_or(false)
            }
            None => false,
        };
        ok(&DetachResult { detached })
    }

    /// On a cluster, the live owner of each of `rows` that has one, in one
    /// read. A listing is still answered when the read fails, without them.
    async fn owners_of(&self, rows: &[SessionRow]) -> HashMap<SessionId, String> {
        let Some(cluster) = &self.ctx.cluster else {
            return HashMap::new();
        };
        let ids: Vec<SessionId> = rows.iter().map(|r| r.id.clone()).collect();
        match cluster.owners(&ids).await {
            Ok(owners) => owners
                .into_iter()
                .filter(|o| o.owner_live)
                .filter_map(|o| Some((o.session_id, o.owner?.to_string())))
                .collect(),
            Err(e) => {
                tracing::debug!(error = %e, "could not read the owners of listed sessions");
                HashMap::new()
            }
        }
    }

    async fn list(&mut self, p: ListParams) -> Result<Box<RawValue>, RpcError> {
        let Some(profile) = self.scope(p.profile.as_deref()) else {
            return ok(&ListResult {
                sessions: Vec::new(),
                next_cursor: None,
            });
        };
        let max = self.ctx.config.max_list_bytes;
        let (mut rows, store_next) = self
            .ctx
            .reader
            .list_sessions_within(
                &profile,
                p.include_closed,
                p.cursor.as_deref(),
                p.limit,
                max,
            )
            .await
            .map_err(|e| match e {
                tether_store::StoreError::Invalid(detail) => {
                    RpcError::invalid_params("cursor", detail)
                }
                e => e.into(),
            })?;
        // A token for a few sessions lists only those (its pages may be
        // short; the cursor still walks the profile's list).
        rows.retain(|row| self.reach(row.id.as_str()).is_ok());
        let registry = self.ctx.registry()?;
        let ids = rows.iter().map(|r| r.id.clone()).collect();
        let counts = ask(
            &registry,
            |reply| RegistryMsg::PeerCounts {
                profile,
                ids,
                reply,
            },
            self.timeout(),
        )
        .await?;
        let owners = self.owners_of(&rows).await;
        let sessions: Vec<Box<RawValue>> = rows
            .iter()
            .map(|row| {
                let mut info = info_from_row(row, counts.get(&row.id).copied());
                info.owner_node = owners.get(&row.id).cloned();
                to_raw(&info)
            })
            .collect();
        let sizes: Vec<usize> = sessions.iter().map(|s| s.get().len()).collect();
        let cursor_bytes = |k: usize| {
            serde_json::to_string(&tether_store::list_cursor_after(&rows[k - 1]))
                .map_or(usize::MAX / 2, |c| c.len())
        };
        let keep = sessions_within(&sizes, store_next.is_some(), cursor_bytes, max);
        let next_cursor = if keep < rows.len() {
            Some(tether_store::list_cursor_after(&rows[keep - 1]))
        } else {
            store_next
        };
        ok(&Page {
            sessions: &sessions[..keep],
            next_cursor: next_cursor.as_deref(),
        })
    }

    async fn since(&mut self, p: SinceParams) -> Result<Box<RawValue>, RpcError> {
        // A read: a session that is not live (or parks meanwhile: its
        // events are all on disk by then) is read from the store, without
        // being brought live.
        let params = p.clone();
        let reached = self
            .ask_session(
                p.profile.as_deref(),
                &p.session_id,
                false,
                self.timeout(),
                |reply| SessionMsg::Since { params, reply },
            )
            .await?;
        let row = match reached {
            Reached::Live { answer, .. } => {
                let result = answer??;
                self.ctx
                    .metrics
                    .replayed(ReplayKind::Since, result.events.len());
                return ok(&result);
            }
            Reached::Stored(row) | Reached::Closed(row) => row,
            Reached::NotFound => return Err(RpcError::session_not_found()),
        };
        let result = since_from_store(
            self.ctx.reader.as_ref(),
            &row.id,
            row.latest_seq,
            row.retained_from_seq,
            &self.ctx.epoch,
            &p,
        )
        .await?;
        self.ctx
            .metrics
            .replayed(ReplayKind::Since, result.events.len());
        ok(&result)
    }
}
