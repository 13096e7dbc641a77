//! The SQLite store's reads: the shared [`Reader`] over the read-only pool, with the index
//! hints SQLite's planner needs. Under WAL each read sees the last committed state without
//! blocking (or being blocked by) the writer.

use sqlx::sqlite::{Sqlite, SqlitePool};

use crate::reader::Reader;
use crate::reads::IndexHints;
use crate::StoreError;

use super::errors::{map_sqlx, Doing};

/// Left to itself, the planner walks a session's whole event range in the primary key to
/// find its latest compaction (~45 ms at 200k events) instead of using the partial index of
/// compactions (~10 µs); the partial indexes of todo snapshots and turn markers make those
/// reads one seek too.
const HINTS: IndexHints = IndexHints {
    compactions: "INDEXED BY events_compactions",
    todos: "INDEXED BY events_todos",
    turn_markers: "INDEXED BY sessions_with_turn_marker",
};

/// The reader keeps the background checkpointer's stop: dropped with the reader, it stops it.
pub(crate) type SqliteReader = Reader<Sqlite, tokio::sync::oneshot::Sender<()>>;

fn read_err(e: sqlx::Error) -> StoreError {
    map_sqlx(e, Doing::Read)
}

pub(crate) fn new(
    pool: SqlitePool,
    epoch: String,
    stop_checkpoints: tokio::sync::oneshot::Sender<()>,
) -> SqliteReader {
    Reader::new(pool, epoch, &HINTS, read_err, stop_checkpoints)
}
