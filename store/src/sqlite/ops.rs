//! The SQL of each [`WriteOp`] on its own: what the writer runs for a lone op and, one op per
//! savepoint, on its slow path (the fast path in `bulk` reuses the event INSERTs).
//!
//! Shape (DESIGN.md "Durable event"): an Append is one `UPDATE sessions` that both
//! moves `latest_seq` and checks it (so no separate read is needed), then one multi-row INSERT
//! per chunk of at most [`CHUNK`] events. Every SQL string is fixed (one per chunk size), so the
//! connection's statement cache keeps all of them prepared.

use std::sync::OnceLock;

use sqlx::sqlite::SqliteConnection;
use sqlx::Row;

use tether_protocol::{SessionId, SessionStatus};

use crate::rules;
use crate::{EventRow, NewSession, SessionPatch, StoreError, WriteOp};

use super::errors::{map_sqlx, Doing};
use super::rows::{json_text, to_i64};

/// Events per INSERT statement: 256 rows × 7 bound values stays far below SQLite's variable
/// limit (32766), and a 250-event append is a single statement (each statement is a round trip
/// to sqlx's connection thread).
pub(crate) const CHUNK: usize = 256;

/// Patches a row, optionally moving and checking `latest_seq` at the same time. Fixed SQL for
/// every combination of fields: `NULL` means "leave as is" (hence COALESCE), except for the
/// turn marker, which can be set to NULL and so has an explicit "set" flag (?5).
const UPDATE_SESSION: &str = "UPDATE sessions SET \
    status = COALESCE(?1, status), \
    title = COALESCE(?2, title), \
    message_count = COALESCE(?3, message_count), \
    history_version = COALESCE(?4, history_version), \
    turn_marker = CASE WHEN ?5 THEN ?6 ELSE turn_marker END, \
    updated_at_ms = COALESCE(?7, updated_at_ms), \
    latest_seq = COALESCE(?8, latest_seq) \
    WHERE id = ?9 AND (?10 IS NULL OR latest_seq = ?10)";

const INSERT_PROFILE: &str =
    "INSERT INTO profiles (name, created_at_ms) VALUES (?1, ?2) ON CONFLICT (name) DO NOTHING";

const INSERT_SESSION: &str = "INSERT INTO sessions (id, profile, title, status, \
    parent_session_id, kind, history_version, close_on_disconnect, engine_pin, \
    follow_profile_config, turn_marker, created_at_ms, updated_at_ms, latest_seq, \
    message_count, retained_from_seq) \
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, 0, ?7, ?8, ?9, NULL, ?10, ?10, ?11, ?12, 1)";

const SELECT_LATEST_SEQ: &str = "SELECT latest_seq FROM sessions WHERE id = ?1";

/// Runs one op. The caller wraps it in a savepoint (or a transaction of its own) and rolls that
/// back on error, so an error half-way leaves nothing behind.
pub(crate) async fn apply(conn: &mut SqliteConnection, op: &WriteOp) -> Result<(), StoreError> {
    match op {
        WriteOp::CreateSession { session, events } => create_session(conn, session, events).await,
        WriteOp::Append {
            session_id,
            events,
            patch,
        } => append(conn, session_id, events, patch).await,
        WriteOp::Patch { session_id, patch } => patch_only(conn, session_id, patch).await,
    }
}

/// Latest seq of a session as this connection sees it; `None` if the session does not exist.
pub(crate) async fn latest_seq(
    conn: &mut SqliteConnection,
    session_id: &SessionId,
) -> Result<Option<u64>, StoreError> {
    let row = sqlx::query(SELECT_LATEST_SEQ)
        .bind(session_id.as_str())
        .fetch_optional(&mut *conn)
        .await
        .map_err(write_err)?;
    row.map(|r| {
        let seq: i64 = r.try_get(0).map_err(write_err)?;
        u64::try_from(seq).map_err(|_| StoreError::Invalid(format!("stored latest_seq is {seq}")))
    })
    .transpose()
}

async fn create_session(
    conn: &mut SqliteConnection,
    session: &NewSession,
    events: &[EventRow],
) -> Result<(), StoreError> {
    rules::check_create(events)?;
    let latest_seq = events.last().map_or(0, |e| e.seq);
    sqlx::query(INSERT_PROFILE)
        .bind(session.profile.as_str())
        .bind(session.created_at_ms)
        .execute(&mut *conn)
        .await
        .map_err(write_err)?;
    sqlx::query(INSERT_SESSION)
        .bind(session.id.as_str())
        .bind(session.profile.as_str())
        .bind(session.title.as_str())
        .bind(SessionStatus::Idle.as_str())
        .bind(session.parent_session_id.as_ref().map(SessionId::as_str))
        .bind(session.kind.as_str())
        .bind(session.close_on_disconnect)
        .bind(json_text(&session.engine_pin))
        .bind(session.follow_profile_config)
        .bind(session.created_at_ms)
        .bind(to_i64(latest_seq, "seq")?)
        .bind(to_i64(session.message_count, "message_count")?)
        .execute(&mut *conn)
        .await
        .map_err(write_err)?;
    insert_events(conn, &session.id, events).await
}

async fn append(
    conn: &mut SqliteConnection,
    session_id: &SessionId,
    events: &[EventRow],
    patch: &SessionPatch,
) -> Result<(), StoreError> {
    let (Some(first), Some(last)) = (events.first(), events.last()) else {
        return patch_only(conn, session_id, patch).await;
    };
    rules::check_contiguous(events)?;
    if first.seq == 0 {
        return Err(StoreError::Invalid("seqs start at 1".into()));
    }
    if let Err(mismatch) = update(conn, session_id, patch, Some((first.seq - 1, last.seq))).await {
        // Nothing matched: say why, with the same error the fast path would give.
        return Err(match mismatch {
            Mismatch::NoRow => {
                let latest = latest_seq(conn, session_id).await?;
                rules::check_append(session_id, latest, events)
                    .err()
                    .unwrap_or_else(|| {
                        StoreError::Io(format!("session {} not updated", session_id.as_str()))
                    })
            }
            Mismatch::Error(e) => e,
        });
    }
    insert_events(conn, session_id, events).await
}

async fn patch_only(
    conn: &mut SqliteConnection,
    session_id: &SessionId,
    patch: &SessionPatch,
) -> Result<(), StoreError> {
    update(conn, session_id, patch, None)
        .await
        .map_err(|mismatch| match mismatch {
            Mismatch::NoRow => StoreError::Invalid(format!("no session {}", session_id.as_str())),
            Mismatch::Error(e) => e,
        })
}

/// Applies `patch`; with `seqs = Some((expected, new))` also moves `latest_seq` from `expected`
/// to `new`, failing (and changing nothing) when the row's `latest_seq` is not `expected`.
async fn update(
    conn: &mut SqliteConnection,
    session_id: &SessionId,
    patch: &SessionPatch,
    seqs: Option<(u64, u64)>,
) -> Result<(), Mismatch> {
    let (expected, new) = match seqs {
        Some((expected, new)) => (Some(to_i64(expected, "seq")?), Some(to_i64(new, "seq")?)),
        None => (None, None),
    };
    let message_count = patch
        .message_count
        .map(|n| to_i64(n, "message_count"))
        .transpose()?;
    let history_version = patch
        .history_version
        .map(|n| to_i64(n, "history_version"))
        .transpose()?;
    let done = sqlx::query(UPDATE_SESSION)
        .bind(patch.status.map(|s| s.as_str()))
        .bind(patch.title.as_deref())
        .bind(message_count)
        .bind(history_version)
        .bind(patch.turn_marker.is_some())
        .bind(patch.turn_marker.as_ref().and_then(json_text))
        .bind(patch.updated_at_ms)
        .bind(new)
        .bind(session_id.as_str())
        .bind(expected)
        .execute(&mut *conn)
        .await
        .map_err(write_err)?;
    if done.rows_affected() == 1 {
        Ok(())
    } else {
        Err(Mismatch::NoRow)
    }
}

/// Why [`update`] changed nothing.
enum Mismatch {
    /// No row with that id (and, when checking, that `latest_seq`).
    NoRow,
    /// The statement failed.
    Error(StoreError),
}

impl From<StoreError> for Mismatch {
    fn from(e: StoreError) -> Self {
        Mismatch::Error(e)
    }
}

async fn insert_events(
    conn: &mut SqliteConnection,
    session_id: &SessionId,
    events: &[EventRow],
) -> Result<(), StoreError> {
    let rows: Vec<(&SessionId, &EventRow)> = events.iter().map(|e| (session_id, e)).collect();
    insert_rows(conn, &rows).await
}

/// Inserts events (of one or several sessions), one multi-row statement per [`CHUNK`].
pub(crate) async fn insert_rows(
    conn: &mut SqliteConnection,
    rows: &[(&SessionId, &EventRow)],
) -> Result<(), StoreError> {
    for chunk in rows.chunks(CHUNK) {
        let mut query = sqlx::query(insert_sql(chunk.len()));
        for (session_id, ev) in chunk {
            query = query
                .bind(session_id.as_str())
                .bind(to_i64(ev.seq, "seq")?)
                .bind(ev.kind.as_str())
                .bind(ev.payload.as_str())
                .bind(ev.turn_id.as_deref())
                .bind(ev.trace_id.as_deref())
                .bind(ev.ts_ms);
        }
        query.execute(&mut *conn).await.map_err(write_err)?;
    }
    Ok(())
}

/// The multi-row INSERT for `rows` events (1..=CHUNK), built once per size and reused so the
/// statement cache hits.
///
/// The parameters are anonymous (`?`), not numbered (`?NNN`), although that binds the session id
/// once per row: sqlx asks SQLite for every parameter's name, a linear search over the named
/// ones, which made numbered parameters quadratic per statement (a quarter of the writer's CPU).
fn insert_sql(rows: usize) -> &'static str {
    static SQL: OnceLock<Vec<String>> = OnceLock::new();
    let all = SQL.get_or_init(|| (1..=CHUNK).map(build_insert_sql).collect());
    &all[rows.clamp(1, CHUNK) - 1]
}

fn build_insert_sql(rows: usize) -> String {
    const HEAD: &str =
        "INSERT INTO events (session_id, seq, type, payload, turn_id, trace_id, ts_ms) VALUES ";
    const ROW: &str = "(?, ?, ?, ?, ?, ?, ?)";
    let mut sql = String::with_capacity(HEAD.len() + rows * (ROW.len() + 1));
    sql.push_str(HEAD);
    for r in 0..rows {
        if r > 0 {
            sql.push(',');
        }
        sql.push_str(ROW);
    }
    sql
}

fn write_err(e: sqlx::Error) -> StoreError {
    map_sqlx(e, Doing::Write)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_sql_has_one_parameter_per_column_and_row() {
        assert_eq!(
            build_insert_sql(2),
            "INSERT INTO events (session_id, seq, type, payload, turn_id, trace_id, ts_ms) \
             VALUES (?, ?, ?, ?, ?, ?, ?),(?, ?, ?, ?, ?, ?, ?)"
        );
        assert_eq!(insert_sql(CHUNK).matches('?').count(), 7 * CHUNK);
    }
}
