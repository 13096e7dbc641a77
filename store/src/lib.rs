//! tether persistence: the Store API and its SQLite and PostgreSQL implementations.
//!
//! The store knows nothing of actors. It offers two halves:
//!
//! - [`StoreWrite`]: the one writer connection, owned by the StoreWriter actor, which
//!   group-commits batches of [`WriteOp`]s: each op atomic and independent of the others, a batch
//!   costing about one durable commit.
//! - [`StoreRead`]: reads over a small pool, shared by every task that needs them.
//!
//! Beside them, [`HandoffStore`]: the handoff work queue, whose transitions are single-statement
//! compare-and-sets on a connection of their own (why: `sqlite/handoffs.rs`).
//!
//! The traits are dialect-neutral: SQLite ([`open_sqlite`]) is the embedded default, PostgreSQL
//! ([`open_postgres`]) sits behind the same traits. A gateway opens its store with [`open`], the
//! one place that picks the backend. SQL lives only in `sqlite/` and `postgres/`.
//!
//! Errors are [`StoreError`]s whose [`code`](StoreError::code) is the wire code (5070/5071/5072).
#![warn(missing_docs)]

mod api;
#[cfg(feature = "cli")]
mod cli;
mod columns;
mod config;
mod cursor;
mod erase;
mod error;
mod generic;
mod handoff;
mod lock;
mod model;
mod open;
mod open_error;
mod paging;
mod postgres;
mod reader;
mod reads;
mod rows;
mod rules;
mod served;
mod sqlite;
mod writer_command;

pub use api::{Opened, StoreRead, StoreWrite};
pub use config::{PageSize, PostgresConfig, StoreConfig, Synchronous};
pub use cursor::list_cursor_after;
pub use erase::{Idle, Scope, StoreErase, Trimmed};
pub use error::StoreError;
pub use handoff::{
    truncate_utf8, CompleteOutcome, FailOutcome, HandoffRow, HandoffStore, RequestOutcome,
    MAX_HANDOFF_ERROR_BYTES,
};
pub use lock::{LockError, StoreLock, LOCK_FILE};
pub use model::{EventRow, NewSession, SessionPatch, SessionRow, WriteOp};
pub use open::{open, Backend, Store, WriterFactory};
pub use open_error::OpenError;
pub use postgres::{open_postgres, open_postgres_writer};
pub use served::SERVED_FILE;
pub use sqlite::backup::{backup_sqlite, BackupError, BackupReport, DEFAULT_PACE_MIB_S};
pub use sqlite::checkpoint::truncate_wal;
pub use sqlite::erase::vacuum_sqlite;
pub use sqlite::restore::{restore_sqlite, RestoreError, RestoreReport};
pub use sqlite::{open_sqlite, open_sqlite_writer};
/// A database URL as it may be shown: the one masking rule of
/// [`tether_protocol::mask_urls`].
pub use tether_protocol::mask_urls as mask_url;

#[doc(hidden)]
#[cfg(feature = "testing")]
pub mod testing;

/// Several gateways (nodes) on one PostgreSQL: nodes, leases, claims with fences, fenced
/// writers, event notifications, forwarded requests and transient events across nodes
/// (`postgres/cluster/`).
pub mod cluster {
    pub use crate::postgres::cluster::{
        parse_notification, Claim, Cluster, ClusterConfig, ClusterError, Deltas, EventListener,
        Fences, ForwardId, ForwardRow, ForwardState, ForwardWriteError, Heartbeat, NodeId,
        Ownership, PreviousOwner, Wake, CHANNEL, DELTA_CHANNEL, FORWARD_CHANNEL, MAX_DELTA_BODY,
    };
}
