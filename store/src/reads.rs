//! The reads both stores run (`reader.rs`), as one SQL text for both dialects: `$n`
//! placeholders, which SQLite takes as well as PostgreSQL, and the same column lists and
//! decoders (`rows.rs`). What differs is only where SQLite's planner needs an index named
//! ([`IndexHints`]).

use tether_protocol::{EventType, SessionStatus};

use crate::columns::{EVENT_COLUMNS, SESSION_COLUMNS};

/// `INDEXED BY …` where a dialect's planner must be told (SQLite), empty where it finds the
/// index itself (PostgreSQL).
pub(crate) struct IndexHints {
    /// On `events`, to find a session's latest compaction.
    pub compactions: &'static str,
    /// On `events`, to find a session's latest todo snapshot.
    pub todos: &'static str,
    /// On `sessions`, to find those with a turn marker.
    pub turn_markers: &'static str,
}

impl IndexHints {
    /// None: the planner finds every index by itself.
    pub const NONE: IndexHints = IndexHints {
        compactions: "",
        todos: "",
        turn_markers: "",
    };
}

/// The reader's statements, built once.
pub(crate) struct ReadSql {
    /// `$1` id, `$2` profile.
    pub get_session: String,
    /// `$1` profile, `$2` include_closed, `$3` limit.
    pub list_first: String,
    /// As `list_first`, then the keyset: `$4` created_at_ms, `$5` id.
    pub list_after: String,
    /// `$1` session, `$2` after seq, `$3` limit.
    pub events_since: String,
    /// `$1` session, `$2` up to seq.
    pub segment: String,
    /// `$1` session.
    pub latest_todos: String,
    /// `$1` profile, `$2` parent id.
    pub branch_titles: String,
    /// No binds.
    pub with_turn_marker: String,
    /// `$1` the closed status.
    pub count_not_closed: String,
}

impl ReadSql {
    pub(crate) fn new(hints: &IndexHints) -> Self {
        let kinds = EventType::ALL
            .iter()
            .filter(|k| k.feeds_transcript())
            .map(|k| format!("'{k}'"))
            .collect::<Vec<_>>()
            .join(", ");
        let closed = SessionStatus::Closed.as_str();
        // `$2` = include_closed. The row-value comparison keeps the (profile, created_at_ms
        // DESC, id DESC) index usable for the keyset condition.
        let list = |after: &str| {
            format!(
                "SELECT {SESSION_COLUMNS} FROM sessions WHERE profile = $1 \
                 AND ($2 OR status <> '{closed}') {after} \
                 ORDER BY created_at_ms DESC, id DESC LIMIT $3"
            )
        };
        let IndexHints {
            compactions,
            todos,
            turn_markers,
        } = hints;
        ReadSql {
            get_session: format!(
                "SELECT {SESSION_COLUMNS} FROM sessions WHERE id = $1 AND profile = $2"
            ),
            list_first: list(""),
            list_after: list("AND (created_at_ms, id) < ($4, $5)"),
            events_since: format!(
                "SELECT {EVENT_COLUMNS} FROM events WHERE session_id = $1 AND seq > $2 \
                 ORDER BY seq LIMIT $3"
            ),
            // The segment starts at the latest compaction (found in the partial index of
            // compactions), or at the beginning when there was none.
            segment: format!(
                "SELECT {EVENT_COLUMNS} FROM events WHERE session_id = $1 \
                 AND seq >= COALESCE((SELECT MAX(seq) FROM events {compactions} \
                     WHERE session_id = $1 AND type = '{compacted}' AND seq <= $2), 0) \
                 AND seq <= $2 AND type IN ({kinds}) ORDER BY seq",
                compacted = EventType::SessionCompacted,
            ),
            latest_todos: format!(
                "SELECT {EVENT_COLUMNS} FROM events {todos} \
                 WHERE session_id = $1 AND type = '{todo}' ORDER BY seq DESC LIMIT 1",
                todo = EventType::TodoUpdated,
            ),
            branch_titles: "SELECT title FROM sessions WHERE profile = $1 \
                 AND parent_session_id = $2"
                .to_string(),
            with_turn_marker: format!(
                "SELECT profile, id FROM sessions {turn_markers} WHERE turn_marker IS NOT NULL"
            ),
            count_not_closed: "SELECT COUNT(*) FROM sessions WHERE status <> $1".to_string(),
        }
    }
}
