//! Claiming a session: one transaction that locks its ownership row, judges the current
//! owner's liveness by the server's clock *after* the lock is granted, and bumps the fence.
//!
//! Why two statements after the lock rather than one: a `SELECT … FOR UPDATE` that had to wait
//! for the lock keeps the snapshot (and the `clock_timestamp()`) it took before waiting, so a
//! heartbeat read in that statement could be as old as the wait. The liveness read comes after
//! the lock, in a statement of its own (READ COMMITTED: a fresh snapshot), and its clock reading
//! is taken while the row is held, so no claim can slip in between judging and writing.
//!
//! The outage rule (docs/ARCHITECTURE.md "Nodes and leases") is the database's too: the claimer's own run of heartbeats
//! (`nodes.run_since`, kept by `node::heartbeat`) must be a lease long before it may take
//! another node's session. A node that has just come back cannot claim anything of a node that
//! merely could not heartbeat during the same outage.

use std::time::Duration;

use sqlx::postgres::PgPool;
use sqlx::Row;
use tether_protocol::SessionId;

use crate::postgres::errors::map_sqlx;

use super::node::duration_ms;
use super::{ClusterConfig, ClusterError, NodeId};

/// Who owned the session just before a successful claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PreviousOwner {
    /// Nobody: never claimed, or released.
    None,
    /// This node already (a re-claim, after a late heartbeat for instance): the fence still
    /// moves, so a batch planned under the old one is refused.
    Itself,
    /// A node that is dead by the lease. The caller must end every turn that was running
    /// there with `node_lost` (docs/ARCHITECTURE.md "Failover") before it runs anything new.
    Dead(NodeId),
}

/// A successful claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// The session claimed.
    pub session_id: SessionId,
    /// The new fence: every write of the session by this node is checked against it.
    pub fence: u64,
    /// Who had it.
    pub previous: PreviousOwner,
}

/// What the liveness read found, all by one `clock_timestamp()`.
struct Ages {
    /// This node's heartbeat age.
    me: Duration,
    /// This node's current run of heartbeats.
    run: Duration,
    /// The owner's heartbeat age (`None`: no such node row, as dead as it gets).
    owner: Option<Duration>,
}

pub(crate) async fn claim(
    pool: &PgPool,
    me: &NodeId,
    config: &ClusterConfig,
    session_id: &SessionId,
) -> Result<Claim, ClusterError> {
    let mut tx = pool.begin().await.map_err(map_sqlx)?;
    sqlx::query(
        "INSERT INTO session_owners (session_id, node_id, fence) VALUES ($1, NULL, 0) \
         ON CONFLICT (session_id) DO NOTHING",
    )
    .bind(session_id.as_str())
    .execute(&mut *tx)
    .await
    .map_err(map_sqlx)?;
    let row = sqlx::query("SELECT node_id FROM session_owners WHERE session_id = $1 FOR UPDATE")
        .bind(session_id.as_str())
        .fetch_one(&mut *tx)
        .await
        .map_err(map_sqlx)?;
    let owner: Option<String> = row.try_get(0).map_err(map_sqlx)?;
    let row = sqlx::query(
        "WITH t AS (SELECT clock_timestamp() AS now) \
         SELECT (EXTRACT(EPOCH FROM t.now - me.heartbeat_at) * 1000)::bigint, \
                (EXTRACT(EPOCH FROM t.now - me.run_since) * 1000)::bigint, \
                (SELECT (EXTRACT(EPOCH FROM t.now - o.heartbeat_at) * 1000)::bigint \
                   FROM nodes o WHERE o.id = $2) \
         FROM t, nodes me WHERE me.id = $1",
    )
    .bind(me.as_str())
    .bind(owner.as_deref())
    .fetch_optional(&mut *tx)
    .await
    .map_err(map_sqlx)?;
    let Some(row) = row else {
        return Err(ClusterError::UnknownNode { node: me.clone() });
    };
    let ages = Ages {
        me: duration_ms(row.try_get(0).map_err(map_sqlx)?),
        run: duration_ms(row.try_get(1).map_err(map_sqlx)?),
        owner: row
            .try_get::<Option<i64>, _>(2)
            .map_err(map_sqlx)?
            .map(duration_ms),
    };
    // Refusals return here: dropping `tx` rolls back the insert of an absent row too.
    let previous = judge(me, config, session_id, owner.map(NodeId::from), &ages)?;
    let fence: i64 = sqlx::query_scalar(
        "UPDATE session_owners SET node_id = $2, fence = fence + 1, \
             claimed_at = clock_timestamp() \
         WHERE session_id = $1 RETURNING fence",
    )
    .bind(session_id.as_str())
    .bind(me.as_str())
    .fetch_one(&mut *tx)
    .await
    .map_err(map_sqlx)?;
    tx.commit().await.map_err(map_sqlx)?;
    let fence = u64::try_from(fence).unwrap_or(0);
    match &previous {
        PreviousOwner::Dead(owner) => tracing::warn!(
            node = %me, session_id = %session_id, fence, dead_owner = %owner,
            "claimed the session of a dead node"
        ),
        _ => {
            tracing::debug!(node = %me, session_id = %session_id, fence, previous = ?previous, "claimed")
        }
    }
    Ok(Claim {
        session_id: session_id.clone(),
        fence,
        previous,
    })
}

/// The claim's rules, apart from the SQL so they can be read (and tested) at a glance.
fn judge(
    me: &NodeId,
    config: &ClusterConfig,
    session_id: &SessionId,
    owner: Option<NodeId>,
    ages: &Ages,
) -> Result<PreviousOwner, ClusterError> {
    // To the others this node is dead: its own claims must wait for its next heartbeat.
    if ages.me > config.lease {
        return Err(ClusterError::NotLive {
            node: me.clone(),
            age: ages.me,
            lease: config.lease,
        });
    }
    let Some(owner) = owner else {
        return Ok(PreviousOwner::None);
    };
    if &owner == me {
        return Ok(PreviousOwner::Itself);
    }
    if ages.owner.is_some_and(|age| age <= config.lease) {
        return Err(ClusterError::OwnedElsewhere {
            session_id: session_id.clone(),
            owner,
        });
    }
    // The owner looks dead. Believe it only if this node has itself been heartbeating without
    // a break for a whole lease (and its last heartbeat keeps that run going).
    if ages.run < config.lease || ages.me > config.max_gap() {
        return Err(ClusterError::NotSettled {
            node: me.clone(),
            session_id: session_id.clone(),
            owner,
            run: ages.run,
            lease: config.lease,
        });
    }
    Ok(PreviousOwner::Dead(owner))
}

/// Gives a session up (a clean stop, a park): it becomes unowned, so the next node that needs
/// it claims it at once instead of waiting for this node's lease. Only under the fence this
/// node holds: a session claimed away meanwhile is left alone. `true` when released.
pub(crate) async fn release(
    pool: &PgPool,
    me: &NodeId,
    session_id: &SessionId,
    fence: u64,
) -> Result<bool, ClusterError> {
    let done = sqlx::query(
        "UPDATE session_owners SET node_id = NULL \
         WHERE session_id = $1 AND node_id = $2 AND fence = $3",
    )
    .bind(session_id.as_str())
    .bind(me.as_str())
    .bind(i64::try_from(fence).unwrap_or(i64::MAX))
    .execute(pool)
    .await
    .map_err(map_sqlx)?;
    Ok(done.rows_affected() == 1)
}

/// Of `held` (session → the fence this node holds), the sessions whose ownership row no
/// longer says this node under that fence: lost to another node's claim. A read, no lock: a
/// session it reports is lost for good, one it does not may still be lost the next moment
/// (the writer's check under the lock is what fences).
pub(crate) async fn lost(
    pool: &PgPool,
    me: &NodeId,
    held: &[(SessionId, u64)],
) -> Result<Vec<(SessionId, u64)>, ClusterError> {
    if held.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<&str> = held.iter().map(|h| h.0.as_str()).collect();
    let fences: Vec<i64> = held
        .iter()
        .map(|h| i64::try_from(h.1).unwrap_or(i64::MAX))
        .collect();
    let rows = sqlx::query(
        "SELECT h.id, h.fence FROM UNNEST($1::text[], $2::bigint[]) AS h(id, fence) \
         LEFT JOIN session_owners o ON o.session_id = h.id \
         WHERE o.session_id IS NULL OR o.node_id IS DISTINCT FROM $3 OR o.fence <> h.fence",
    )
    .bind(&ids)
    .bind(&fences)
    .bind(me.as_str())
    .fetch_all(pool)
    .await
    .map_err(map_sqlx)?;
    rows.iter()
        .map(|r| {
            let id: String = r.try_get(0).map_err(map_sqlx)?;
            let fence: i64 = r.try_get(1).map_err(map_sqlx)?;
            Ok((SessionId::from(id), u64::try_from(fence).unwrap_or(0)))
        })
        .collect()
}

/// A session's ownership as stored, with its owner's liveness by the server's clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ownership {
    /// The session.
    pub session_id: SessionId,
    /// Its owner (`None`: released).
    pub owner: Option<NodeId>,
    /// Its fence.
    pub fence: u64,
    /// The owner's heartbeat is within the lease. `false` for no owner, or a dead one: the
    /// session is for whoever needs it to claim.
    pub owner_live: bool,
}

/// The ownership of each of `ids` that has an ownership row (one read; the poll a follower
/// runs, since a dead owner cannot notify).
pub(crate) async fn owners(
    pool: &PgPool,
    config: &ClusterConfig,
    ids: &[SessionId],
) -> Result<Vec<Ownership>, ClusterError> {
    let names: Vec<&str> = ids.iter().map(SessionId::as_str).collect();
    let rows = sqlx::query(
        "SELECT o.session_id, o.node_id, o.fence, \
             COALESCE(clock_timestamp() - n.heartbeat_at <= $2 * interval '1 millisecond', false) \
         FROM session_owners o LEFT JOIN nodes n ON n.id = o.node_id \
         WHERE o.session_id = ANY($1) ORDER BY o.session_id",
    )
    .bind(&names)
    .bind(crate::postgres::fencing::millis(config.lease))
    .fetch_all(pool)
    .await
    .map_err(map_sqlx)?;
    rows.iter()
        .map(|r| {
            let fence: i64 = r.try_get(2).map_err(map_sqlx)?;
            Ok(Ownership {
                session_id: SessionId::from(r.try_get::<String, _>(0).map_err(map_sqlx)?),
                owner: r
                    .try_get::<Option<String>, _>(1)
                    .map_err(map_sqlx)?
                    .map(NodeId::from),
                fence: u64::try_from(fence).unwrap_or(0),
                owner_live: r.try_get(3).map_err(map_sqlx)?,
            })
        })
        .collect()
}

/// The owner and fence of a session as stored (`None`: no ownership row).
pub(crate) async fn owner_of(
    pool: &PgPool,
    session_id: &SessionId,
) -> Result<Option<(Option<NodeId>, u64)>, ClusterError> {
    let row = sqlx::query("SELECT node_id, fence FROM session_owners WHERE session_id = $1")
        .bind(session_id.as_str())
        .fetch_optional(pool)
        .await
        .map_err(map_sqlx)?;
    let Some(row) = row else { return Ok(None) };
    let node: Option<String> = row.try_get(0).map_err(map_sqlx)?;
    let fence: i64 = row.try_get(1).map_err(map_sqlx)?;
    Ok(Some((
        node.map(NodeId::from),
        u64::try_from(fence).unwrap_or(0),
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ages(me: u64, run: u64, owner: Option<u64>) -> Ages {
        Ages {
            me: Duration::from_millis(me),
            run: Duration::from_millis(run),
            owner: owner.map(Duration::from_millis),
        }
    }

    #[test]
    fn the_rules_of_a_claim() {
        let c = ClusterConfig::default();
        let me = NodeId::from("n_me".to_owned());
        let other = NodeId::from("n_other".to_owned());
        let s = SessionId::from("s_1");
        let j = |owner: Option<&NodeId>, a: Ages| judge(&me, &c, &s, owner.cloned(), &a);
        assert_eq!(j(None, ages(100, 0, None)), Ok(PreviousOwner::None));
        assert_eq!(
            j(Some(&me), ages(100, 0, Some(100))),
            Ok(PreviousOwner::Itself)
        );
        assert!(matches!(
            j(Some(&other), ages(100, 10_000, Some(2_900))),
            Err(ClusterError::OwnedElsewhere { .. })
        ));
        assert_eq!(
            j(Some(&other), ages(100, 3_000, Some(3_100))),
            Ok(PreviousOwner::Dead(other.clone()))
        );
        // No row for the owner at all: dead.
        assert_eq!(
            j(Some(&other), ages(100, 3_000, None)),
            Ok(PreviousOwner::Dead(other.clone()))
        );
        // Back from an outage: everyone looks dead, and this node's run is too short.
        assert!(matches!(
            j(Some(&other), ages(100, 2_999, Some(10_000))),
            Err(ClusterError::NotSettled { .. })
        ));
        // Its own heartbeat is too old to keep its run going.
        assert!(matches!(
            j(Some(&other), ages(2_500, 10_000, Some(10_000))),
            Err(ClusterError::NotSettled { .. })
        ));
        assert!(matches!(
            j(None, ages(3_100, 10_000, None)),
            Err(ClusterError::NotLive { .. })
        ));
    }
}
