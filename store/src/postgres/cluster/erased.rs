//! Telling every node that some or all of a session was erased:
//! `pg_notify('tether_erased', '<session>')`, sent inside the transaction that removes the
//! session's row (a delete) or moves its `retained_from_seq` (each batch of a trim, in
//! `postgres/erase.rs`), so it is delivered exactly when that is committed, never for one
//! that rolled back.
//!
//! Like every notification it is a hint: a node that holds the session live reads the row
//! and acts on what it finds (no row: deleted; a later `retained_from_seq`: trimmed). One
//! lost while a listener reconnected is made up by the [`super::Wake::Resync`] that follows,
//! on which every follower reads its row again.

use sqlx::PgConnection;

use crate::postgres::errors::map_sqlx;
use crate::StoreError;

/// The channel of erased sessions.
pub const ERASED_CHANNEL: &str = "tether_erased";

/// Notifies, on commit of `conn`'s transaction, that session `id` is erased.
pub(crate) async fn notify(conn: &mut PgConnection, id: &str) -> Result<(), StoreError> {
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(ERASED_CHANNEL)
        .bind(id)
        .execute(conn)
        .await
        .map_err(map_sqlx)?;
    Ok(())
}
