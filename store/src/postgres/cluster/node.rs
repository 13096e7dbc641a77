//! A node's identity, its registration and its heartbeat.
//!
//! Every time here comes from the server's `clock_timestamp()` (the time of the statement's
//! execution, not of its transaction's start), so nodes whose clocks disagree still agree on
//! who is alive.

use std::time::Duration;

use sqlx::postgres::PgPool;
use sqlx::Row;

use crate::postgres::errors::map_sqlx;

use super::{ClusterConfig, ClusterError};
use crate::postgres::fencing::{millis, NodeId};

/// What one heartbeat tells the node about itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Heartbeat {
    /// The gap since the previous heartbeat exceeded [`ClusterConfig::max_gap`]: this heartbeat
    /// started a new run. Other nodes may have judged this node dead meanwhile and claimed its
    /// sessions, so the caller re-checks its ownerships (its fences) before it sends a host
    /// anything or fans out any frame (docs/ARCHITECTURE.md "Cluster").
    pub run_restarted: bool,
    /// How long the current run is, by the database's clock.
    pub run: Duration,
}

/// Inserts the node's row: its run starts now, so a fresh node claims no other node's
/// session before one lease (what a node that comes back after an outage does too).
pub(crate) async fn register(pool: &PgPool, node: &NodeId) -> Result<(), ClusterError> {
    sqlx::query("INSERT INTO nodes (id) VALUES ($1)")
        .bind(node.as_str())
        .execute(pool)
        .await
        .map_err(map_sqlx)?;
    tracing::info!(node = %node, "cluster node registered");
    Ok(())
}

/// Moves the node's heartbeat to the server's now, restarting its run when the previous
/// heartbeat is further back than the allowed gap. One statement, one clock reading: the SET
/// expressions see the row as it was.
pub(crate) async fn heartbeat(
    pool: &PgPool,
    node: &NodeId,
    config: &ClusterConfig,
) -> Result<Heartbeat, ClusterError> {
    let row = sqlx::query(
        "WITH t AS (SELECT clock_timestamp() AS now) \
         UPDATE nodes SET \
             run_since = CASE WHEN t.now - heartbeat_at > $2 * interval '1 millisecond' \
                 THEN t.now ELSE run_since END, \
             heartbeat_at = t.now \
         FROM t WHERE id = $1 \
         RETURNING run_since = heartbeat_at, \
             (EXTRACT(EPOCH FROM heartbeat_at - run_since) * 1000)::bigint",
    )
    .bind(node.as_str())
    .bind(millis(config.max_gap()))
    .fetch_optional(pool)
    .await
    .map_err(map_sqlx)?;
    let Some(row) = row else {
        return Err(ClusterError::UnknownNode { node: node.clone() });
    };
    let run_restarted: bool = row.try_get(0).map_err(map_sqlx)?;
    let run_ms: i64 = row.try_get(1).map_err(map_sqlx)?;
    let beat = Heartbeat {
        run_restarted,
        run: duration_ms(run_ms),
    };
    if run_restarted {
        tracing::warn!(node = %node, "heartbeat came late; a new run of heartbeats starts");
    } else {
        tracing::trace!(node = %node, run_ms, "heartbeat");
    }
    Ok(beat)
}

/// A clean stop: every session this node owns becomes unowned (so other nodes claim them at
/// once, without waiting for the lease), its peer counts go, and its row goes. One
/// transaction. Returns how many sessions were released.
pub(crate) async fn leave(pool: &PgPool, node: &NodeId) -> Result<u64, ClusterError> {
    let mut tx = pool.begin().await.map_err(map_sqlx)?;
    let released = sqlx::query("UPDATE session_owners SET node_id = NULL WHERE node_id = $1")
        .bind(node.as_str())
        .execute(&mut *tx)
        .await
        .map_err(map_sqlx)?
        .rows_affected();
    sqlx::query("DELETE FROM session_peers WHERE node_id = $1")
        .bind(node.as_str())
        .execute(&mut *tx)
        .await
        .map_err(map_sqlx)?;
    sqlx::query("DELETE FROM nodes WHERE id = $1")
        .bind(node.as_str())
        .execute(&mut *tx)
        .await
        .map_err(map_sqlx)?;
    tx.commit().await.map_err(map_sqlx)?;
    tracing::info!(node = %node, released, "cluster node left");
    Ok(released)
}

/// Housekeeping: deletes the rows of nodes whose last heartbeat is older than `keep` (dead
/// for that long: a node that comes back after it finds itself `UnknownNode` and must start
/// again under a new id, which it would have to anyway, its sessions being claimable), their
/// peer counts, and forwards whose deadline is more than `keep` past (nobody waits for those
/// any more, whatever their state).
/// Ownership rows naming a deleted node stay: a missing node is a dead owner. Returns the
/// number of nodes and forwards deleted.
pub(crate) async fn sweep(pool: &PgPool, keep: Duration) -> Result<(u64, u64), ClusterError> {
    let keep = millis(keep);
    let mut tx = pool.begin().await.map_err(map_sqlx)?;
    sqlx::query(
        "DELETE FROM session_peers p USING nodes n WHERE n.id = p.node_id \
         AND clock_timestamp() - n.heartbeat_at > $1 * interval '1 millisecond'",
    )
    .bind(keep)
    .execute(&mut *tx)
    .await
    .map_err(map_sqlx)?;
    let nodes = sqlx::query(
        "DELETE FROM nodes WHERE clock_timestamp() - heartbeat_at > $1 * interval '1 millisecond'",
    )
    .bind(keep)
    .execute(&mut *tx)
    .await
    .map_err(map_sqlx)?
    .rows_affected();
    let forwards = sqlx::query(
        "DELETE FROM forwards WHERE clock_timestamp() - deadline > $1 * interval '1 millisecond'",
    )
    .bind(keep)
    .execute(&mut *tx)
    .await
    .map_err(map_sqlx)?
    .rows_affected();
    tx.commit().await.map_err(map_sqlx)?;
    if nodes > 0 || forwards > 0 {
        tracing::info!(nodes, forwards, "cluster housekeeping");
    }
    Ok((nodes, forwards))
}

/// Milliseconds from SQL as a duration (a negative one, from a clock that stepped back, as 0).
pub(crate) fn duration_ms(ms: i64) -> Duration {
    Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}
