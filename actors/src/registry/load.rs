//! Bringing stored sessions live: the row, the latest todo snapshot, and a
//! barrier through the writer for the committed seq.

use std::time::Duration;

use futures::StreamExt;
use ractor::ActorRef;
use tether_protocol::{SessionStatus, Todos};
use tether_store::StoreError;
use tracing::{debug, info, warn};

use std::sync::Arc;

use ractor::Actor;
use tether_protocol::RpcError;

use super::{Live, Loaded, RegistryMsg, RegistryState, Resolved, SessionKey};
use crate::ctx::{Ctx, SessionGauges};
use crate::event::EventRecord;
use crate::session::SessionMsg;
use crate::session::{Session, SessionArgs};
use crate::store_writer::{Barrier, StoreWriterMsg};

/// Reads a session row and, through the writer, its committed latest seq.
/// The writer's answer is awaited at most `wait`: the registry's `loading`
/// entry lasts as long as this, so a writer that never answers (a hung
/// disk) must not keep it, and every later request for the session, for
/// ever; past the bound the waiters get 5072 and the next request loads
/// afresh.
pub(super) async fn load_session(
    reader: &dyn tether_store::StoreRead,
    writer: Option<ActorRef<StoreWriterMsg>>,
    cluster: Option<tether_store::cluster::Cluster>,
    key: &SessionKey,
    wait: Duration,
) -> Result<Option<Loaded>, StoreError> {
    // A node that cannot renew its lease may be cut off from the store and
    // behind it: it brings nothing live (retry, through another node).
    if cluster.as_ref().is_some_and(|c| !c.lease_held()) {
        return Err(StoreError::Unavailable(
            "this cluster node cannot renew its lease; resume through another node".into(),
        ));
    }
    let Some(first) = reader.get_session(&key.0, &key.1).await? else {
        return Ok(None);
    };
    // A closed session is read, never brought live, unless its turns
    // never ended (closed by an older gateway): then it comes live to end
    // them, and stops (`session/marker.rs`).
    if first.status == SessionStatus::Closed && first.turn_marker.is_none() {
        let barrier = Barrier {
            latest_seq: first.latest_seq,
            append_gen: 0,
        };
        return Ok(Some(Loaded {
            row: first,
            barrier,
            todos: None,
            claimed: None,
        }));
    }
    let writer =
        writer.ok_or_else(|| StoreError::Unavailable("store writer is restarting".into()))?;
    // The barrier (not the read pool) tells the committed latest seq: an
    // append still queued from the session's previous life lands first.
    let barrier = writer
        .call(
            |port| StoreWriterMsg::Barrier {
                session_id: key.1.clone(),
                reply: port,
            },
            Some(wait),
        )
        .await;
    let barrier = match barrier {
        Ok(ractor::rpc::CallResult::Success(result)) => result?,
        Ok(ractor::rpc::CallResult::Timeout) => {
            return Err(StoreError::Unavailable(
                "store writer did not answer in time".into(),
            ))
        }
        _ => {
            return Err(StoreError::Unavailable(
                "store writer did not answer".into(),
            ))
        }
    };
    // A node claims before it writes anything of the session, and after
    // the barrier: an append this node still had queued from the session's
    // previous life here lands under the fence it was sent with.
    let claimed = match &cluster {
        Some(cluster) => Some(crate::node::claim(cluster, &key.1).await?),
        None => None,
    };
    // Read again behind the barrier: the first read only told that the
    // session exists; its turn marker, counters and todos must include
    // what the previous life's last append wrote.
    let Some(row) = reader.get_session(&key.0, &key.1).await? else {
        return Ok(None);
    };
    let todos = reader
        .latest_todos(&key.1)
        .await?
        .and_then(|e| serde_json::from_str::<Todos>(&e.payload).ok());
    Ok(Some(Loaded {
        row,
        barrier,
        todos,
        claimed,
    }))
}

/// At start, sessions whose turns were cut short by a stop are brought live:
/// each one ends those turns (`gateway_restart` / `dequeued`) as it starts.
/// Recovery is done once every one of those endings is committed (each
/// session's `Flush` answers then); until then the gateway answers nothing
/// (`Lifecycle::recovered`), so no client can read a turn that looks
/// still running. Sessions are brought up a few at a time: their loads and
/// their first appends overlap, and the writer commits them in batches.
pub(super) fn end_interrupted_turns(ctx: &Ctx, registry: &ActorRef<RegistryMsg>) {
    let ctx = ctx.clone();
    let registry = registry.clone();
    ctx.lifecycle.set_recovered(false);
    tokio::spawn(async move {
        let sessions = match ctx.reader.sessions_with_turn_marker().await {
            Ok(s) => s,
            Err(e) => {
                // Serve anyway: the sessions still end their turns when a
                // client brings them live, and readyz tells the store's state.
                warn!(error = %e, "could not look for interrupted turns");
                ctx.lifecycle.set_recovered(true);
                return;
            }
        };
        let count = sessions.len();
        let ended = futures::stream::iter(sessions)
            .map(|key| recover_one(&registry, key))
            .buffer_unordered(RECOVER_AT_ONCE)
            .filter(|ok| futures::future::ready(*ok))
            .count()
            .await;
        if count > 0 {
            info!(
                sessions = count,
                recovered = ended,
                "turns cut short by the last stop are ended"
            );
        }
        ctx.lifecycle.set_recovered(true);
    });
}

/// Sessions brought live at once during recovery.
const RECOVER_AT_ONCE: usize = 32;
/// A session's recovery that takes longer is logged and left to finish on
/// its own (the gateway then serves; that session's reads may still show
/// its turn running until its writes land).
const RECOVER_DEADLINE: Duration = Duration::from_secs(30);

/// Brings one session live and waits until what it wrote on start is
/// committed; whether that happened.
async fn recover_one(registry: &ActorRef<RegistryMsg>, key: SessionKey) -> bool {
    let session_id = key.1.clone();
    debug!(session_id = %session_id, profile = %key.0, "session had turns running at the last stop");
    // The calls inside take no bound of their own: the whole is bounded by
    // `RECOVER_DEADLINE` below.
    let work = async {
        let (tx, flushed) = tokio::sync::oneshot::channel();
        let forwarded = registry
            .call(
                |reply| RegistryMsg::Forward {
                    key,
                    load: true,
                    msg: SessionMsg::Flush { reply: tx.into() },
                    reply,
                },
                None,
            )
            .await;
        match forwarded {
            Ok(ractor::rpc::CallResult::Success(Ok(Resolved::Live(_)))) => flushed.await.is_ok(),
            // Closed or gone since: nothing of it is running.
            Ok(ractor::rpc::CallResult::Success(Ok(_))) => true,
            _ => false,
        }
    };
    match tokio::time::timeout(RECOVER_DEADLINE, work).await {
        Ok(true) => true,
        Ok(false) => {
            warn!(session_id = %session_id, "could not end the turns a stop cut short");
            false
        }
        Err(_) => {
            warn!(session_id = %session_id, "ending the turns a stop cut short is taking long; serving meanwhile");
            false
        }
    }
}

impl RegistryState {
    pub(super) async fn loaded(
        &mut self,
        myself: &ActorRef<RegistryMsg>,
        key: SessionKey,
        result: Result<Option<Loaded>, StoreError>,
    ) {
        let waiting = self.loading.remove(&key).unwrap_or_default();
        // Live already (created while this load read the row): one actor
        // per session, so the requests go to that one.
        if let Some(live) = self.live.get_mut(&key) {
            for routed in waiting {
                live.take(routed);
            }
            return;
        }
        // Being created (the row this load read is that create's): the
        // requests wait for the new session, whose generation is the newer.
        if let Some((_, held)) = self.creating.get_mut(&key) {
            held.extend(waiting);
            return;
        }
        let answer = match result {
            Err(e) => Err(e.into()),
            Ok(None) => Ok(Resolved::NotFound),
            Ok(Some(loaded))
                if loaded.row.status == SessionStatus::Closed
                    && loaded.row.turn_marker.is_none() =>
            {
                Ok(Resolved::Closed(Box::new(loaded.row)))
            }
            Ok(Some(Loaded {
                mut row,
                barrier,
                todos,
                claimed,
            })) => {
                let following = matches!(claimed, Some(crate::node::Claimed::Follower { .. }));
                let was_parked = row.status == SessionStatus::Parked;
                if was_parked {
                    // Live again. A follower found its owner parking it (the
                    // release follows the park's patch): live here all the
                    // same.
                    row.status = SessionStatus::Idle;
                }
                // Say so in the store too (listings read it); only an owner
                // writes (a follower that takes a parked session over
                // patches it then, `session/cluster/follow.rs`).
                if was_parked && !following {
                    if let Some(writer) = self.ctx.writer() {
                        let _ = writer.cast(crate::store_writer::StoreWriterMsg::Patch {
                            session_id: row.id.clone(),
                            patch: tether_store::SessionPatch {
                                status: Some(SessionStatus::Idle),
                                ..Default::default()
                            },
                            reply: None,
                        });
                    }
                }
                let spawned = self
                    .spawn_session(
                        myself,
                        key.clone(),
                        Loaded {
                            row,
                            barrier,
                            todos,
                            claimed,
                        },
                        Vec::new(),
                    )
                    .await;
                match (spawned, self.live.get_mut(&key)) {
                    (Ok(_), Some(live)) => {
                        // In the order they came, ahead of anything the
                        // reaper may ask of the new session.
                        for routed in waiting {
                            live.take(routed);
                        }
                        return;
                    }
                    (Ok(_), None) => Err(RpcError::internal("the session stopped as it started")),
                    (Err(e), _) => Err(e),
                }
            }
        };
        for routed in waiting {
            let _ = routed.reply.send(answer.clone());
        }
    }

    pub(super) async fn spawn_session(
        &mut self,
        myself: &ActorRef<RegistryMsg>,
        key: SessionKey,
        loaded: Loaded,
        initial: Vec<EventRecord>,
    ) -> Result<ActorRef<SessionMsg>, RpcError> {
        let Loaded {
            row,
            barrier,
            todos,
            claimed,
        } = loaded;
        let gauges = Arc::new(SessionGauges::default());
        let follows = matches!(claimed, Some(crate::node::Claimed::Follower { .. }));
        let args = SessionArgs {
            row,
            todos,
            barrier,
            initial,
            ctx: self.ctx.clone(),
            gauges: gauges.clone(),
            claimed,
        };
        let (actor, _) = Actor::spawn_linked(None, Session, args, myself.get_cell())
            .await
            .map_err(|e| RpcError::internal(format!("session failed to start: {e}")))?;
        debug!(session_id = %key.1, profile = %key.0, "session brought live");
        self.by_actor.insert(actor.get_id(), key.clone());
        if follows {
            self.followers.insert(key.1.clone(), key.clone());
        }
        self.by_id.insert(key.1.clone(), key.clone());
        self.live.insert(
            key.clone(),
            Live {
                actor: actor.clone(),
                gauges,
                // Counted whatever the limit says: it was accepted (a
                // new one passed the limit in `commit_new`).
                _counted: self.ctx.profiles.live_session(&key.0),
                held: None,
            },
        );
        // The bound first: the gauge never shows the count past it.
        self.enforce_bound(myself, Some(&key));
        self.report_live_count();
        Ok(actor)
    }
}
