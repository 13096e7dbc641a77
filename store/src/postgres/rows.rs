//! Row → model conversions of the PostgreSQL store (the same columns as SQLite's, in the same
//! order: `sqlite/rows.rs` has the column lists both dialects select).

use serde_json::Value;
use sqlx::postgres::PgRow;
use sqlx::Row;

use tether_protocol::{SessionId, SessionStatus};

use crate::{EventRow, SessionRow, StoreError};

use super::errors::map_sqlx;

pub(crate) use crate::columns::{EVENT_COLUMNS, SESSION_COLUMNS};

/// A stored integer that must not be negative.
fn to_u64(value: i64, what: &str) -> Result<u64, StoreError> {
    u64::try_from(value).map_err(|_| StoreError::Invalid(format!("stored {what} is {value}")))
}

fn parse_json(text: Option<String>, what: &str) -> Result<Option<Value>, StoreError> {
    text.map(|t| {
        serde_json::from_str(&t)
            .map_err(|e| StoreError::Invalid(format!("stored {what} is not JSON: {e}")))
    })
    .transpose()
}

pub(crate) fn get<'r, T>(row: &'r PgRow, idx: usize) -> Result<T, StoreError>
where
    T: sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres>,
{
    row.try_get(idx).map_err(map_sqlx)
}

/// Decodes a row selected with [`SESSION_COLUMNS`].
pub(crate) fn session_from_row(row: &PgRow) -> Result<SessionRow, StoreError> {
    let status: String = get(row, 3)?;
    Ok(SessionRow {
        id: SessionId::from(get::<String>(row, 0)?),
        profile: get(row, 1)?,
        title: get(row, 2)?,
        status: SessionStatus::parse(&status)
            .ok_or_else(|| StoreError::Invalid(format!("stored status {status:?}")))?,
        parent_session_id: get::<Option<String>>(row, 4)?.map(SessionId::from),
        kind: get(row, 5)?,
        history_version: to_u64(get(row, 6)?, "history_version")?,
        close_on_disconnect: get(row, 7)?,
        engine_pin: parse_json(get(row, 8)?, "engine_pin")?,
        follow_profile_config: get(row, 9)?,
        turn_marker: parse_json(get(row, 10)?, "turn_marker")?,
        created_at_ms: get(row, 11)?,
        updated_at_ms: get(row, 12)?,
        latest_seq: to_u64(get(row, 13)?, "latest_seq")?,
        message_count: to_u64(get(row, 14)?, "message_count")?,
        retained_from_seq: to_u64(get(row, 15)?, "retained_from_seq")?,
    })
}

/// Decodes a row selected with [`EVENT_COLUMNS`].
pub(crate) fn event_from_row(row: &PgRow) -> Result<EventRow, StoreError> {
    Ok(EventRow {
        seq: to_u64(get(row, 0)?, "seq")?,
        kind: get(row, 1)?,
        payload: get(row, 2)?,
        turn_id: get(row, 3)?,
        trace_id: get(row, 4)?,
        ts_ms: get(row, 5)?,
    })
}
