//! The handoff statements of the PostgreSQL store ([`HandoffDialect`]); what their answers
//! mean is decided once for both dialects, in `handoff/dialect.rs`.
//!
//! As in SQLite (`sqlite/handoffs.rs` says why), transitions do not go through the writer: each
//! is one statement on a small pool of its own. Under READ COMMITTED two statements can run at
//! once, so each transition stays a compare-and-set by itself: the state it moves from is in
//! its WHERE clause (re-checked by the server on a row another transaction just changed), a
//! claim skips rows another claim has locked (`FOR UPDATE SKIP LOCKED`: two claims never return
//! the same handoff, and neither waits for the other), and the partial unique index of
//! `0003_handoffs.sql` keeps two racing requests from both inserting.
//!
//! On a cluster node (`cluster/`), `request` is a write of the session by its owner: it runs
//! in a transaction that first locks the session's ownership row and checks node and fence,
//! like the writer's batches, and answers [`StoreError::NotOwner`] otherwise. The other
//! transitions (`claim`, `complete`, `fail`) touch only the handoff row, by compare-and-set on
//! its state, so they are already safe with several nodes at once and stay unfenced.

use async_trait::async_trait;
use sqlx::postgres::{PgPool, Postgres};
use sqlx::query::Query;
use sqlx::{IntoArguments, Pool};

use tether_protocol::SessionId;

use crate::handoff::{HandoffSql, Handoffs, Insert, Ordering, Plain, Statements};
use crate::StoreError;

use super::errors::map_sqlx;
use super::fencing::{self as fenced, Fencing};

/// The [`HandoffStore`](crate::HandoffStore) of the PostgreSQL store: the shared queue
/// (`handoff/dialect.rs`) over the shared statements (`handoff/statements.rs`), on the handoff
/// pool.
pub(crate) type PgHandoffs = Handoffs<Statements<Postgres, PgInsert>>;

/// Insertion order is the `ord` sequence; a claim skips rows another claim has locked.
const ORDERING: Ordering = Ordering {
    inserted: "ord",
    claim_lock: "FOR UPDATE SKIP LOCKED",
};

/// How a request's INSERT runs: as it is on a single gateway, fenced on a cluster node
/// (module doc).
pub(crate) enum PgInsert {
    Plain,
    Fenced(Fencing),
}

/// A single gateway's handoff queue.
pub(crate) fn new(pool: PgPool) -> PgHandoffs {
    over(pool, PgInsert::Plain)
}

/// A cluster node's handoff queue (module doc).
pub(crate) fn fenced(pool: PgPool, fencing: Fencing) -> PgHandoffs {
    over(pool, PgInsert::Fenced(fencing))
}

fn over(pool: PgPool, insert: PgInsert) -> PgHandoffs {
    let sql = HandoffSql::new(&ORDERING);
    Handoffs::over(Statements::new(pool, sql, map_sqlx, map_sqlx, insert))
}

#[async_trait]
impl Insert<Postgres> for PgInsert {
    async fn insert<'q>(
        &self,
        pool: &Pool<Postgres>,
        query: Query<'q, Postgres, <Postgres as sqlx::Database>::Arguments<'q>>,
        session_id: &SessionId,
    ) -> Result<u64, StoreError>
    where
        <Postgres as sqlx::Database>::Arguments<'q>: IntoArguments<'q, Postgres>,
    {
        let fencing = match self {
            PgInsert::Plain => return Plain(map_sqlx).insert(pool, query, session_id).await,
            PgInsert::Fenced(fencing) => fencing,
        };
        // The insert, in a transaction that holds the session's ownership row under this
        // node's fence.
        let Some(fence) = fencing.fences.get(session_id) else {
            return Err(StoreError::NotOwner {
                session_id: session_id.clone(),
                fence: 0,
            });
        };
        let mut tx = pool.begin().await.map_err(map_sqlx)?;
        let refused = fenced::check(&mut tx, &fencing.node, &[(session_id.as_str(), fence)])
            .await
            .map_err(map_sqlx)?;
        if let Some(e) = refused.into_values().next() {
            fencing.fences.forget(session_id, fence);
            return Err(e);
        }
        let done = query.execute(&mut *tx).await.map_err(map_sqlx)?;
        tx.commit().await.map_err(map_sqlx)?;
        Ok(done.rows_affected())
    }
}
