//! The SQL of each [`WriteOp`] on its own, run by the writer thread (`writer.rs`, which decides
//! how ops share a transaction and when each gets a savepoint).
//!
//! Shape (docs/ARCHITECTURE.md, the path of a durable event): an Append is one `UPDATE sessions`
//! that both moves `latest_seq` and checks it (so no separate read is needed), then one prepared
//! INSERT per event. The statements are prepared once and kept in the connection's cache: with no
//! round trip between statements (the connection lives on the thread that runs them), a row per
//! statement is as cheap as any multi-row form.

use rusqlite::{params, Connection, OptionalExtension};

use tether_protocol::{SessionId, SessionStatus};

use crate::rules;
use crate::{EventRow, NewSession, SessionPatch, StoreError, WriteOp};

use super::errors::{map_rusqlite, Doing};
use crate::columns::{json_text, to_i64};

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

const INSERT_EVENT: &str = "INSERT INTO events \
    (session_id, seq, type, payload, turn_id, trace_id, ts_ms) \
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";

/// Whether an id's previous life is still being erased (`crate::erase`): its events may still
/// be in the table, and the erase would take the new life's with them.
const SELECT_ERASING: &str = "SELECT 1 FROM erasing WHERE session_id = ?1";

const SELECT_LATEST_SEQ: &str = "SELECT latest_seq FROM sessions WHERE id = ?1";

/// Runs one op. The caller wraps it in a savepoint (or a transaction of its own) and rolls that
/// back on error, so an error half-way leaves nothing behind.
pub(crate) fn apply(conn: &Connection, op: &WriteOp) -> Result<(), StoreError> {
    match op {
        WriteOp::CreateSession { session, events } => create_session(conn, session, events),
        // In a savepoint a refusal and an SQL error end alike: the op is rolled back.
        WriteOp::Append { .. } | WriteOp::Patch { .. } => apply_checked_first(conn, op)?,
    }
}

/// Runs an Append or a Patch whose refusal writes nothing: `Ok(Err(_))` is the op refused (by
/// its seq check, its first statement), `Err(_)` an SQL error after which the transaction must
/// be rolled back, since part of the op may be written.
pub(crate) fn apply_checked_first(
    conn: &Connection,
    op: &WriteOp,
) -> Result<Result<(), StoreError>, StoreError> {
    let (session_id, events, patch) = match op {
        WriteOp::Append {
            session_id,
            events,
            patch,
        } => (session_id, events.as_slice(), patch),
        WriteOp::Patch { session_id, patch } => (session_id, &[][..], patch),
        WriteOp::CreateSession { .. } => {
            return Err(StoreError::Invalid("create without a savepoint".into()))
        }
    };
    if let Err(refused) = check_shape(events) {
        return Ok(Err(refused));
    }
    let seqs = match (events.first(), events.last()) {
        (Some(first), Some(last)) => Some((first.seq - 1, last.seq)),
        _ => None,
    };
    match update(conn, session_id, patch, seqs) {
        Ok(()) => {}
        Err(Mismatch::NoRow) => return Ok(Err(refusal(conn, session_id, events)?)),
        Err(Mismatch::Error(e)) => return Err(e),
    }
    insert_events(conn, session_id, events)?;
    Ok(Ok(()))
}

/// Latest seq of a session as this connection sees it; `None` if the session does not exist.
pub(crate) fn latest_seq(
    conn: &Connection,
    session_id: &SessionId,
) -> Result<Option<u64>, StoreError> {
    let seq: Option<i64> = conn
        .prepare_cached(SELECT_LATEST_SEQ)
        .and_then(|mut stmt| {
            stmt.query_row([session_id.as_str()], |row| row.get(0))
                .optional()
        })
        .map_err(write_err)?;
    seq.map(|seq| {
        u64::try_from(seq).map_err(|_| StoreError::Invalid(format!("stored latest_seq is {seq}")))
    })
    .transpose()
}

fn create_session(
    conn: &Connection,
    session: &NewSession,
    events: &[EventRow],
) -> Result<(), StoreError> {
    rules::check_create(events)?;
    // Read in the write transaction, so the erase (which takes turns with this writer on the
    // write lock) cannot free the id between this check and the insert.
    let erasing = conn
        .prepare_cached(SELECT_ERASING)
        .and_then(|mut stmt| stmt.exists([session.id.as_str()]))
        .map_err(write_err)?;
    if erasing {
        return Err(StoreError::Erasing(session.id.clone()));
    }
    let latest_seq = events.last().map_or(0, |e| e.seq);
    conn.prepare_cached(INSERT_PROFILE)
        .and_then(|mut stmt| stmt.execute(params![session.profile.as_str(), session.created_at_ms]))
        .map_err(write_err)?;
    let latest_seq = to_i64(latest_seq, "seq")?;
    let message_count = to_i64(session.message_count, "message_count")?;
    conn.prepare_cached(INSERT_SESSION)
        .and_then(|mut stmt| {
            stmt.execute(params![
                session.id.as_str(),
                session.profile.as_str(),
                session.title.as_str(),
                SessionStatus::Idle.as_str(),
                session.parent_session_id.as_ref().map(SessionId::as_str),
                session.kind.as_str(),
                session.close_on_disconnect,
                json_text(&session.engine_pin),
                session.follow_profile_config,
                session.created_at_ms,
                latest_seq,
                message_count,
            ])
        })
        .map_err(write_err)?;
    insert_events(conn, &session.id, events)
}

/// Appended seqs must be contiguous and start at 1 or later.
fn check_shape(events: &[EventRow]) -> Result<(), StoreError> {
    rules::check_contiguous(events)?;
    if events.first().is_some_and(|e| e.seq == 0) {
        return Err(StoreError::Invalid("seqs start at 1".into()));
    }
    Ok(())
}

/// Why an append's (or a patch's) seq-checking UPDATE matched no row, as the error
/// `check_append` gives; `Err` only if reading the session failed.
fn refusal(
    conn: &Connection,
    session_id: &SessionId,
    events: &[EventRow],
) -> Result<StoreError, StoreError> {
    if events.is_empty() {
        return Ok(StoreError::Invalid(format!(
            "no session {}",
            session_id.as_str()
        )));
    }
    let latest = latest_seq(conn, session_id)?;
    Ok(rules::check_append(session_id, latest, events)
        .err()
        .unwrap_or_else(|| StoreError::Io(format!("session {} not updated", session_id.as_str()))))
}

/// Applies `patch`; with `seqs = Some((expected, new))` also moves `latest_seq` from `expected`
/// to `new`, failing (and changing nothing) when the row's `latest_seq` is not `expected`.
fn update(
    conn: &Connection,
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
    let changed = conn
        .prepare_cached(UPDATE_SESSION)
        .and_then(|mut stmt| {
            stmt.execute(params![
                patch.status.map(|s| s.as_str()),
                patch.title.as_deref(),
                message_count,
                history_version,
                patch.turn_marker.is_some(),
                patch.turn_marker.as_ref().and_then(json_text),
                patch.updated_at_ms,
                new,
                session_id.as_str(),
                expected,
            ])
        })
        .map_err(write_err)?;
    if changed == 1 {
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

fn insert_events(
    conn: &Connection,
    session_id: &SessionId,
    events: &[EventRow],
) -> Result<(), StoreError> {
    let mut stmt = conn.prepare_cached(INSERT_EVENT).map_err(write_err)?;
    for ev in events {
        stmt.execute(params![
            session_id.as_str(),
            to_i64(ev.seq, "seq")?,
            ev.kind.as_str(),
            ev.payload.as_str(),
            ev.turn_id.as_deref(),
            ev.trace_id.as_deref(),
            ev.ts_ms,
        ])
        .map_err(write_err)?;
    }
    Ok(())
}

fn write_err(e: rusqlite::Error) -> StoreError {
    map_rusqlite(e, Doing::Write)
}
