//! The fast path of a batch: the whole batch in a handful of statements.
//!
//! Savepoints isolate ops, but every statement is a round trip to sqlx's connection thread, and
//! with small appends (a few events each, the common case) those round trips, not SQLite, are
//! the cost: a savepoint-per-op batch needs four per op. Here the batch is validated in Rust
//! against the sessions' `latest_seq` (read inside the write transaction, so nothing can change
//! them meanwhile), and what is valid is written with one multi-row INSERT per chunk of events
//! and ONE UPDATE for every touched session. Ops that break the seq rules are refused without
//! touching the database, exactly as the slow path would refuse them.
//!
//! Anything unexpected (an SQL error, e.g. disk full) rolls the transaction back and the writer
//! redoes the batch on the slow path, which finds out which op is to blame. Batches that create
//! a session always take the slow path (creates are rare and do more than an append).

use std::collections::HashMap;

use serde_json::{json, Value};
use sqlx::sqlite::SqliteConnection;
use sqlx::Row;
use tether_protocol::SessionId;

use crate::rules::{check_append, merge_patch};
use crate::{EventRow, SessionPatch, StoreError, WriteOp};

use super::errors::{map_sqlx, Doing};
use super::ops::insert_rows;
use super::rows::to_i64;

/// `latest_seq` of the sessions named in a JSON array of ids (one fixed statement, whatever
/// the number of ids).
const SELECT_LATEST: &str = "SELECT id, latest_seq FROM sessions \
    WHERE id IN (SELECT value FROM json_each(?1))";

/// Patches many sessions at once from a JSON array of
/// `{id, expected, latest, status, title, message_count, history_version, tm_set, tm, updated_at_ms}`
/// (`null` = leave as is, except `tm`, which `tm_set` governs, as in the slow path). The
/// `latest_seq = expected` condition is a safety net: the plan already checked it.
const UPDATE_MANY: &str = "UPDATE sessions SET \
    status = COALESCE(v.status, sessions.status), \
    title = COALESCE(v.title, sessions.title), \
    message_count = COALESCE(v.message_count, sessions.message_count), \
    history_version = COALESCE(v.history_version, sessions.history_version), \
    turn_marker = CASE WHEN v.tm_set THEN v.tm ELSE sessions.turn_marker END, \
    updated_at_ms = COALESCE(v.updated_at_ms, sessions.updated_at_ms), \
    latest_seq = v.latest \
    FROM (SELECT value ->> 'id' AS id, value ->> 'expected' AS expected, \
            value ->> 'latest' AS latest, value ->> 'status' AS status, \
            value ->> 'title' AS title, value ->> 'message_count' AS message_count, \
            value ->> 'history_version' AS history_version, value ->> 'tm_set' AS tm_set, \
            value ->> 'tm' AS tm, value ->> 'updated_at_ms' AS updated_at_ms \
          FROM json_each(?1)) AS v \
    WHERE sessions.id = v.id AND sessions.latest_seq = v.expected";

/// The sessions a batch touches, or `None` if the batch must take the slow path.
pub(crate) fn session_ids(ops: &[WriteOp]) -> Option<Vec<&str>> {
    let mut ids = Vec::with_capacity(ops.len());
    for op in ops {
        match op {
            WriteOp::CreateSession { .. } => return None,
            WriteOp::Append { session_id, .. } | WriteOp::Patch { session_id, .. } => {
                ids.push(session_id.as_str());
            }
        }
    }
    ids.sort_unstable();
    ids.dedup();
    Some(ids)
}

/// Reads the `latest_seq` of `ids`; a session missing from the answer does not exist.
pub(crate) async fn latest_seqs(
    conn: &mut SqliteConnection,
    ids: &[&str],
) -> Result<HashMap<String, u64>, StoreError> {
    let ids = serde_json::to_string(ids).map_err(|e| StoreError::Invalid(e.to_string()))?;
    let rows = sqlx::query(SELECT_LATEST)
        .bind(ids)
        .fetch_all(&mut *conn)
        .await
        .map_err(|e| map_sqlx(e, Doing::Write))?;
    rows.iter()
        .map(|row| {
            let id: String = row.try_get(0).map_err(|e| map_sqlx(e, Doing::Write))?;
            let seq: i64 = row.try_get(1).map_err(|e| map_sqlx(e, Doing::Write))?;
            let seq = u64::try_from(seq)
                .map_err(|_| StoreError::Invalid(format!("stored latest_seq is {seq}")))?;
            Ok((id, seq))
        })
        .collect()
}

/// What a batch will write, decided before writing anything.
pub(crate) struct Plan<'a> {
    /// Per op, in order: `Some` if the op is refused (and so writes nothing).
    pub rejected: Vec<Option<StoreError>>,
    /// Every event to insert, in op order.
    events: Vec<(&'a SessionId, &'a EventRow)>,
    /// One row update per touched session, in order of first touch.
    updates: Vec<SessionUpdate<'a>>,
}

/// The combined effect of a batch's accepted ops on one session row.
struct SessionUpdate<'a> {
    id: &'a SessionId,
    /// `latest_seq` before the batch.
    expected: u64,
    /// `latest_seq` after it.
    latest: u64,
    /// The ops' patches, merged in order.
    patch: SessionPatch,
}

/// Validates every op against the sessions' current `latest_seq` (as [`latest_seqs`] read it),
/// in order, as the slow path would: an op sees the effect of the accepted ops before it and
/// none of a refused one. Creates must not be in `ops` (see [`session_ids`]).
pub(crate) fn plan<'a>(ops: &'a [WriteOp], stored: &HashMap<String, u64>) -> Plan<'a> {
    let mut plan = Plan {
        rejected: Vec::with_capacity(ops.len()),
        events: Vec::new(),
        updates: Vec::new(),
    };
    // Session id → index in plan.updates.
    let mut index: HashMap<&str, usize> = HashMap::new();
    for op in ops {
        let (session_id, events, patch) = match op {
            WriteOp::Append {
                session_id,
                events,
                patch,
            } => (session_id, events.as_slice(), patch),
            WriteOp::Patch { session_id, patch } => (session_id, &[][..], patch),
            WriteOp::CreateSession { .. } => {
                plan.rejected.push(Some(StoreError::Invalid(
                    "create in a fast-path batch".into(),
                )));
                continue;
            }
        };
        let id = session_id.as_str();
        let current = match index.get(id) {
            Some(&i) => Some(plan.updates[i].latest),
            None => stored.get(id).copied(),
        };
        if let Err(e) = check_append(session_id, current, events) {
            plan.rejected.push(Some(e));
            continue;
        }
        plan.rejected.push(None);
        let i = match index.get(id) {
            Some(&i) => i,
            None => {
                // check_append passed, so the session exists and `current` is Some.
                let latest = current.unwrap_or_default();
                plan.updates.push(SessionUpdate {
                    id: session_id,
                    expected: latest,
                    latest,
                    patch: SessionPatch::default(),
                });
                index.insert(id, plan.updates.len() - 1);
                plan.updates.len() - 1
            }
        };
        let update = &mut plan.updates[i];
        if let Some(last) = events.last() {
            update.latest = last.seq;
        }
        merge_patch(&mut update.patch, patch);
        plan.events.extend(events.iter().map(|e| (session_id, e)));
    }
    plan
}

/// Writes what `plan` accepted. Any error means the transaction must be rolled back.
pub(crate) async fn apply(conn: &mut SqliteConnection, plan: &Plan<'_>) -> Result<(), StoreError> {
    insert_rows(conn, &plan.events).await?;
    if plan.updates.is_empty() {
        return Ok(());
    }
    let rows = plan
        .updates
        .iter()
        .map(update_json)
        .collect::<Result<Vec<_>, _>>()?;
    let done = sqlx::query(UPDATE_MANY)
        .bind(Value::Array(rows).to_string())
        .execute(&mut *conn)
        .await
        .map_err(|e| map_sqlx(e, Doing::Write))?;
    if done.rows_affected() != plan.updates.len() as u64 {
        return Err(StoreError::Io(format!(
            "bulk update touched {} of {} sessions",
            done.rows_affected(),
            plan.updates.len()
        )));
    }
    Ok(())
}

/// One element of UPDATE_MANY's JSON array. Integers go through `to_i64` so that a value SQLite
/// cannot hold fails here (and the slow path then reports it) instead of becoming a float.
fn update_json(u: &SessionUpdate<'_>) -> Result<Value, StoreError> {
    let p = &u.patch;
    Ok(json!({
        "id": u.id.as_str(),
        "expected": to_i64(u.expected, "seq")?,
        "latest": to_i64(u.latest, "seq")?,
        "status": p.status.map(|s| s.as_str()),
        "title": p.title,
        "message_count": p.message_count.map(|n| to_i64(n, "message_count")).transpose()?,
        "history_version": p.history_version.map(|n| to_i64(n, "history_version")).transpose()?,
        "tm_set": p.turn_marker.is_some(),
        "tm": p.turn_marker.as_ref().and_then(|m| m.as_ref().map(Value::to_string)),
        "updated_at_ms": p.updated_at_ms,
    }))
}
