//! The row conversions of the SQLite store: the column lists and the checked conversions on the
//! way in (`crate::columns`, shared with PostgreSQL's batches), and the decoders on the way out
//! (`crate::rows`, shared with PostgreSQL's reads). Nothing here is SQLite's own: both schemas
//! name, order and type their columns alike, so a second copy could only drift.

pub(crate) use crate::columns::{json_text, to_i64};
pub(crate) use crate::rows::{event_from_row, session_from_row, StoreRow};
