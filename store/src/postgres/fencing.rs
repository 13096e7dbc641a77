//! The fenced half of a cluster node's writes: what its writer's transaction does before and
//! after the batch statement (`postgres/batch.rs`), how it tells what a batch in doubt wrote,
//! and the check its handoff store makes (`postgres/handoffs.rs`). Below both the writer and
//! the cluster module (`postgres/cluster/`), which makes the claims whose fences this checks
//! and starts the writer with a [`Fencing`].
//!
//! A node's batch is one transaction:
//!
//! 1. lock the ownership rows of every session the batch writes (a branch's parent too), in
//!    id order, `FOR UPDATE`, and compare node and fence with the fences the batch was planned
//!    under. Any mismatch: roll back, write nothing, and answer those sessions' ops `NotOwner`;
//!    the writer plans the rest again and sends it alone (ops stay independent).
//! 2. the batch statement, storing each event's fence;
//! 3. one `pg_notify('tether_events', '<session>:<latest_seq>')` per session whose events
//!    moved: queued by the server and delivered only if the transaction commits, so a follower
//!    is never woken by an event that does not exist;
//! 4. COMMIT. Its answer lost: the batch is in doubt, resolved by [`written`] (an event row at
//!    the batch's last seq *with this batch's fence* exists only if this batch committed: no
//!    other writer holds that fence, and this node's writer sends nothing else meanwhile).
//!
//! Holding the row locks from the check to the commit is the fencing: a claim needs the same
//! lock, so it either committed before (and the check sees its fence) or waits until this
//! batch is done (and its new fence refuses every later batch of this node). Neither time nor
//! the node's idea of its lease enters into it.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use sqlx::postgres::PgConnection;
use sqlx::Row;
use tether_protocol::SessionId;

use crate::postgres::batch::Evidence;
use crate::StoreError;

mod accepts;
mod fences;
mod ids;

pub(crate) use accepts::Accepts;
pub use fences::Fences;
pub use ids::{ForwardId, NodeId};

/// The channel committed events are announced on: payload `<session_id>:<latest_seq>`.
pub const CHANNEL: &str = "tether_events";

/// What a node's writer needs to fence its writes: who it is, what it holds, and which
/// forwarded requests its writes accept.
#[derive(Debug, Clone)]
pub(crate) struct Fencing {
    pub node: NodeId,
    pub fences: Fences,
    pub accepts: Accepts,
    /// The lease: peers of nodes whose heartbeat is older do not count.
    pub lease: Duration,
}

/// Step 1: locks the ownership rows of `guarded` (sorted by id) and returns the sessions this
/// node does not own under the fence given, as their `NotOwner` errors. Empty: every row is
/// locked and ours; go on writing in this transaction.
pub(crate) async fn check(
    tx: &mut PgConnection,
    node: &NodeId,
    guarded: &[(&str, u64)],
) -> Result<HashMap<SessionId, StoreError>, sqlx::Error> {
    let ids: Vec<&str> = guarded.iter().map(|g| g.0).collect();
    let rows = sqlx::query(
        "SELECT session_id, node_id, fence FROM session_owners WHERE session_id = ANY($1) \
         ORDER BY session_id FOR UPDATE",
    )
    .bind(&ids)
    .fetch_all(&mut *tx)
    .await?;
    let mut stored: HashMap<String, (Option<String>, i64)> = HashMap::with_capacity(rows.len());
    for row in rows {
        stored.insert(row.try_get(0)?, (row.try_get(1)?, row.try_get(2)?));
    }
    let mut refused = HashMap::new();
    for (id, fence) in guarded {
        let ours = stored.get(*id).is_some_and(|(owner, stored_fence)| {
            owner.as_deref() == Some(node.as_str()) && u64::try_from(*stored_fence) == Ok(*fence)
        });
        if !ours {
            let session_id = SessionId::from(*id);
            let now = stored.get(*id);
            tracing::warn!(
                node = %node, session_id = %session_id, fence,
                owner = ?now.and_then(|n| n.0.as_deref()), stored_fence = ?now.map(|n| n.1),
                "write refused: this node no longer owns the session under its fence"
            );
            refused.insert(
                session_id.clone(),
                StoreError::NotOwner {
                    session_id,
                    fence: *fence,
                },
            );
        }
    }
    Ok(refused)
}

/// Step 1b: accepts the forwarded requests whose first write is in this batch
/// (`forwards.rs`): `pending → accepted`, before the deadline, for the session written.
/// Returns the sessions whose forward could not be accepted, as their errors; the caller then
/// rolls back and writes the batch without them.
pub(crate) async fn accept(
    tx: &mut PgConnection,
    accepting: &[(SessionId, u64, ForwardId)],
) -> Result<HashMap<SessionId, StoreError>, sqlx::Error> {
    let ids: Vec<&str> = accepting.iter().map(|a| a.2.as_str()).collect();
    let sessions: Vec<&str> = accepting.iter().map(|a| a.0.as_str()).collect();
    let rows = sqlx::query(
        "UPDATE forwards f SET state = 'accepted' \
         FROM UNNEST($1::text[], $2::text[]) AS x(id, session_id) \
         WHERE f.id = x.id AND f.session_id = x.session_id AND f.state = 'pending' \
           AND f.deadline > clock_timestamp() \
         RETURNING f.id",
    )
    .bind(&ids)
    .bind(&sessions)
    .fetch_all(&mut *tx)
    .await?;
    let accepted: HashSet<String> = rows
        .iter()
        .map(|r| r.try_get::<String, _>(0))
        .collect::<Result<_, _>>()?;
    let mut refused = HashMap::new();
    for (session_id, seq, id) in accepting {
        if !accepted.contains(id.as_str()) {
            tracing::warn!(session_id = %session_id, seq, forward_id = %id, "forwarded request not accepted: past its deadline or withdrawn");
            refused.insert(
                session_id.clone(),
                StoreError::ForwardRefused {
                    forward_id: id.to_string(),
                    seq: *seq,
                },
            );
        }
    }
    Ok(refused)
}

/// Step 1c: of the sessions the batch parks, those with peers on live nodes, as their
/// `InUse` errors. Read under the ownership rows' locks, which an attach takes too
/// (`peers.rs`), so no peer can attach between this count and the commit.
pub(crate) async fn in_use(
    tx: &mut PgConnection,
    parking: &[&str],
    lease: Duration,
) -> Result<HashMap<SessionId, StoreError>, sqlx::Error> {
    let rows = sqlx::query(
        "SELECT p.session_id, SUM(p.peers)::bigint FROM session_peers p \
         JOIN nodes n ON n.id = p.node_id \
         WHERE p.session_id = ANY($1) AND p.peers > 0 \
           AND clock_timestamp() - n.heartbeat_at <= $2 * interval '1 millisecond' \
         GROUP BY p.session_id",
    )
    .bind(parking)
    .bind(millis(lease))
    .fetch_all(&mut *tx)
    .await?;
    let mut busy = HashMap::new();
    for row in rows {
        let session_id = SessionId::from(row.try_get::<String, _>(0)?);
        let peers = u64::try_from(row.try_get::<i64, _>(1)?).unwrap_or(0);
        tracing::info!(session_id = %session_id, peers, "not parking: peers attached on live nodes");
        busy.insert(session_id.clone(), StoreError::InUse { session_id, peers });
    }
    Ok(busy)
}

/// Step 3: one notification per session whose `latest_seq` the batch moves (or that it
/// creates), carrying that seq.
pub(crate) async fn notify(
    tx: &mut PgConnection,
    evidence: &[Evidence],
) -> Result<(), sqlx::Error> {
    if evidence.is_empty() {
        return Ok(());
    }
    let ids: Vec<&str> = evidence.iter().map(|e| e.session_id.as_str()).collect();
    let seqs: Vec<i64> = evidence
        .iter()
        .map(|e| i64::try_from(e.after).unwrap_or(i64::MAX))
        .collect();
    sqlx::query(
        "SELECT pg_notify($1, s || ':' || q::text) FROM UNNEST($2::text[], $3::bigint[]) AS t(s, q)",
    )
    .bind(CHANNEL)
    .bind(&ids)
    .bind(&seqs)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// For a batch in doubt: the sessions of `evidence` whose last event of the batch is stored
/// with the batch's fence, i.e. for which this batch committed.
pub(crate) async fn written(
    conn: &mut PgConnection,
    evidence: &[Evidence],
) -> Result<HashSet<SessionId>, sqlx::Error> {
    let ids: Vec<&str> = evidence.iter().map(|e| e.session_id.as_str()).collect();
    let seqs: Vec<i64> = evidence
        .iter()
        .map(|e| i64::try_from(e.after).unwrap_or(i64::MAX))
        .collect();
    let fences: Vec<i64> = evidence
        .iter()
        .map(|e| e.fence.map_or(-1, |f| i64::try_from(f).unwrap_or(-1)))
        .collect();
    let rows = sqlx::query(
        "SELECT e.session_id FROM events e \
         JOIN UNNEST($1::text[], $2::bigint[], $3::bigint[]) AS x(id, seq, fence) \
           ON e.session_id = x.id AND e.seq = x.seq AND e.fence = x.fence",
    )
    .bind(&ids)
    .bind(&seqs)
    .bind(&fences)
    .fetch_all(&mut *conn)
    .await?;
    rows.iter()
        .map(|r| r.try_get::<String, _>(0).map(SessionId::from))
        .collect()
}

/// A duration in whole milliseconds for SQL (`$n * interval '1 millisecond'`).
pub(crate) fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}
