//! What both dialects share about rows: the column lists every read selects (in the order the
//! row decoders read them) and the checked conversions on the way in. Both schemas name and
//! order their columns alike (`migrations/sqlite`, `migrations/postgres`).

use serde_json::Value;

use crate::StoreError;

/// The session columns, in the order `rows::session_from_row` reads them.
pub(crate) const SESSION_COLUMNS: &str = "id, profile, title, status, parent_session_id, kind, \
    history_version, close_on_disconnect, engine_pin, follow_profile_config, turn_marker, \
    created_at_ms, updated_at_ms, latest_seq, message_count, retained_from_seq";

/// The event columns, in the order `rows::event_from_row` reads them.
pub(crate) const EVENT_COLUMNS: &str = "seq, type, payload, turn_id, trace_id, ts_ms";

/// A u64 for binding; values beyond i64 cannot be stored.
pub(crate) fn to_i64(value: u64, what: &str) -> Result<i64, StoreError> {
    i64::try_from(value).map_err(|_| StoreError::Invalid(format!("{what} {value} out of range")))
}

/// A JSON column (stored as text).
pub(crate) fn json_text(value: &Option<Value>) -> Option<String> {
    value.as_ref().map(Value::to_string)
}
