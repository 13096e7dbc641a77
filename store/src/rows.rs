//! Row → model decoding, once for both dialects.
//!
//! Both schemas keep the same columns in the same order (`columns.rs`) and store only TEXT,
//! BIGINT/INTEGER, BOOLEAN and NULL, which sqlx decodes alike in both (to `String`, `i64`,
//! `bool`, `None`). So how a row becomes a [`SessionRow`], an [`EventRow`] or a [`HandoffRow`]
//! is decided here, generic over the row type ([`StoreRow`]); a dialect only says which SQL
//! selected it.
//!
//! Integers are i64 in both databases; the model's counters are u64. Conversions are checked so
//! that a corrupt or hand-edited row surfaces as `Invalid` instead of a wrapped number.

use serde_json::Value;
use sqlx::{ColumnIndex, Decode, Row, Type};

use tether_protocol::{HandoffId, HandoffState, SessionId, SessionStatus};

use crate::{EventRow, HandoffRow, SessionRow, StoreError};

/// The handoff columns, in the order [`handoff_from_row`] reads them.
pub(crate) const HANDOFF_COLUMNS: &str =
    "id, session_id, profile, target, state, error, created_at_ms, updated_at_ms";

/// Whether a sqlx error says a value is wrong (it does not decode, encode or exist), not the
/// database or the connection: both dialects answer these `Invalid` (5071), since retrying the
/// same statement on the same data cannot help.
pub(crate) fn is_bad_data(err: &sqlx::Error) -> bool {
    matches!(
        err,
        sqlx::Error::RowNotFound
            | sqlx::Error::ColumnDecode { .. }
            | sqlx::Error::Decode(_)
            | sqlx::Error::Encode(_)
            | sqlx::Error::ColumnNotFound(_)
            | sqlx::Error::ColumnIndexOutOfBounds { .. }
            | sqlx::Error::TypeNotFound { .. }
    )
}

/// A column that did not decode. `Row::try_get` fails only with [`is_bad_data`] errors, which
/// either dialect's own mapping would also call `Invalid` with the same text (tested in each
/// `errors.rs`), so decoding needs no dialect to say so.
pub(crate) fn decode_err(err: sqlx::Error) -> StoreError {
    StoreError::Invalid(err.to_string())
}

/// A row of either dialect, read by position as the few kinds of value the store keeps.
///
/// Implemented for every sqlx row whose database decodes those kinds (both of ours do), so that
/// the decoders below carry one readable bound instead of sqlx's per-type ones.
pub(crate) trait StoreRow {
    /// A TEXT column.
    fn text(&self, idx: usize) -> Result<String, StoreError>;
    /// A nullable TEXT column.
    fn maybe_text(&self, idx: usize) -> Result<Option<String>, StoreError>;
    /// A BIGINT (PostgreSQL) or INTEGER (SQLite) column.
    fn int(&self, idx: usize) -> Result<i64, StoreError>;
    /// A BOOLEAN column (an INTEGER 0/1 in SQLite).
    fn flag(&self, idx: usize) -> Result<bool, StoreError>;
}

impl<R> StoreRow for R
where
    R: Row,
    usize: ColumnIndex<R>,
    String: for<'r> Decode<'r, R::Database> + Type<R::Database>,
    i64: for<'r> Decode<'r, R::Database> + Type<R::Database>,
    bool: for<'r> Decode<'r, R::Database> + Type<R::Database>,
{
    fn text(&self, idx: usize) -> Result<String, StoreError> {
        self.try_get(idx).map_err(decode_err)
    }

    fn maybe_text(&self, idx: usize) -> Result<Option<String>, StoreError> {
        self.try_get(idx).map_err(decode_err)
    }

    fn int(&self, idx: usize) -> Result<i64, StoreError> {
        self.try_get(idx).map_err(decode_err)
    }

    fn flag(&self, idx: usize) -> Result<bool, StoreError> {
        self.try_get(idx).map_err(decode_err)
    }
}

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

/// A stored handoff state; anything but the four known ones is `Invalid`.
pub(crate) fn parse_handoff_state(text: &str) -> Result<HandoffState, StoreError> {
    HandoffState::parse(text)
        .ok_or_else(|| StoreError::Invalid(format!("stored handoff state is {text:?}")))
}

/// Decodes a row selected with [`SESSION_COLUMNS`](crate::columns::SESSION_COLUMNS).
pub(crate) fn session_from_row(row: &impl StoreRow) -> Result<SessionRow, StoreError> {
    let status = row.text(3)?;
    Ok(SessionRow {
        id: SessionId::from(row.text(0)?),
        profile: row.text(1)?,
        title: row.text(2)?,
        status: SessionStatus::parse(&status)
            .ok_or_else(|| StoreError::Invalid(format!("stored status {status:?}")))?,
        parent_session_id: row.maybe_text(4)?.map(SessionId::from),
        kind: row.text(5)?,
        history_version: to_u64(row.int(6)?, "history_version")?,
        close_on_disconnect: row.flag(7)?,
        engine_pin: parse_json(row.maybe_text(8)?, "engine_pin")?,
        follow_profile_config: row.flag(9)?,
        turn_marker: parse_json(row.maybe_text(10)?, "turn_marker")?,
        created_at_ms: row.int(11)?,
        updated_at_ms: row.int(12)?,
        latest_seq: to_u64(row.int(13)?, "latest_seq")?,
        message_count: to_u64(row.int(14)?, "message_count")?,
        retained_from_seq: to_u64(row.int(15)?, "retained_from_seq")?,
    })
}

/// Decodes a row selected with [`EVENT_COLUMNS`](crate::columns::EVENT_COLUMNS).
pub(crate) fn event_from_row(row: &impl StoreRow) -> Result<EventRow, StoreError> {
    Ok(EventRow {
        seq: to_u64(row.int(0)?, "seq")?,
        kind: row.text(1)?,
        payload: row.text(2)?,
        turn_id: row.maybe_text(3)?,
        trace_id: row.maybe_text(4)?,
        ts_ms: row.int(5)?,
    })
}

/// Decodes a row selected (or returned) with [`HANDOFF_COLUMNS`].
pub(crate) fn handoff_from_row(row: &impl StoreRow) -> Result<HandoffRow, StoreError> {
    Ok(HandoffRow {
        id: HandoffId::from(row.text(0)?),
        session_id: SessionId::from(row.text(1)?),
        profile: row.text(2)?,
        target: row.text(3)?,
        state: parse_handoff_state(&row.text(4)?)?,
        error: row.maybe_text(5)?,
        created_at_ms: row.int(6)?,
        updated_at_ms: row.int(7)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_and_states_are_checked() {
        assert_eq!(to_u64(7, "seq"), Ok(7));
        assert!(matches!(to_u64(-1, "seq"), Err(StoreError::Invalid(_))));
        assert_eq!(parse_json(None, "pin"), Ok(None));
        assert!(matches!(
            parse_json(Some("{".into()), "pin"),
            Err(StoreError::Invalid(_))
        ));
        assert_eq!(parse_handoff_state("running"), Ok(HandoffState::Running));
        assert!(matches!(
            parse_handoff_state("lost"),
            Err(StoreError::Invalid(_))
        ));
    }

    #[test]
    fn decode_failures_are_bad_data() {
        let err = sqlx::Error::ColumnIndexOutOfBounds { index: 9, len: 8 };
        assert!(is_bad_data(&err));
        assert!(!is_bad_data(&sqlx::Error::PoolTimedOut));
        assert!(matches!(decode_err(err), StoreError::Invalid(_)));
    }
}
