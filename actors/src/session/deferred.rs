//! An answer held until what its request wrote is on disk.
//!
//! A reply that reports a durable change (a prompt accepted, a turn
//! interrupted, a compaction made) is only true once that change is
//! committed: a client that acts on it (resumes, reads the events,
//! crashes and comes back) must find it there. So such a request builds
//! its answer when it runs, and the session sends it from the commit
//! pipeline once the request's last event is on disk, or sends the
//! storage error instead if that event was not written.

use ractor::RpcReplyPort;
use tether_protocol::RpcError;

/// A request's answer, ready to send once its events are committed.
pub(crate) struct Deferred(Box<dyn FnOnce(Result<(), RpcError>) + Send>);

impl Deferred {
    /// `result` for `reply`, sent once committed.
    pub(crate) fn new<T: Send + 'static>(
        reply: RpcReplyPort<Result<T, RpcError>>,
        result: T,
    ) -> Self {
        Deferred(Box::new(move |outcome: Result<(), RpcError>| {
            let _ = reply.send(outcome.map(|()| result));
        }))
    }

    /// Sends the answer: the result when `outcome` is `Ok` (its events are
    /// on disk), else the error (they were not written).
    pub(crate) fn send(self, outcome: Result<(), RpcError>) {
        (self.0)(outcome)
    }
}

impl std::fmt::Debug for Deferred {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Deferred")
    }
}
