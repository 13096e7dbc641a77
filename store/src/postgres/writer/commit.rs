//! A batch's way to the database: planned from what the task knows of each session's
//! `latest_seq`, sent as one statement (in cluster mode, one fenced transaction), planned once
//! more if it met stale seqs, and narrowed down op by op if the server refused it, so that only
//! the op at fault fails. A batch whose answer is lost goes to `doubt.rs`.

use std::collections::HashMap;

use sqlx::postgres::PgConnection;
use tether_protocol::SessionId;

use crate::{StoreError, WriteOp};

use super::super::batch::Guard;
use super::super::batch::{session_of, Plan};
use super::super::errors::Failure;
use super::super::fencing::{self as fenced, Fencing};
use super::{OpResult, Sent, Task, MAX_KNOWN};

impl Task {
    pub(super) async fn commit(&mut self, ops: &[WriteOp]) -> Vec<OpResult> {
        if ops.is_empty() {
            return Vec::new();
        }
        if !self.in_doubt.is_empty() {
            return self.commit_around_doubt(ops).await;
        }
        self.commit_planned(ops).await
    }

    /// Ops of sessions in doubt are refused until their state has been read again; the others
    /// are committed as usual.
    async fn commit_around_doubt(&mut self, ops: &[WriteOp]) -> Vec<OpResult> {
        let blocked: Vec<bool> = ops
            .iter()
            .map(|op| self.in_doubt.contains(session_of(op)))
            .collect();
        let rest: Vec<WriteOp> = ops
            .iter()
            .zip(&blocked)
            .filter(|(_, b)| !**b)
            .map(|(op, _)| op.clone())
            .collect();
        let mut done = self.commit_planned(&rest).await.into_iter();
        blocked
            .iter()
            .map(|b| match b {
                true => Err(self.down.clone()),
                false => done.next().unwrap_or_else(|| Err(self.down.clone())),
            })
            .collect()
    }

    async fn commit_planned(&mut self, ops: &[WriteOp]) -> Vec<OpResult> {
        if ops.is_empty() {
            return Vec::new();
        }
        // Cluster mode: the fences to plan under, and the sessions the database refused so far
        // (each refusal removes at least one session, so this ends).
        let held = self.held(ops);
        if let Some(held) = &held {
            self.forget_known_of_other_fences(held);
        }
        let mut refused: HashMap<SessionId, StoreError> = HashMap::new();
        // A stale plan (someone else moved a latest_seq: never, while we hold the lock; in
        // cluster mode, once another node has written a session this node claimed back) is
        // planned once more from fresh reads before the batch is narrowed down op by op.
        let mut stale = 0;
        loop {
            let unknown: Vec<SessionId> = Plan::unknown(ops, &self.known)
                .into_iter()
                .map(SessionId::from)
                .collect();
            if !unknown.is_empty() {
                match self.read_latest(&unknown).await {
                    Ok(()) => {}
                    Err(Failure::Refused(e) | Failure::Stale(e)) => return vec![Err(e); ops.len()],
                    Err(Failure::Lost(e)) => {
                        self.lost(&e).await;
                        return vec![Err(self.down.clone()); ops.len()];
                    }
                }
            }
            let guard = held.as_ref().map(|held| Guard {
                held,
                refused: &refused,
            });
            let plan = Plan::new(ops, &self.known, &self.erasing, guard.as_ref());
            if plan.is_empty() {
                return plan.committed();
            }
            match self.execute(&plan).await {
                Ok(Sent::Committed) => {
                    plan.learn(&mut self.known);
                    return plan.committed();
                }
                Ok(Sent::Refused(more)) => {
                    self.lost_sessions(&more);
                    refused.extend(more);
                }
                Err(Failure::Lost(e)) => return self.in_doubt(plan, e).await,
                Err(Failure::Stale(e)) => {
                    tracing::warn!(error = %e, "store writer planned on stale seqs; reading again");
                    for id in plan.sessions() {
                        self.known.remove(&id);
                    }
                    stale += 1;
                    if stale >= 2 {
                        break;
                    }
                }
                Err(Failure::Refused(e)) => {
                    tracing::debug!(error = %e, "batch refused; sending its ops one by one");
                    break;
                }
            }
        }
        self.one_by_one(ops, held.as_ref(), &refused).await
    }

    /// Sends each op of a refused batch on its own, so that only the op at fault fails.
    async fn one_by_one(
        &mut self,
        ops: &[WriteOp],
        held: Option<&HashMap<SessionId, u64>>,
        refused: &HashMap<SessionId, StoreError>,
    ) -> Vec<OpResult> {
        let guard = held.map(|held| Guard { held, refused });
        let mut results = Vec::with_capacity(ops.len());
        for op in ops.chunks(1) {
            if self.conn.is_none() {
                results.push(Err(self.down.clone()));
                continue;
            }
            let unknown: Vec<SessionId> = Plan::unknown(op, &self.known)
                .into_iter()
                .map(SessionId::from)
                .collect();
            if !unknown.is_empty() {
                if let Err(f) = self.read_latest(&unknown).await {
                    if let Failure::Lost(e) = &f {
                        self.lost(e).await;
                    }
                    results.push(Err(f.error().clone()));
                    continue;
                }
            }
            let plan = Plan::new(op, &self.known, &self.erasing, guard.as_ref());
            if plan.is_empty() {
                results.extend(plan.committed());
                continue;
            }
            match self.execute(&plan).await {
                Ok(Sent::Committed) => {
                    plan.learn(&mut self.known);
                    results.extend(plan.committed());
                }
                Ok(Sent::Refused(more)) => {
                    self.lost_sessions(&more);
                    let e = StoreError::Unavailable("not written".into());
                    results.extend(plan.failed_by(&more, &e));
                }
                Err(Failure::Stale(e)) => {
                    for id in plan.sessions() {
                        self.known.remove(&id);
                    }
                    results.extend(plan.failed(&e));
                }
                Err(Failure::Refused(e)) => results.extend(plan.failed(&e)),
                Err(Failure::Lost(e)) => results.extend(self.in_doubt(plan, e).await),
            }
        }
        results
    }

    /// Cluster mode: the fences held for the sessions `ops` write (a branch's parent too).
    fn held(&self, ops: &[WriteOp]) -> Option<HashMap<SessionId, u64>> {
        let fencing = self.fencing.as_ref()?;
        Some(fencing.fences.of(ops.iter().flat_map(|op| {
            let parent = match op {
                WriteOp::CreateSession { session, .. } => session.parent_session_id.as_ref(),
                _ => None,
            };
            std::iter::once(session_of(op)).chain(parent)
        })))
    }

    /// Cluster mode: what `known` says of a session was learned under the fence held then; if
    /// this node holds another one now, other nodes may have written the session in between.
    fn forget_known_of_other_fences(&mut self, held: &HashMap<SessionId, u64>) {
        if self.known_under.len() > MAX_KNOWN {
            self.known_under.clear();
            self.known.clear();
        }
        for (id, fence) in held {
            if self.known_under.get(id) != Some(fence) {
                self.known.remove(id);
                self.known_under.insert(id.clone(), *fence);
            }
        }
    }

    /// Cluster mode: sessions found lost are forgotten, so their next writes fail without a
    /// round trip (until they are claimed again).
    pub(super) fn lost_sessions(&self, refused: &HashMap<SessionId, StoreError>) {
        let Some(fencing) = &self.fencing else { return };
        for e in refused.values() {
            if let StoreError::NotOwner { session_id, fence } = e {
                fencing.fences.forget(session_id, *fence);
            }
        }
    }
}

/// Cluster mode: the batch as one fenced transaction (`postgres/fencing.rs`), accepting the
/// forwarded requests whose first write it holds.
pub(super) async fn execute_fenced(
    conn: &mut PgConnection,
    fencing: &Fencing,
    plan: &Plan<'_>,
) -> Result<Sent, sqlx::Error> {
    let guarded = plan.guarded();
    let evidence = plan.evidence();
    let accepting = fencing.accepts.for_events(plan.event_keys());
    let mut tx = sqlx::Connection::begin(&mut *conn).await?;
    let refused = fenced::check(&mut tx, &fencing.node, &guarded).await?;
    if !refused.is_empty() {
        tx.rollback().await?;
        return Ok(Sent::Refused(refused));
    }
    let parking = plan.parking();
    if !parking.is_empty() {
        let busy = fenced::in_use(&mut tx, &parking, fencing.lease).await?;
        if !busy.is_empty() {
            tx.rollback().await?;
            return Ok(Sent::Refused(busy));
        }
    }
    if !accepting.is_empty() {
        let refused = fenced::accept(&mut tx, &accepting).await?;
        if !refused.is_empty() {
            tx.rollback().await?;
            // Those forwards are done with: the request must not run.
            let done: Vec<_> = accepting
                .iter()
                .filter(|a| refused.contains_key(&a.0))
                .cloned()
                .collect();
            fencing.accepts.remove(&done);
            return Ok(Sent::Refused(refused));
        }
    }
    plan.query().execute(&mut *tx).await?;
    fenced::notify(&mut tx, &evidence).await?;
    tx.commit().await?;
    fencing.accepts.remove(&accepting);
    Ok(Sent::Committed)
}
