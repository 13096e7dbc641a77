//! `session.create`: build the first events, commit them in one
//! transaction through the writer (on a task, so the registry does not wait
//! on the disk), then bring the session live and attach its creator.

use ractor::{ActorRef, RpcReplyPort};
use tether_protocol::{
    now_ms, AttachedPeer, CompleteStatus, CreateParams, CreateResult, EventType,
    MessageCompletePayload, RpcError, SeedRole, SessionCreatedPayload, SessionId, SessionInfo,
    SessionStatus, TextPayload,
};
use tether_store::{NewSession, SessionRow};

use super::{storage_unavailable, CreatedSession, Loaded, RegistryMsg, RegistryState, SessionKey};
use crate::event::EventRecord;
use crate::info::info_from_row;
use crate::session::{PeerLink, SessionMsg};
use crate::store_writer::{Barrier, StoreWriterMsg};
use crate::transcript;

/// Gives a new session's first events seqs 1, 2, ...; returns how many
/// transcript messages they make.
pub(crate) fn number_from_one(initial: &mut [EventRecord]) -> u64 {
    let mut message_count = 0;
    for (i, rec) in initial.iter_mut().enumerate() {
        rec.seq = Some(i as u64 + 1);
        message_count = transcript::count_after(rec.kind, message_count);
    }
    message_count
}

impl RegistryState {
    pub(super) fn create(
        &mut self,
        myself: &ActorRef<RegistryMsg>,
        profile: String,
        id: Option<SessionId>,
        params: CreateParams,
        attach: Option<PeerLink>,
        reply: RpcReplyPort<Result<CreatedSession, RpcError>>,
    ) {
        let now = now_ms();
        let id = id.unwrap_or_else(SessionId::new);
        let title = params.title.clone().unwrap_or_default();
        let mut initial = Vec::with_capacity(params.messages.len() + 1);
        initial.push(EventRecord::new(
            EventType::SessionCreated,
            &SessionCreatedPayload {
                title: title.clone(),
                profile: profile.clone(),
                parent_session_id: None,
            },
            None,
            now,
        ));
        for m in &params.messages {
            let text = m.text.clone();
            initial.push(match m.role {
                SeedRole::User => {
                    EventRecord::new(EventType::MessageUser, &TextPayload { text }, None, now)
                }
                SeedRole::System => {
                    EventRecord::new(EventType::MessageSystem, &TextPayload { text }, None, now)
                }
                SeedRole::Assistant => EventRecord::new(
                    EventType::MessageComplete,
                    &MessageCompletePayload {
                        text,
                        status: CompleteStatus::Complete,
                        failure_reason: None,
                        recoverable: None,
                        usage: None,
                    },
                    None,
                    now,
                ),
            });
        }
        let message_count = number_from_one(&mut initial);
        let new = NewSession {
            id,
            profile,
            title,
            parent_session_id: None,
            kind: "chat".into(),
            close_on_disconnect: params.close_on_disconnect,
            engine_pin: params.engine.clone().map(serde_json::Value::Object),
            follow_profile_config: params.follow_profile_config,
            created_at_ms: now,
            message_count,
        };
        self.commit_new(myself, new, initial, attach, reply);
    }

    /// Writes a new session and its first events in one transaction (on a
    /// task, so the registry does not wait on the disk), then brings it
    /// live through `Created`. Used by `session.create` and
    /// `session.branch`: either the whole session exists afterwards or none
    /// of it does.
    pub(super) fn commit_new(
        &mut self,
        myself: &ActorRef<RegistryMsg>,
        new: NewSession,
        initial: Vec<EventRecord>,
        attach: Option<PeerLink>,
        reply: RpcReplyPort<Result<CreatedSession, RpcError>>,
    ) {
        // Every new session passes here (create and branch): the one place
        // that keeps any title over the bound out of the store.
        if let Err(e) = crate::title::check(&new.title, self.ctx.config.max_title_bytes) {
            let _ = reply.send(Err(e));
            return;
        }
        // Before anything is written: a refused create writes nothing.
        let place = match self.ctx.profiles.new_session(&new.profile) {
            Ok(place) => place,
            Err(limit) => {
                tracing::info!(profile = %new.profile, limit = limit.limit.name(), max = limit.max,
                      "session refused: profile limit reached");
                let _ = reply.send(Err(limit.to_rpc()));
                return;
            }
        };
        let Some(writer) = self.ctx.writer() else {
            let _ = reply.send(Err(storage_unavailable()));
            return;
        };
        let row = new_row(&new, &initial);
        let rows = initial.iter().map(EventRecord::to_row).collect();
        let key = (new.profile.clone(), new.id.clone());
        self.creating.entry(key.clone()).or_default().0 += 1;
        let myself = myself.clone();
        let cluster = self.ctx.cluster.clone();
        tokio::spawn(async move {
            if let Some(cluster) = &cluster {
                if let Err(e) = claim_new(cluster, &new.id).await {
                    let _ = reply.send(Err(e));
                    let _ = myself.cast(RegistryMsg::CreateEnded { key });
                    return;
                }
            }
            // No bound: the writer answers a Create when its transaction
            // has ended (or drops the port if it dies), and only it knows
            // whether the session exists; a timeout here could report as
            // failed a session that is then committed. The caller's wait on
            // the registry is bounded on its own (`call_timeout`).
            let committed = writer
                .call(
                    |port| StoreWriterMsg::Create {
                        session: Box::new(new),
                        events: rows,
                        reply: port,
                    },
                    None,
                )
                .await;
            match committed {
                Ok(ractor::rpc::CallResult::Success(Ok(append_gen))) => {
                    let _ = myself.cast(RegistryMsg::Created {
                        row: Box::new(row),
                        append_gen,
                        initial,
                        attach,
                        reply,
                        place,
                    });
                }
                Ok(ractor::rpc::CallResult::Success(Err(e))) => {
                    let _ = reply.send(Err(e.into()));
                    let _ = myself.cast(RegistryMsg::CreateEnded { key });
                }
                _ => {
                    let _ = reply.send(Err(storage_unavailable()));
                    let _ = myself.cast(RegistryMsg::CreateEnded { key });
                }
            }
        });
    }

    pub(super) async fn created(
        &mut self,
        myself: &ActorRef<RegistryMsg>,
        row: SessionRow,
        append_gen: u64,
        initial: Vec<EventRecord>,
        attach: Option<PeerLink>,
        reply: RpcReplyPort<Result<CreatedSession, RpcError>>,
    ) {
        let key = (row.profile.clone(), row.id.clone());
        let barrier = Barrier {
            latest_seq: row.latest_seq,
            append_gen,
        };
        let info_row = row.clone();
        let attached: Vec<AttachedPeer> = attach
            .iter()
            .map(|peer| AttachedPeer {
                peer_id: peer.peer_id.clone(),
                transport: peer.transport,
            })
            .collect();
        let spawned = self
            .spawn_session(
                myself,
                key.clone(),
                Loaded {
                    row,
                    barrier,
                    todos: None,
                    claimed: None,
                },
                initial,
            )
            .await;
        match spawned {
            Ok(actor) => {
                if let Some(peer) = attach {
                    let _ = actor.cast(SessionMsg::AttachFromStart { peer });
                }
                let _ = reply.send(Ok(CreatedSession {
                    result: CreateResult {
                        session: SessionInfo {
                            attached: Some(attached.clone()),
                            // Created here: claimed by this node first.
                            owner_node: self.ctx.cluster.as_ref().map(|c| c.node_id().to_string()),
                            ..info_from_row(&info_row, Some(attached.len() as u32))
                        },
                        epoch: self.ctx.epoch.to_string(),
                    },
                    actor,
                }));
            }
            Err(e) => {
                let _ = reply.send(Err(e));
            }
        }
        self.create_ended(myself, key);
    }

    /// One create of `key` ended (committed and live, or not written): once
    /// none is left, the requests held for the id go on, to the new session
    /// or, if there is none, as any request for a stored one.
    pub(super) fn create_ended(&mut self, myself: &ActorRef<RegistryMsg>, key: SessionKey) {
        let Some((count, _)) = self.creating.get_mut(&key) else {
            return;
        };
        *count = count.saturating_sub(1);
        if *count > 0 {
            return;
        }
        let held = self.creating.remove(&key).map(|(_, held)| held);
        for routed in held.into_iter().flatten() {
            self.route(myself, key.clone(), routed);
        }
    }
}

/// The row of a session being created, as it stands once `initial` is
/// written.
fn new_row(new: &NewSession, initial: &[EventRecord]) -> SessionRow {
    SessionRow {
        id: new.id.clone(),
        profile: new.profile.clone(),
        title: new.title.clone(),
        status: SessionStatus::Idle,
        parent_session_id: new.parent_session_id.clone(),
        kind: new.kind.clone(),
        history_version: 0,
        close_on_disconnect: new.close_on_disconnect,
        engine_pin: new.engine_pin.clone(),
        follow_profile_config: new.follow_profile_config,
        turn_marker: None,
        created_at_ms: new.created_at_ms,
        updated_at_ms: new.created_at_ms,
        latest_seq: initial.len() as u64,
        message_count: new.message_count,
        retained_from_seq: 1,
    }
}

/// A node owns what it creates before it writes it (a fresh id: unowned,
/// so this waits only on the database).
async fn claim_new(
    cluster: &tether_store::cluster::Cluster,
    id: &SessionId,
) -> Result<(), RpcError> {
    match crate::node::claim(cluster, id).await {
        Ok(crate::node::Claimed::Owner { .. }) => Ok(()),
        // A fresh id another node owns: only a clash of ids.
        Ok(crate::node::Claimed::Follower { owner }) => Err(RpcError::internal(format!(
            "new session {id} is owned by node {owner}"
        ))),
        Err(e) => Err(e.into()),
    }
}
