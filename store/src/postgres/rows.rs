//! Row → model conversions of the PostgreSQL store: the same columns as SQLite's, in the same
//! order (`crate::columns`, selected by the shared `crate::reads`), decoded by the same code
//! (`crate::rows`). Nothing here is PostgreSQL's own; the module names what this dialect's reads
//! decode with, as `sqlite/rows.rs` does for SQLite.

pub(crate) use crate::rows::{event_from_row, session_from_row, StoreRow};
