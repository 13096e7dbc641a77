//! What the store's code written once for both databases (`reader.rs`, `erase/`, `handoff/`)
//! needs of a sqlx database beyond sqlx's own traits.

use crate::StoreError;

/// Maps a driver error to the store's (each store says how its errors read).
pub(crate) type MapErr = fn(sqlx::Error) -> StoreError;

/// The rows a statement changed: each driver's result says it, under no common trait.
pub(crate) trait Affected {
    fn rows(&self) -> u64;
}

impl Affected for sqlx::sqlite::SqliteQueryResult {
    fn rows(&self) -> u64 {
        self.rows_affected()
    }
}

impl Affected for sqlx::postgres::PgQueryResult {
    fn rows(&self) -> u64 {
        self.rows_affected()
    }
}
