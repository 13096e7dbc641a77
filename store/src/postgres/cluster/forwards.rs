//! Requests forwarded to a session's owner through the database (docs/ARCHITECTURE.md "Requests").
//!
//! A node that is not the owner writes the request into `forwards` with a deadline (by the
//! server's clock) and notifies the owner; the owner runs it and writes the answer. Two
//! compare-and-sets on `state` decide every race, so a request never runs twice and the
//! forwarder can always tell the truth:
//!
//! - the owner moves `pending → accepted` **in the same transaction as the request's first
//!   write** (its writer does it, see [`Cluster::accept_with`](super::Cluster::accept_with)),
//!   and only before the deadline;
//! - the forwarder, giving up (its deadline passed) or finding the owner dead and claiming the
//!   session itself, moves `pending → refused` ([`withdraw`]). Whichever comes first wins; the
//!   other sees it. An owner that lost the session cannot accept any more: its writer's
//!   transaction fails on the fence first.
//!
//! So "was it accepted?" has one answer, readable by anyone at any time ([`state`]), whether
//! or not the owner lived to write the answer.

use std::time::Duration;

use sqlx::postgres::{PgPool, PgRow};
use sqlx::Row;
use tether_protocol::SessionId;

use crate::postgres::errors::map_sqlx;
use crate::StoreError;

use super::ClusterError;
use crate::postgres::fencing::{millis, ForwardId, NodeId};

/// The channel a new forward is announced on: payload `<session_id>:<forward_id>`.
pub const FORWARD_CHANNEL: &str = "tether_forwards";

/// Where a forward stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForwardState {
    /// Written by the forwarder; nobody has run it.
    Pending,
    /// The owner committed the request's first write: it ran (or is running).
    Accepted,
    /// The owner's answer is in `answer`.
    Answered,
    /// It never ran and never will: withdrawn by the forwarder, or found past its deadline.
    Refused,
}

impl ForwardState {
    fn parse(s: &str) -> Option<ForwardState> {
        Some(match s {
            "pending" => ForwardState::Pending,
            "accepted" => ForwardState::Accepted,
            "answered" => ForwardState::Answered,
            "refused" => ForwardState::Refused,
            _ => return None,
        })
    }
}

/// A forward as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwardRow {
    /// Its id.
    pub id: ForwardId,
    /// The session it is for.
    pub session_id: SessionId,
    /// The node that forwarded it.
    pub from_node: NodeId,
    /// The method (`prompt.submit`, …).
    pub method: String,
    /// Its params, JSON text as the client sent them.
    pub params: String,
    /// Where it stands.
    pub state: ForwardState,
    /// The owner's answer (JSON text), once answered.
    pub answer: Option<String>,
    /// Its deadline has passed, by the server's clock when this was read.
    pub expired: bool,
}

const COLUMNS: &str = "id, session_id, from_node, method, params, state, answer, \
    deadline <= clock_timestamp()";

fn from_row(row: &PgRow) -> Result<ForwardRow, StoreError> {
    let state: String = row.try_get(5).map_err(map_sqlx)?;
    Ok(ForwardRow {
        id: ForwardId::from(row.try_get::<String, _>(0).map_err(map_sqlx)?),
        session_id: SessionId::from(row.try_get::<String, _>(1).map_err(map_sqlx)?),
        from_node: NodeId::from(row.try_get::<String, _>(2).map_err(map_sqlx)?),
        method: row.try_get(3).map_err(map_sqlx)?,
        params: row.try_get(4).map_err(map_sqlx)?,
        state: ForwardState::parse(&state)
            .ok_or_else(|| StoreError::Invalid(format!("stored forward state is {state:?}")))?,
        answer: row.try_get(6).map_err(map_sqlx)?,
        expired: row.try_get(7).map_err(map_sqlx)?,
    })
}

/// Why writing a forward failed, and whether it may have been written all the same.
#[derive(Debug, thiserror::Error)]
pub enum ForwardWriteError {
    /// It failed before its COMMIT was sent: nothing was written, the owner can never see it.
    #[error("forward not written: {0}")]
    NotWritten(ClusterError),
    /// Its COMMIT was sent and no answer came back (a link reset or gone silent): the forward
    /// may be stored, and the owner may run it. Only its row can tell.
    #[error("forward in doubt: {0}")]
    InDoubt(ClusterError),
}

/// The forwarder's side: writes the request under the caller's `id`, deadline `timeout` from
/// the server's now, and announces it (after commit, like every notification). The id is the
/// caller's so that a forward in doubt can still be looked up.
pub(crate) async fn forward(
    pool: &PgPool,
    me: &NodeId,
    id: &ForwardId,
    session_id: &SessionId,
    method: &str,
    params: &str,
    timeout: Duration,
) -> Result<(), ForwardWriteError> {
    let not_written = |e| ForwardWriteError::NotWritten(ClusterError::from(map_sqlx(e)));
    let mut tx = pool.begin().await.map_err(not_written)?;
    sqlx::query(
        "INSERT INTO forwards (id, session_id, from_node, method, params, deadline) \
         VALUES ($1, $2, $3, $4, $5, clock_timestamp() + $6 * interval '1 millisecond')",
    )
    .bind(id.as_str())
    .bind(session_id.as_str())
    .bind(me.as_str())
    .bind(method)
    .bind(params)
    .bind(millis(timeout))
    .execute(&mut *tx)
    .await
    .map_err(not_written)?;
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(FORWARD_CHANNEL)
        .bind(format!("{session_id}:{id}"))
        .execute(&mut *tx)
        .await
        .map_err(not_written)?;
    tx.commit()
        .await
        .map_err(|e| ForwardWriteError::InDoubt(ClusterError::from(map_sqlx(e))))?;
    tracing::debug!(node = %me, session_id = %session_id, forward_id = %id, method, "forwarded");
    Ok(())
}

impl super::Cluster {
    /// Forwarder: asks the owner of `session_id` to run `method` with `params` (JSON text),
    /// within `timeout` by the server's clock. Announced on [`FORWARD_CHANNEL`] once committed.
    pub async fn forward(
        &self,
        session_id: &SessionId,
        method: &str,
        params: &str,
        timeout: Duration,
    ) -> Result<ForwardId, ClusterError> {
        let id = ForwardId::fresh();
        self.forward_as(&id, session_id, method, params, timeout)
            .await
            .map_err(|(ForwardWriteError::NotWritten(e) | ForwardWriteError::InDoubt(e))| e)?;
        Ok(id)
    }

    /// As [`Cluster::forward`], under the caller's `id` (a fresh [`ForwardId`]), telling a
    /// forward that was never written from one that may have been
    /// ([`ForwardWriteError::InDoubt`]: read its state).
    pub async fn forward_as(
        &self,
        id: &ForwardId,
        session_id: &SessionId,
        method: &str,
        params: &str,
        timeout: Duration,
    ) -> Result<(), ForwardWriteError> {
        forward(
            &self.inner.pool,
            &self.inner.node,
            id,
            session_id,
            method,
            params,
            timeout,
        )
        .await
    }
}

/// The forwarded requests of a session that are still pending and within their deadline,
/// oldest first: what an owner (or a node that just became it) has to run.
pub(crate) async fn pending(
    pool: &PgPool,
    session_id: &SessionId,
) -> Result<Vec<ForwardRow>, ClusterError> {
    let rows = sqlx::query(&format!(
        "SELECT {COLUMNS} FROM forwards WHERE session_id = $1 AND state = 'pending' \
         AND deadline > clock_timestamp() ORDER BY created_at, id"
    ))
    .bind(session_id.as_str())
    .fetch_all(pool)
    .await
    .map_err(map_sqlx)?;
    Ok(rows.iter().map(from_row).collect::<Result<_, _>>()?)
}

/// A forward's row, `None` if there is no such forward.
pub(crate) async fn state(
    pool: &PgPool,
    id: &ForwardId,
) -> Result<Option<ForwardRow>, ClusterError> {
    let row = sqlx::query(&format!("SELECT {COLUMNS} FROM forwards WHERE id = $1"))
        .bind(id.as_str())
        .fetch_optional(pool)
        .await
        .map_err(map_sqlx)?;
    Ok(row.as_ref().map(from_row).transpose()?)
}

/// `pending → refused`. `true`: it is refused now, and can never run. `false`: it was not
/// pending any more (read [`state`] for what it is).
pub(crate) async fn withdraw(pool: &PgPool, id: &ForwardId) -> Result<bool, ClusterError> {
    let done =
        sqlx::query("UPDATE forwards SET state = 'refused' WHERE id = $1 AND state = 'pending'")
            .bind(id.as_str())
            .execute(pool)
            .await
            .map_err(map_sqlx)?;
    Ok(done.rows_affected() == 1)
}

/// `pending → accepted` with no write, within the deadline: for a request whose first write
/// may come much later or never (`session.compress` waits for its host), so that the
/// forwarder's withdrawal at its deadline cannot race a request that is already running.
/// `false`: it was withdrawn, refused or past its deadline; it must not run.
pub(crate) async fn accept(pool: &PgPool, id: &ForwardId) -> Result<bool, ClusterError> {
    let done = sqlx::query(
        "UPDATE forwards SET state = 'accepted' \
         WHERE id = $1 AND state = 'pending' AND deadline > clock_timestamp()",
    )
    .bind(id.as_str())
    .execute(pool)
    .await
    .map_err(map_sqlx)?;
    Ok(done.rows_affected() == 1)
}

/// The owner's answer: `accepted → answered`, or `pending → answered` for a request the owner
/// answered without writing anything (refused by its checks). `false` if it was neither, or if
/// it was accepted and `me` no longer owns the session.
///
/// Why the ownership check: a request accepted by one node may be answered by another that
/// owned the session before. An owner paused while its write of the request was in flight (its
/// transaction ended by the server) loses the session; the new owner finds the forward still
/// pending, accepts and runs it; the old owner, resumed, sees its own write fail and answers the
/// forward with that error (5072). Without the check that answer replaced the state the new
/// owner had accepted, and the client was told "storage unavailable" for a prompt that ran
/// (found by `tests/cluster_load.rs`). A `pending` forward is answered truthfully by anyone
/// (nobody ran it, and once answered nobody can), so only `accepted` needs the owner.
///
/// One transaction, the ownership row share-locked first: a claim (which locks it for update)
/// cannot move it between the check and the answer, and the writer's acceptance (which locks it
/// too) is ordered before or after the whole answer, never inside it.
pub(crate) async fn answer(
    pool: &PgPool,
    me: &NodeId,
    id: &ForwardId,
    answer: &str,
) -> Result<bool, ClusterError> {
    let mut tx = pool.begin().await.map_err(map_sqlx)?;
    let owner: Option<Option<String>> = sqlx::query_scalar(
        "SELECT o.node_id FROM forwards f JOIN session_owners o ON o.session_id = f.session_id \
         WHERE f.id = $1 FOR SHARE OF o",
    )
    .bind(id.as_str())
    .fetch_optional(&mut *tx)
    .await
    .map_err(map_sqlx)?;
    let owns = owner.flatten().as_deref() == Some(me.as_str());
    let done = sqlx::query(
        "UPDATE forwards SET state = 'answered', answer = $2 \
         WHERE id = $1 AND (state = 'pending' OR (state = 'accepted' AND $3))",
    )
    .bind(id.as_str())
    .bind(answer)
    .bind(owns)
    .execute(&mut *tx)
    .await
    .map_err(map_sqlx)?;
    tx.commit().await.map_err(map_sqlx)?;
    Ok(done.rows_affected() == 1)
}
