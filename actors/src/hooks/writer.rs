//! [`WriterLoad`]: the StoreWriter on its own, for `tether bench writer`.

use std::collections::HashMap;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tether_protocol::{now_ms, RpcError, SessionId};
use tether_store::{NewSession, SessionPatch};
use tokio::sync::mpsc;

use super::{answer, EventRecord, HookError, PROFILE};
use crate::ctx::Ctx;
use crate::session::SessionMsg;
use crate::store_writer::StoreWriterMsg;

/// What the writer answered one append of a [`WriterLoad`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppendOutcome {
    /// Session number `session`'s events up to `upto_seq` are on disk.
    Committed { session: usize, upto_seq: u64 },
    /// Session number `session`'s append was not written.
    Failed { session: usize, code: i64 },
}

/// The `StoreWriter` driven on its own: appends for sessions that exist
/// only in the store, each commit's outcome on one channel.
///
/// The writer answers an append to the session that sent it, by
/// generation: each session here takes its generation from a barrier, as
/// a live session does, and one stand-in actor tells the sessions apart by
/// it.
pub struct WriterLoad {
    writer: ActorRef<StoreWriterMsg>,
    stand_in: ActorRef<SessionMsg>,
    sessions: Vec<StoredSession>,
}

struct StoredSession {
    id: SessionId,
    append_gen: u64,
    next_seq: u64,
}

impl WriterLoad {
    /// Creates `sessions` sessions in the store (through the writer) and
    /// the stand-in that hears their commits.
    pub async fn start(
        ctx: &Ctx,
        sessions: usize,
    ) -> Result<(Self, mpsc::UnboundedReceiver<AppendOutcome>), HookError> {
        let writer = ctx.writer().ok_or(HookError::Gone("the store writer"))?;
        let mut stored = Vec::with_capacity(sessions);
        let mut by_gen = HashMap::with_capacity(sessions);
        for index in 0..sessions {
            let id = SessionId::new();
            let created = writer.call(
                |reply| StoreWriterMsg::Create {
                    session: Box::new(new_session(id.clone())),
                    events: Vec::new(),
                    reply,
                },
                None,
            );
            answer(created.await, "the store writer")?.map_err(RpcError::from)?;
            let barrier = writer.call(
                |reply| StoreWriterMsg::Barrier {
                    session_id: id.clone(),
                    reply,
                },
                None,
            );
            let barrier = answer(barrier.await, "the store writer")?.map_err(RpcError::from)?;
            by_gen.insert(barrier.append_gen, index);
            stored.push(StoredSession {
                id,
                append_gen: barrier.append_gen,
                next_seq: barrier.latest_seq + 1,
            });
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let (stand_in, _) = Actor::spawn(None, WriterStandIn, StandInState { by_gen, tx })
            .await
            .map_err(HookError::Spawn)?;
        let load = Self {
            writer,
            stand_in,
            sessions: stored,
        };
        Ok((load, rx))
    }

    /// Appends `events` to session number `session`, numbered after its
    /// last; the outcome comes on the channel.
    pub fn append(&mut self, session: usize, events: Vec<EventRecord>) -> Result<(), HookError> {
        let s = self
            .sessions
            .get_mut(session)
            .ok_or(HookError::Gone("no such session"))?;
        let rows = events
            .into_iter()
            .map(|mut rec| {
                rec.seq = Some(s.next_seq);
                s.next_seq += 1;
                rec.to_row()
            })
            .collect();
        self.writer
            .cast(StoreWriterMsg::Append {
                session_id: s.id.clone(),
                append_gen: s.append_gen,
                events: rows,
                patch: SessionPatch {
                    updated_at_ms: Some(now_ms()),
                    ..SessionPatch::default()
                },
                notify: self.stand_in.clone(),
            })
            .map_err(|_| HookError::Gone("the store writer"))
    }

    /// Stops the stand-in (the sessions stay in the store).
    pub fn stop(&self) {
        self.stand_in.stop(None);
    }
}

fn new_session(id: SessionId) -> NewSession {
    NewSession {
        id,
        profile: PROFILE.into(),
        title: String::new(),
        parent_session_id: None,
        kind: "chat".into(),
        close_on_disconnect: false,
        engine_pin: None,
        follow_profile_config: false,
        created_at_ms: now_ms(),
        message_count: 0,
    }
}

/// Hears the writer's answers for every session of a [`WriterLoad`].
struct WriterStandIn;

struct StandInState {
    by_gen: HashMap<u64, usize>,
    tx: mpsc::UnboundedSender<AppendOutcome>,
}

impl Actor for WriterStandIn {
    type Msg = SessionMsg;
    type State = StandInState;
    type Arguments = StandInState;

    async fn pre_start(
        &self,
        _myself: ActorRef<SessionMsg>,
        state: StandInState,
    ) -> Result<StandInState, ActorProcessingErr> {
        Ok(state)
    }

    async fn handle(
        &self,
        _myself: ActorRef<SessionMsg>,
        msg: SessionMsg,
        state: &mut StandInState,
    ) -> Result<(), ActorProcessingErr> {
        let outcome = match msg {
            SessionMsg::Committed {
                append_gen,
                upto_seq,
            } => state
                .by_gen
                .get(&append_gen)
                .map(|&session| AppendOutcome::Committed { session, upto_seq }),
            SessionMsg::AppendFailed {
                append_gen, code, ..
            } => state
                .by_gen
                .get(&append_gen)
                .map(|&session| AppendOutcome::Failed { session, code }),
            _ => None,
        };
        if let Some(outcome) = outcome {
            let _ = state.tx.send(outcome);
        }
        Ok(())
    }
}
