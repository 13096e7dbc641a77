//! The requests that change a session (the protocol's [`SessionWrite`]s):
//! each kind is a [`Write`], implemented beside the state it changes
//! (`turns.rs` for `prompt.submit`, `close.rs` for `session.close`, …).
//! The session runs one with [`SessionWrite::dispatch`], which needs a
//! `Write` for every write of the protocol's method table: a method added
//! there without its handler does not build.
//!
//! A write reaches its session as [`SessionMsg::Write`]. On a cluster the
//! owner runs it; a node that only follows the session forwards it there as
//! the protocol's own request, and the owner runs it through the same
//! handler (`cluster/`). Every write answers once what it wrote is on disk.

use std::marker::PhantomData;
use std::time::Duration;

use ractor::{ActorRef, MessagingErr, RpcReplyPort};
use serde::Serialize;
use serde_json::value::RawValue;
use tether_protocol::{to_raw, HandleWrite, RpcError, SessionWrite};
use tether_store::cluster::ForwardId;

use super::{SessionMsg, SessionState};
use crate::config::GatewayConfig;

/// Where a write's answer goes, as the JSON the client gets: the peer that
/// asked passes it on as it is, a forward stores it for its forwarder.
pub(crate) type WriteReply = RpcReplyPort<Result<Box<RawValue>, RpcError>>;

/// A write's answer port, typed for its handler.
pub(crate) struct Reply<T> {
    port: WriteReply,
    /// The forward it answers, for a write another node forwarded: one
    /// deferred past its handler carries it, so that the forward is
    /// accepted with its first event whenever that is written
    /// (`cluster/forwarded.rs`).
    forward: Option<ForwardId>,
    answer: PhantomData<fn(T)>,
}

impl<T: Serialize> Reply<T> {
    pub(crate) fn new(port: WriteReply) -> Self {
        Reply {
            port,
            forward: None,
            answer: PhantomData,
        }
    }

    /// The reply of a write run for forward `id`.
    pub(crate) fn forwarded(port: WriteReply, id: ForwardId) -> Self {
        Reply {
            port,
            forward: Some(id),
            answer: PhantomData,
        }
    }

    /// The forward this write answers, if it was forwarded.
    pub(crate) fn forward(&self) -> Option<&ForwardId> {
        self.forward.as_ref()
    }

    /// Sends the answer (encoded here, once).
    pub(crate) fn send(
        self,
        result: Result<T, RpcError>,
    ) -> Result<(), MessagingErr<Result<Box<RawValue>, RpcError>>> {
        self.port.send(result.map(|answer| to_raw(&answer)))
    }

    /// The port, for an answer already encoded.
    pub(super) fn into_port(self) -> WriteReply {
        self.port
    }
}

impl<T> std::fmt::Debug for Reply<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Reply")
    }
}

/// What a write's first write is: what a forwarded one is accepted with,
/// so that it never runs twice and one the forwarder withdrew never runs
/// (docs/ARCHITECTURE.md, "Forwarding").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FirstWrite {
    /// An event it emits while it runs, if it writes at all: a forward of
    /// it is accepted in that event's transaction.
    Event,
    /// Something else, or later (a handoff row, a new session, the event a
    /// host's answer brings): a forward of it is accepted before it runs.
    Elsewhere,
}

/// One kind of request that changes a session, as the session runs it.
pub(crate) trait Write: Into<SessionWrite> + Send + 'static {
    /// Its result, as PROTOCOL 1.4 gives it.
    type Answer: Serialize + Send + 'static;
    /// What its first write is.
    const FIRST_WRITE: FirstWrite;
    /// Runs it on this session (its owner) and answers `reply`, once what
    /// it wrote is on disk.
    fn run(
        self,
        session: &mut SessionState,
        myself: &ActorRef<SessionMsg>,
        reply: Reply<Self::Answer>,
    );
}

/// Runs a write on this session, its owner.
pub(super) struct Run<'a> {
    pub state: &'a mut SessionState,
    pub myself: &'a ActorRef<SessionMsg>,
    pub reply: WriteReply,
}

impl<P: Write> HandleWrite<P> for Run<'_> {
    type Output = ();

    fn handle(self, params: P) {
        params.run(self.state, self.myself, Reply::new(self.reply));
    }
}

impl SessionState {
    /// Runs `write` here (on a follower, `SessionMsg::Write` is forwarded
    /// before it gets here).
    pub(super) fn write(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        write: SessionWrite,
        reply: WriteReply,
    ) {
        write.dispatch(Run {
            state: self,
            myself,
            reply,
        });
    }
}

/// How long past the call timeout a write may take: a compression waits
/// for its host up to the compress wait; the others wait for nobody.
pub(crate) fn host_wait(write: &SessionWrite, config: &GatewayConfig) -> Duration {
    match write {
        SessionWrite::SessionCompress(_) => config.compress_wait,
        _ => Duration::ZERO,
    }
}
