//! An answer held until what its request wrote is on disk.
//!
//! A reply that reports a durable change (a prompt accepted, a turn
//! interrupted, a compaction made) is only true once that change is
//! committed: a client that acts on it (resumes, reads the events,
//! crashes and comes back) must find it there. So such a request builds
//! its answer when it runs, and the session sends it from the commit
//! pipeline once the request's last event is on disk, or sends the
//! storage error instead if that event was not written.

use serde::Serialize;
use serde_json::value::RawValue;
use tether_protocol::{to_raw, RpcError};

use super::write::{Reply, WriteReply};

/// A request's answer, encoded, ready to send once its events are committed.
#[derive(Debug)]
pub(crate) struct Deferred {
    reply: WriteReply,
    result: Box<RawValue>,
}

impl Deferred {
    /// `result` for `reply`, sent once committed.
    pub(crate) fn new<T: Serialize>(reply: Reply<T>, result: T) -> Self {
        Deferred {
            reply: reply.into_port(),
            result: to_raw(&result),
        }
    }

    /// Sends the answer: the result when `outcome` is `Ok` (its events are
    /// on disk), else the error (they were not written).
    pub(crate) fn send(self, outcome: Result<(), RpcError>) {
        let _ = self.reply.send(outcome.map(|()| self.result));
    }
}
