//! Routing requests to sessions: the one owner of "the session parked
//! between the lookup and the message".
//!
//! Every request for a session (a peer's `session.resume`, `prompt.submit`,
//! `session.events.since`, a handoff's announcement, ...) reaches the
//! session's actor through here, as a [`RegistryMsg::Forward`] that carries
//! the message itself; the registry puts it in the session's mailbox from
//! its own handler. A park is asked from the same handler, so the
//! registry's mailbox orders the two:
//!
//! - a request forwarded before the park is ahead of it in the session's
//!   mailbox and is handled first (a resume that attaches, or a submit, then
//!   makes the session refuse the park: parking still never happens with a
//!   peer attached or a turn running);
//! - from the moment the park is asked until the session answers it, new
//!   requests wait in [`Live::held`]. A refused park delivers them, in
//!   order, to the same actor; a park that happened keeps them until the
//!   actor is gone, and then they go to the session brought back from the
//!   store (or, for a request that does not load, are answered from it);
//! - a session that stops by itself (its close committed) drains its
//!   mailbox first: whatever was admitted is handled by it, and whatever it
//!   refuses comes back here (ractor returns the message) and waits until
//!   the actor is gone, like a parked session's.
//!
//! So a request is never lost to a park, never handled twice, and never
//! reaches a second live actor of its session: a new one is spawned only
//! once the old one has left the map. Nothing here depends on timing.

use ractor::{ActorCell, ActorId, ActorRef, MessagingErr, RpcReplyPort};
use tether_protocol::{RpcError, SessionStatus};
use tracing::{debug, info};

use super::load::load_session;
use super::{Live, LiveSession, RegistryMsg, RegistryState, Resolved, SessionKey};
use crate::reaper::{ParkReason, ReaperMsg};
use crate::session::SessionMsg;

/// Where a request went, for whoever waits for it.
pub(super) type RouteReply = RpcReplyPort<Result<Resolved, RpcError>>;

/// A request on its way to a session.
pub(crate) struct Routed {
    /// Bring a stored session live for it (else it is answered `Stored`).
    pub(super) load: bool,
    /// The message for the session; `None` for a plain lookup.
    pub(super) msg: Option<SessionMsg>,
    pub(super) reply: RouteReply,
}

impl Routed {
    /// `Resolve`: a lookup, answered with what was found.
    pub(super) fn lookup(load: bool, reply: RouteReply) -> Self {
        Routed {
            load,
            msg: None,
            reply,
        }
    }

    /// `Forward`: `msg` for the session.
    pub(super) fn forward(load: bool, msg: SessionMsg, reply: RouteReply) -> Self {
        Routed {
            load,
            msg: Some(msg),
            reply,
        }
    }

    /// Its caller stopped waiting (timed out, or its peer is gone). A held
    /// request that nobody waits for any more is dropped, not run: that
    /// also ends the loop a session that keeps failing as it starts would
    /// make of one held request.
    fn abandoned(&self) -> bool {
        self.reply.is_closed()
    }
}

impl Live {
    /// Hands a request to this session: held while a park is undecided or
    /// the actor is stopping, delivered otherwise.
    pub(super) fn take(&mut self, routed: Routed) {
        if routed.abandoned() {
            return;
        }
        match &mut self.held {
            Some(held) => held.push(routed),
            None => self.deliver(routed),
        }
    }

    /// Puts the message in the actor's mailbox and tells the caller which
    /// actor has it. An actor that is stopping refuses it (and gives it
    /// back): it then waits here until the actor has left the map.
    fn deliver(&mut self, routed: Routed) {
        let Routed { load, msg, reply } = routed;
        if let Some(msg) = msg {
            match self.actor.cast(msg) {
                Ok(()) => {}
                Err(MessagingErr::SendErr(msg)) => {
                    // The supervision event that follows re-routes it.
                    let held = self.held.get_or_insert_with(Vec::new);
                    held.push(Routed {
                        load,
                        msg: Some(msg),
                        reply,
                    });
                    return;
                }
                Err(_) => {
                    let _ = reply.send(Err(RpcError::internal(
                        "the session's actor could not take the request",
                    )));
                    return;
                }
            }
        }
        let _ = reply.send(Ok(Resolved::Live(LiveSession {
            actor: self.actor.clone(),
        })));
    }
}

impl RegistryState {
    /// Sends a request on to its session, bringing it live if asked.
    pub(super) fn route(&mut self, myself: &ActorRef<RegistryMsg>, key: SessionKey, r: Routed) {
        if r.abandoned() {
            return;
        }
        if let Some(live) = self.live.get_mut(&key) {
            live.take(r);
        } else if let Some((_, held)) = self.creating.get_mut(&key) {
            // Being created: it goes to the new session (`create.rs`).
            held.push(r);
        } else if r.load {
            self.load(myself, key, vec![r]);
        } else {
            self.resolve_stored(key, r.reply);
        }
    }

    /// Reads the row on a task; the caller only needs stored data.
    fn resolve_stored(&self, key: SessionKey, reply: RouteReply) {
        let reader = self.ctx.reader.clone();
        tokio::spawn(async move {
            let found = reader.get_session(&key.0, &key.1).await;
            let _ = reply.send(match found {
                Ok(Some(row)) if row.status == SessionStatus::Closed => {
                    Ok(Resolved::Closed(Box::new(row)))
                }
                Ok(Some(row)) => Ok(Resolved::Stored(Box::new(row))),
                Ok(None) => Ok(Resolved::NotFound),
                Err(e) => Err(e.into()),
            });
        });
    }

    /// Brings a stored session live; concurrent requests share one load and
    /// are delivered in the order they came (`Loaded`).
    fn load(&mut self, myself: &ActorRef<RegistryMsg>, key: SessionKey, waiting: Vec<Routed>) {
        if let Some(queued) = self.loading.get_mut(&key) {
            queued.extend(waiting);
            return;
        }
        self.loading.insert(key.clone(), waiting);
        let reader = self.ctx.reader.clone();
        let writer = self.ctx.writer();
        let cluster = self.ctx.cluster.clone();
        let wait = self.ctx.config.call_timeout;
        let myself = myself.clone();
        tokio::spawn(async move {
            // The barrier inside queues behind a parked session's last
            // patch at the writer, so the row read is current.
            let result = load_session(reader.as_ref(), writer, cluster, &key, wait).await;
            let _ = myself.cast(RegistryMsg::Loaded { key, result });
        });
    }

    /// Asks a session to park. The session has the last word: it refuses
    /// with a peer, a turn or a queued prompt. Requests that come meanwhile
    /// are held (module doc).
    pub(super) fn park(
        &mut self,
        myself: &ActorRef<RegistryMsg>,
        key: SessionKey,
        orphaning: u64,
        reason: ParkReason,
    ) {
        let Some(live) = self.live.get_mut(&key) else {
            return;
        };
        if live.held.is_some() {
            // A park is already undecided, or the actor is stopping: the
            // reaper looks again (and hears `Gone` if it stopped).
            self.park_refused(key, orphaning);
            return;
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        live.held = Some(Vec::new());
        if live
            .actor
            .cast(SessionMsg::Park {
                reason,
                reply: tx.into(),
            })
            .is_err()
        {
            // Stopping already: keep holding until it has left the map.
            self.park_refused(key, orphaning);
            return;
        }
        self.parking.insert(key.clone());
        let actor = live.actor.get_id();
        let myself = myself.clone();
        tokio::spawn(async move {
            // No bound: the session answers a park in the handler that
            // receives it, so this waits only for what is ahead of it in its
            // mailbox; a session that dies first drops the port (not
            // parked). Requests held meanwhile keep their callers' own
            // bounds, and a timeout here could only guess whether it parked.
            let parked = rx.await.unwrap_or(false);
            let _ = myself.cast(RegistryMsg::ParkDone {
                key,
                orphaning,
                actor,
                parked,
            });
        });
        // On its way out: no longer counted as live (`bound.rs`).
        self.report_live_count();
    }

    /// The session answered a park: refused, it takes the held requests in
    /// order; parked, it keeps them until it has left the map (`forget`).
    pub(super) fn park_done(
        &mut self,
        myself: &ActorRef<RegistryMsg>,
        key: SessionKey,
        orphaning: u64,
        actor: ActorId,
        parked: bool,
    ) {
        if !parked {
            self.park_refused(key.clone(), orphaning);
        }
        let Some(live) = self.live.get_mut(&key) else {
            return;
        };
        // An answer of an actor that has been replaced since is stale.
        if parked || live.actor.get_id() != actor {
            return;
        }
        for routed in live.held.take().unwrap_or_default() {
            live.take(routed);
        }
        // Live again: it counts against the bound once more.
        self.parking.remove(&key);
        if orphaning == super::bound::BOUND_ORPHANING {
            self.bound_park_refused(myself, key);
        } else {
            self.report_live_count();
            self.enforce_bound(myself, None);
        }
    }

    fn park_refused(&self, key: SessionKey, orphaning: u64) {
        if let Some(reaper) = self.ctx.reaper() {
            let _ = reaper.cast(ReaperMsg::ParkRefused { key, orphaning });
        }
    }

    /// A session's actor stopped: it leaves the map, and what was held for
    /// it goes to the session brought back (or to the store).
    pub(super) fn forget(&mut self, myself: &ActorRef<RegistryMsg>, cell: &ActorCell, why: &str) {
        let Some(key) = self.by_actor.remove(&cell.get_id()) else {
            return;
        };
        info!(session_id = %key.1, reason = why, "session left the registry");
        if self.followers.get(&key.1) == Some(&key) {
            self.followers.remove(&key.1);
        }
        let held = match self.live.get(&key) {
            Some(live) if live.actor.get_id() == cell.get_id() => {
                if self.by_id.get(&key.1) == Some(&key) {
                    self.by_id.remove(&key.1);
                }
                self.live.remove(&key).and_then(|live| live.held)
            }
            _ => None,
        };
        if let Some(reaper) = self.ctx.reaper() {
            let _ = reaper.cast(ReaperMsg::Gone { key: key.clone() });
        }
        if !self.live.contains_key(&key) {
            self.parking.remove(&key);
            self.bound_refused.remove(&key);
        }
        self.report_live_count();
        let held = held.unwrap_or_default();
        if !held.is_empty() {
            debug!(session_id = %key.1, requests = held.len(), "requests held for a stopped session sent on");
        }
        for routed in held {
            self.route(myself, key.clone(), routed);
        }
    }
}
