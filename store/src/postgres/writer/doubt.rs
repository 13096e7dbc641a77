//! A batch whose answer was lost, and a batch answered 5072 that has to be settled (the
//! module doc of `writer.rs` says why each step is safe).
//!
//! In doubt, the task reconnects (which takes the writer's lock, so the old backend is gone and
//! cannot commit late), asks the database what the batch wrote, and either reports it
//! committed or sends it again; it keeps trying for `in_doubt_wait`. Past that the batch is
//! answered 5072 and its sessions refuse writes until the next connection has settled it:
//! undone if it had committed after all.

use std::collections::HashSet;
use std::time::Duration;

use tether_protocol::SessionId;
use tokio::time::Instant;

use crate::StoreError;

use super::super::batch::{Evidence, Plan};
use super::super::connect::ConnectError;
use super::super::errors::{classify, Failure};
use super::super::fencing as fenced;
use super::{OpResult, Sent, Task, FIRST_BACKOFF, MAX_BACKOFF};

/// What the database says a batch in doubt wrote.
enum Written {
    /// All of it: it committed.
    All,
    /// Nothing: it may be sent again.
    Nothing,
    /// The connection went again while asking.
    Asking,
    /// Neither all nor nothing, or the question was refused: the batch stays in doubt.
    Unknown(StoreError),
}

/// Whether the task has a connection to ask on.
enum Reconnected {
    Up,
    /// Not yet; try again.
    Retry,
    /// Out of time, or replaced by a newer writer.
    GiveUp,
}

impl Task {
    /// The statement's answer was lost: find out whether it committed (module doc).
    pub(super) async fn in_doubt(&mut self, plan: Plan<'_>, err: StoreError) -> Vec<OpResult> {
        tracing::warn!(error = %err, "store writer lost its connection mid-commit; the batch is in doubt");
        self.lost(&err).await;
        let evidence = plan.evidence();
        let deadline = (Instant::now() + self.settings.in_doubt_wait).min(self.deadline);
        let mut backoff = Duration::ZERO;
        loop {
            if self.conn.is_none() {
                match self.reconnect_in_doubt(deadline, &mut backoff).await {
                    Reconnected::Up => {}
                    Reconnected::Retry => continue,
                    Reconnected::GiveUp => break,
                }
            }
            match self.written(&plan, &evidence).await {
                Written::All => {
                    tracing::info!(
                        sessions = evidence.len(),
                        "the batch in doubt had committed"
                    );
                    plan.learn(&mut self.known);
                    return plan.committed();
                }
                Written::Nothing => {
                    tracing::info!("the batch in doubt had not committed; sending it again");
                }
                Written::Asking => continue,
                Written::Unknown(e) => return self.unresolved(plan, e),
            }
            // Not written (or patches only, which may be written twice): send it again.
            match self.execute(&plan).await {
                Ok(Sent::Committed) => {
                    plan.learn(&mut self.known);
                    return plan.committed();
                }
                Ok(Sent::Refused(more)) => {
                    // Not written, and now refused for the sessions claimed away meanwhile;
                    // the other ops were not written either and may be sent again.
                    self.lost_sessions(&more);
                    let e = StoreError::Unavailable(
                        "not written: the batch met a session claimed by another node".into(),
                    );
                    return plan.failed_by(&more, &e);
                }
                Err(Failure::Lost(e)) => self.lost(&e).await,
                Err(Failure::Refused(e) | Failure::Stale(e)) => return plan.failed(&e),
            }
        }
        let e = StoreError::Unavailable(format!(
            "connection lost during a commit, and whether it was written is unknown ({})",
            self.down
        ));
        self.unresolved(plan, e)
    }

    /// One reconnect attempt while a batch is in doubt, after `backoff` (which it doubles).
    async fn reconnect_in_doubt(
        &mut self,
        deadline: Instant,
        backoff: &mut Duration,
    ) -> Reconnected {
        if Instant::now() + *backoff >= deadline {
            return Reconnected::GiveUp;
        }
        tokio::time::sleep(*backoff).await;
        *backoff = (*backoff * 2).clamp(FIRST_BACKOFF, MAX_BACKOFF);
        let conn = self.next_conn;
        self.next_conn += 1;
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok(connected) =
            tokio::time::timeout(left, self.settings.connect_writer(self.writer, conn)).await
        else {
            self.connect_failed(&ConnectError::Unreachable(format!(
                "no connection within {} ms",
                left.as_millis()
            )));
            return Reconnected::GiveUp;
        };
        match connected {
            Ok(c) => {
                tracing::info!("store writer reconnected; resolving the batch in doubt");
                self.conn = Some(c);
                Reconnected::Up
            }
            Err(ConnectError::Superseded) => {
                self.connect_failed(&ConnectError::Superseded);
                Reconnected::GiveUp
            }
            Err(e) => {
                self.connect_failed(&e);
                Reconnected::Retry
            }
        }
    }

    /// Asks the new connection what the batch in doubt wrote. A batch of patches only leaves
    /// no evidence and counts as not written (sending it again is harmless).
    async fn written(&mut self, plan: &Plan<'_>, evidence: &[Evidence]) -> Written {
        if evidence.is_empty() {
            return Written::Nothing;
        }
        if plan.is_fenced() {
            self.written_under_fence(evidence).await
        } else {
            self.written_by_seq(evidence).await
        }
    }

    /// Cluster mode: `latest_seq` may have been moved by a new owner; only an event stored
    /// with this batch's fence says that this batch committed.
    async fn written_under_fence(&mut self, evidence: &[Evidence]) -> Written {
        match self.read_written(evidence).await {
            Ok(found) if found.len() == evidence.len() => Written::All,
            Ok(found) if found.is_empty() => {
                for e in evidence {
                    self.known.remove(&e.session_id);
                }
                Written::Nothing
            }
            Ok(_) => Written::Unknown(
                self.cannot_tell("a batch in doubt is written for some of its sessions only"),
            ),
            Err(Failure::Lost(e)) => {
                self.lost(&e).await;
                Written::Asking
            }
            Err(Failure::Refused(e) | Failure::Stale(e)) => Written::Unknown(e),
        }
    }

    /// A single gateway: the lock rules out any other writer, so the sessions' `latest_seq`
    /// are all where the batch left them, or all where it found them.
    async fn written_by_seq(&mut self, evidence: &[Evidence]) -> Written {
        let ids: Vec<SessionId> = evidence.iter().map(|e| e.session_id.clone()).collect();
        match self.read_latest(&ids).await {
            Ok(()) => {}
            Err(Failure::Lost(e)) => {
                self.lost(&e).await;
                return Written::Asking;
            }
            Err(Failure::Refused(e) | Failure::Stale(e)) => return Written::Unknown(e),
        }
        let at = |e: &Evidence| self.known.get(&e.session_id).copied().flatten();
        if evidence.iter().all(|e| at(e) == Some(e.after)) {
            return Written::All;
        }
        if evidence.iter().all(|e| at(e) == e.before) {
            return Written::Nothing;
        }
        Written::Unknown(self.cannot_tell("a batch in doubt is neither written nor absent"))
    }

    fn cannot_tell(&self, why: &str) -> StoreError {
        let e = StoreError::Unavailable(why.into());
        tracing::error!(error = %e, "store writer cannot tell what a batch wrote");
        e
    }

    /// Cluster mode: which sessions of `evidence` a batch in doubt wrote (module doc).
    async fn read_written(&mut self, evidence: &[Evidence]) -> Result<HashSet<SessionId>, Failure> {
        let wait = self.answer_wait();
        let Some(conn) = self.conn.as_mut() else {
            return Err(Failure::Lost(self.down.clone()));
        };
        tokio::time::timeout(wait, fenced::written(conn, evidence))
            .await
            .map_err(|_| {
                Failure::Lost(StoreError::Unavailable(
                    "the database stopped answering".into(),
                ))
            })?
            .map_err(classify)
    }

    /// Gives up on a batch in doubt: its sessions refuse writes until it is settled.
    fn unresolved(&mut self, plan: Plan<'_>, e: StoreError) -> Vec<OpResult> {
        tracing::error!(error = %e, "a batch stays in doubt; its sessions refuse writes until the database is back");
        self.in_doubt.extend(plan.sessions());
        self.unsettled.extend(plan.evidence());
        self.down = e.clone();
        plan.failed(&e)
    }

    /// Makes a batch answered 5072 while in doubt not have happened (module doc), in one
    /// transaction.
    pub(super) async fn settle(&mut self) -> Result<(), Failure> {
        let ids: Vec<SessionId> = self
            .unsettled
            .iter()
            .map(|e| e.session_id.clone())
            .collect();
        self.read_latest(&ids).await?;
        let written: Vec<Evidence> = self
            .unsettled
            .iter()
            .filter(|e| self.known.get(&e.session_id).copied().flatten() == Some(e.after))
            .cloned()
            .collect();
        if written.is_empty() {
            tracing::info!(
                sessions = self.in_doubt.len(),
                "a batch answered 5072 while in doubt had not been written"
            );
            return Ok(());
        }
        let undone = self.undo(written).await?;
        tracing::warn!(
            sessions = undone.len(),
            "a batch answered 5072 while in doubt had been written; undone, as answered"
        );
        for e in &undone {
            self.known.insert(e.session_id.clone(), e.before);
        }
        Ok(())
    }

    /// Deletes what `written` added, in one transaction; what was undone.
    async fn undo(&mut self, mut written: Vec<Evidence>) -> Result<Vec<Evidence>, Failure> {
        let Some(conn) = self.conn.as_mut() else {
            return Err(Failure::Lost(self.down.clone()));
        };
        let mut tx = sqlx::Connection::begin(&mut *conn)
            .await
            .map_err(classify)?;
        // Cluster mode: undo only what this node still owns under the batch's fence. A session
        // claimed by another node meanwhile keeps those events: its new owner has taken the
        // store as it found it, and may have written after them.
        if let Some(fencing) = &self.fencing {
            let mut guarded: Vec<(&str, u64)> = written
                .iter()
                .map(|e| (e.session_id.as_str(), e.fence.unwrap_or(0)))
                .collect();
            guarded.sort_unstable();
            let lost = fenced::check(&mut tx, &fencing.node, &guarded)
                .await
                .map_err(classify)?;
            if !lost.is_empty() {
                tracing::warn!(
                    sessions = lost.len(),
                    "a batch in doubt is not undone on sessions claimed by another node since"
                );
                written.retain(|e| !lost.contains_key(&e.session_id));
            }
        }
        for e in &written {
            undo_one(&mut tx, e).await.map_err(classify)?;
        }
        tx.commit().await.map_err(classify)?;
        Ok(written)
    }
}

/// Puts one session back where the batch found it: its events after `before` deleted and its
/// `latest_seq` rewound, or, if the batch created it, the session removed.
async fn undo_one(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    e: &Evidence,
) -> Result<(), sqlx::Error> {
    let id = e.session_id.as_str();
    match e.before {
        Some(before) => {
            let before = i64::try_from(before).unwrap_or(i64::MAX);
            sqlx::query("DELETE FROM events WHERE session_id = $1 AND seq > $2")
                .bind(id)
                .bind(before)
                .execute(&mut **tx)
                .await?;
            sqlx::query("UPDATE sessions SET latest_seq = $2 WHERE id = $1")
                .bind(id)
                .bind(before)
                .execute(&mut **tx)
                .await?;
        }
        None => {
            sqlx::query("DELETE FROM events WHERE session_id = $1")
                .bind(id)
                .execute(&mut **tx)
                .await?;
            sqlx::query("DELETE FROM sessions WHERE id = $1")
                .bind(id)
                .execute(&mut **tx)
                .await?;
        }
    }
    Ok(())
}
