//! What the store's code written once for both databases (`reader.rs`, `erase/`, `handoff/`)
//! needs of a sqlx database beyond sqlx's own traits.

use sqlx::query::Query;
use sqlx::{Database, Executor, IntoArguments, Pool};

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

/// Runs a read that answers with at most one row, decoded by `decode`.
pub(crate) async fn optional<'q, DB, T>(
    pool: &Pool<DB>,
    query: Query<'q, DB, DB::Arguments<'q>>,
    map_err: MapErr,
    decode: impl Fn(&DB::Row) -> Result<T, StoreError>,
) -> Result<Option<T>, StoreError>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    DB::Arguments<'q>: IntoArguments<'q, DB>,
{
    let row = query.fetch_optional(pool).await.map_err(map_err)?;
    row.as_ref().map(decode).transpose()
}

/// Runs a read and decodes every row it answers.
pub(crate) async fn all<'q, DB, T>(
    pool: &Pool<DB>,
    query: Query<'q, DB, DB::Arguments<'q>>,
    map_err: MapErr,
    decode: impl Fn(&DB::Row) -> Result<T, StoreError>,
) -> Result<Vec<T>, StoreError>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    DB::Arguments<'q>: IntoArguments<'q, DB>,
{
    let rows = query.fetch_all(pool).await.map_err(map_err)?;
    rows.iter().map(decode).collect()
}
