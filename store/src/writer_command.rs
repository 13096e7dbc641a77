//! What a writer handle asks its writer (the SQLite store's thread, the PostgreSQL store's
//! task): the two calls of [`StoreWrite`](crate::StoreWrite), each with the channel its answer
//! comes back on. One type, so that both writers answer the same requests.

use tether_protocol::SessionId;
use tokio::sync::oneshot;

use crate::{StoreError, WriteOp};

pub(crate) enum WriterCommand {
    /// Commit a batch; one result per op, in order.
    Commit {
        ops: Vec<WriteOp>,
        reply: oneshot::Sender<Vec<Result<(), StoreError>>>,
    },
    /// The session's latest committed seq, as the writer's connection sees it.
    LatestSeq {
        session_id: SessionId,
        reply: oneshot::Sender<Result<u64, StoreError>>,
    },
}
