//! The store's one error type.
//!
//! Every variant maps to exactly one wire error code (PROTOCOL.md 1.6), so a caller that only
//! wants to answer a request can do `err.code()` and never look at SQL details. The variants
//! carry a human-readable message (already stripped of anything dialect-specific beyond the
//! database's own text) and are `Clone` because one failed COMMIT fails every op of its batch.

use tether_protocol::{codes, RpcError, SessionId};

/// What went wrong in the store. See [`StoreError::code`] for the wire mapping.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The disk (or the database's size limit) is full: nothing of the failed write exists.
    #[error("storage full: {0}")]
    Full(String),
    /// An I/O error, a read-only or corrupt database, or a file that cannot be opened for writing.
    #[error("storage I/O error: {0}")]
    Io(String),
    /// The store cannot be reached right now (pool closed or exhausted, lock wait timed out,
    /// database cannot be opened). Retrying later may work.
    #[error("storage unavailable: {0}")]
    Unavailable(String),
    /// The write collides with what is already stored (e.g. a seq or session id already used).
    #[error("storage conflict: {0}")]
    Conflict(String),
    /// A new session was to take an id whose previous life is still being erased (its events
    /// go in batches after its row: `erase.rs`). Nothing was written; the same create succeeds
    /// once the erase is done, which takes a moment, so the caller may wait and retry.
    #[error("session id {0} is still being erased; retry shortly")]
    Erasing(SessionId),
    /// The request or the stored data is malformed (e.g. non-contiguous seqs, a bad cursor,
    /// an unknown status string in a row).
    #[error("invalid store data: {0}")]
    Invalid(String),
    /// Cluster mode (PostgreSQL, several gateways): this node does not own `session_id` under
    /// `fence` (the fence it held, 0 for none), because another node claimed it since or it was
    /// never claimed here. Nothing of the op was written by this node. The caller stops acting
    /// as the session's owner (docs/ARCHITECTURE.md, "Cluster (in progress)"). Never produced by
    /// a single gateway.
    #[error("this node does not own session {session_id} (fence {fence})")]
    NotOwner {
        /// The session written to.
        session_id: SessionId,
        /// The fence the writer held for it (0: none).
        fence: u64,
    },
    /// Cluster mode: the op was to accept the forwarded request `forward_id` (the request's
    /// first write, the event at `seq`), but the forward is past its deadline, withdrawn by
    /// its forwarder, or not of this session. Nothing of the op was written, nor of the later
    /// ops of its session in the batch; the request must not run. Earlier ops of the session
    /// are not affected.
    #[error("forwarded request {forward_id} can no longer be accepted")]
    ForwardRefused {
        /// The forward.
        forward_id: String,
        /// The seq of the event whose write was to accept it.
        seq: u64,
    },
    /// Cluster mode: the op would park `session_id`, but live nodes still have `peers` peers
    /// attached to it (docs/ARCHITECTURE.md "Liveness of peers"). Nothing of the op was written; the session
    /// stays live.
    #[error("session {session_id} still has {peers} peers attached on live nodes")]
    InUse {
        /// The session.
        session_id: SessionId,
        /// Peers attached over all live nodes.
        peers: u64,
    },
}

impl StoreError {
    /// The JSON-RPC error code this error is reported as: 5070 full, 5072 unavailable, 5071 for
    /// everything else (a write that failed without writing anything).
    pub fn code(&self) -> i64 {
        match self {
            StoreError::Full(_) => codes::STORAGE_FULL,
            StoreError::Io(_)
            | StoreError::Conflict(_)
            | StoreError::Invalid(_)
            | StoreError::InUse { .. } => codes::STORAGE_WRITE_FAILED,
            // Busy, not failed: the id is free once its old life is erased.
            StoreError::Erasing(_) => codes::SESSION_BUSY,
            // Retrying on the session's new owner works; the caller forwards there.
            StoreError::Unavailable(_) | StoreError::NotOwner { .. } => codes::STORAGE_UNAVAILABLE,
            // A forward the owner did not take in time did not run, and a retry may (PROTOCOL
            // "Requests that change a session run on its owner"). Its deadline passes while the
            // store is down, so an outage ends some forwarded prompts here, and the client
            // must hear the outage's 5072, not a failed write's 5071.
            StoreError::ForwardRefused { .. } => codes::STORAGE_UNAVAILABLE,
        }
    }
}

/// How a store failure is answered on the wire: its code (see [`StoreError::code`]) and its
/// message. The one conversion every request path uses, so a failed read or write reads the
/// same whichever method hit it.
impl From<StoreError> for RpcError {
    fn from(e: StoreError) -> Self {
        let retry = e.retry_after_ms();
        let err = RpcError::new(e.code(), e.to_string());
        match retry {
            Some(ms) => err.with_data(serde_json::json!({ "retry_after_ms": ms })),
            None => err,
        }
    }
}

impl StoreError {
    /// How long a caller should wait before trying again, where waiting alone helps.
    pub fn retry_after_ms(&self) -> Option<u64> {
        match self {
            // An erase removes 2,000 events a transaction, a few ms each.
            StoreError::Erasing(_) => Some(ERASING_RETRY_MS),
            _ => None,
        }
    }
}

/// The retry hint of [`StoreError::Erasing`].
pub const ERASING_RETRY_MS: u64 = 250;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_follow_the_protocol_table() {
        assert_eq!(StoreError::Full("x".into()).code(), 5070);
        assert_eq!(StoreError::Io("x".into()).code(), 5071);
        assert_eq!(StoreError::Conflict("x".into()).code(), 5071);
        assert_eq!(StoreError::Invalid("x".into()).code(), 5071);
        assert_eq!(StoreError::Unavailable("x".into()).code(), 5072);
        // An id still being erased is busy, and says when to retry.
        let erasing = StoreError::Erasing(SessionId::from("s_1"));
        assert_eq!(erasing.code(), 4009);
        let rpc = RpcError::from(erasing);
        assert_eq!(
            rpc.data.as_ref().and_then(|d| d["retry_after_ms"].as_u64()),
            Some(ERASING_RETRY_MS)
        );
        let lost = StoreError::NotOwner {
            session_id: SessionId::from("s_1"),
            fence: 3,
        };
        assert_eq!(lost.code(), 5072);
        // A forward not taken in time did not run: retry (PROTOCOL.md).
        let late = StoreError::ForwardRefused {
            forward_id: "f_1".into(),
            seq: 7,
        };
        assert_eq!(late.code(), 5072);
    }

    #[test]
    fn a_store_error_answers_with_its_code_and_message() {
        let e = RpcError::from(StoreError::Full("disk".into()));
        assert_eq!(e.code, 5070);
        assert_eq!(e.message, "storage full: disk");
        assert!(e.data.is_none());
    }
}
