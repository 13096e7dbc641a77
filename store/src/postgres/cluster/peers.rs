//! Each node's peer count per session (docs/ARCHITECTURE.md "Liveness of peers").
//!
//! A node writes only its own row; the sum counts only nodes alive by the lease, judged by
//! the server's clock, so a dead node's counts stop pinning a session the moment its lease
//! runs out, without anyone having to clean them up.

use sqlx::postgres::PgPool;
use sqlx::Row;
use tether_protocol::SessionId;

use crate::postgres::errors::map_sqlx;

use super::{ClusterConfig, ClusterError, NodeId};
use crate::postgres::fencing::millis;

/// The channel a presence write notifies, with `<session_id>:<node_id>`.
pub const PRESENCE_CHANNEL: &str = "tether_presence";

/// Sets this node's count of peers on `session_id` (0 removes the row), holding the
/// session's ownership row `FOR SHARE` (a park holds it `FOR UPDATE` while it counts), and
/// returns the owner and fence read under that lock (`None`: never claimed). With
/// `presence` (the peers' entries as a JSON array) the row holds it too and the other nodes
/// are notified.
pub(crate) async fn set(
    pool: &PgPool,
    me: &NodeId,
    session_id: &SessionId,
    peers: u64,
    presence: Option<&str>,
) -> Result<Option<(Option<NodeId>, u64)>, ClusterError> {
    let mut tx = pool.begin().await.map_err(map_sqlx)?;
    let owner =
        sqlx::query("SELECT node_id, fence FROM session_owners WHERE session_id = $1 FOR SHARE")
            .bind(session_id.as_str())
            .fetch_optional(&mut *tx)
            .await
            .map_err(map_sqlx)?;
    let owner = match owner {
        None => None,
        Some(row) => {
            let node: Option<String> = row.try_get(0).map_err(map_sqlx)?;
            let fence: i64 = row.try_get(1).map_err(map_sqlx)?;
            Some((node.map(NodeId::from), u64::try_from(fence).unwrap_or(0)))
        }
    };
    if peers == 0 {
        sqlx::query("DELETE FROM session_peers WHERE session_id = $1 AND node_id = $2")
            .bind(session_id.as_str())
            .bind(me.as_str())
            .execute(&mut *tx)
            .await
            .map_err(map_sqlx)?;
    } else {
        sqlx::query(
            "INSERT INTO session_peers (session_id, node_id, peers, presence) \
             VALUES ($1, $2, $3, $4) \
             ON CONFLICT (session_id, node_id) DO UPDATE SET peers = excluded.peers, \
             presence = COALESCE(excluded.presence, session_peers.presence)",
        )
        .bind(session_id.as_str())
        .bind(me.as_str())
        .bind(i64::try_from(peers).unwrap_or(i64::MAX))
        .bind(presence)
        .execute(&mut *tx)
        .await
        .map_err(map_sqlx)?;
    }
    if presence.is_some() {
        sqlx::query("SELECT pg_notify($1, $2)")
            .bind(PRESENCE_CHANNEL)
            .bind(format!("{}:{}", session_id.as_str(), me.as_str()))
            .execute(&mut *tx)
            .await
            .map_err(map_sqlx)?;
    }
    tx.commit().await.map_err(map_sqlx)?;
    Ok(owner)
}

/// Peers on `session_id` over every live node.
pub(crate) async fn live(
    pool: &PgPool,
    config: &ClusterConfig,
    session_id: &SessionId,
) -> Result<u64, ClusterError> {
    let n: i64 = sqlx::query_scalar(
        "SELECT COALESCE(SUM(p.peers), 0)::bigint FROM session_peers p \
         JOIN nodes n ON n.id = p.node_id \
         WHERE p.session_id = $1 \
           AND clock_timestamp() - n.heartbeat_at <= $2 * interval '1 millisecond'",
    )
    .bind(session_id.as_str())
    .bind(millis(config.lease))
    .fetch_one(pool)
    .await
    .map_err(map_sqlx)?;
    Ok(u64::try_from(n).unwrap_or(0))
}

/// Peers on each of `ids` over every live node but `me`, in one read (the registry's poll:
/// `SessionInfo.peers` counts every node's peers). Sessions without any are left out.
pub(crate) async fn others(
    pool: &PgPool,
    config: &ClusterConfig,
    me: &NodeId,
    ids: &[SessionId],
) -> Result<Vec<(SessionId, u64)>, ClusterError> {
    let names: Vec<&str> = ids.iter().map(SessionId::as_str).collect();
    let rows: Vec<(String, i64)> = sqlx::query_as(
        "SELECT p.session_id, COALESCE(SUM(p.peers), 0)::bigint FROM session_peers p \
         JOIN nodes n ON n.id = p.node_id \
         WHERE p.session_id = ANY($1) AND p.node_id <> $3 \
           AND clock_timestamp() - n.heartbeat_at <= $2 * interval '1 millisecond' \
         GROUP BY p.session_id",
    )
    .bind(&names)
    .bind(millis(config.lease))
    .bind(me.as_str())
    .fetch_all(pool)
    .await
    .map_err(map_sqlx)?;
    Ok(rows
        .into_iter()
        .map(|(id, n)| (SessionId::from(id), u64::try_from(n).unwrap_or(0)))
        .collect())
}

/// Who is attached to `session_id` on every live node but `me`: each node's presence array
/// as it wrote it (nodes that wrote only a count are left out).
pub(crate) async fn others_presence(
    pool: &PgPool,
    config: &ClusterConfig,
    me: &NodeId,
    session_id: &SessionId,
) -> Result<Vec<(NodeId, String)>, ClusterError> {
    let rows: Vec<(String, String)> = sqlx::query_as(
        "SELECT p.node_id, p.presence FROM session_peers p \
         JOIN nodes n ON n.id = p.node_id \
         WHERE p.session_id = $1 AND p.node_id <> $3 AND p.presence IS NOT NULL \
           AND clock_timestamp() - n.heartbeat_at <= $2 * interval '1 millisecond' \
         ORDER BY p.node_id",
    )
    .bind(session_id.as_str())
    .bind(millis(config.lease))
    .bind(me.as_str())
    .fetch_all(pool)
    .await
    .map_err(map_sqlx)?;
    Ok(rows
        .into_iter()
        .map(|(node, presence)| (NodeId::from(node), presence))
        .collect())
}
