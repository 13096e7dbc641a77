//! The statements of deletion and retention, as one SQL text for both stores (`$n`
//! placeholders, which SQLite takes too; casts spelled the way both accept). What differs is
//! said by a [`Dialect`]: how a list of profiles is matched, which further tables hang on a
//! session, and what else a finished erase clears.

use tether_protocol::{EventType, SessionStatus};

/// What one store says about itself.
pub(crate) struct Dialect {
    /// The condition "`profile` is in the JSON array `$1`" (and its negation below): SQLite reads
    /// the array with `json_each`, PostgreSQL with `json_array_elements_text`. One bind type (a
    /// JSON text) for both keeps the binds in one place.
    pub profile_in: &'static str,
    /// "`profile` is not in the JSON array `$1`".
    pub profile_not_in: &'static str,
    /// Tables besides `handoffs` whose rows (keyed by `session_id`) go with the session in
    /// step 1 of an erase.
    pub hanging: &'static [&'static str],
    /// A statement run after the cut erases are finished (`$1` a batch size), if the store needs
    /// one.
    pub after_finish: Option<&'static str>,
    /// A statement run inside the transaction that removes a session's row and in each trim
    /// batch's (`$1` the session), if other processes must hear of it when it commits (the
    /// nodes of a cluster).
    pub erased: Option<&'static str>,
}

/// The statements, built once per store.
pub(crate) struct EraseSql {
    /// `$1` id, `$2` profile, `$3` its life (`created_at_ms`) or NULL for any; returns the
    /// session's `latest_seq`.
    pub delete_session: String,
    /// `$1` events now erased: added to the store's count of them (`crate::served`).
    pub count_erased: String,
    /// `$1` session, `$2` now.
    pub mark_erasing: String,
    /// `$1` parent; returns the branches unlinked.
    pub unlink_branches: String,
    /// `$1` session, each: what hangs on it.
    pub delete_hanging: Vec<String>,
    /// `$1` session, `$2` batch.
    pub delete_events: String,
    /// `$1` session.
    pub unmark_erasing: String,
    /// `$1` profile, `$2` limit.
    pub profile_sessions: String,
    /// `$1` profile, each.
    pub drop_profile: [String; 2],
    /// `$1` limit.
    pub erasing: String,
    /// `$1` profiles (JSON), `$2` status, `$3` before, `$4` limit; per scope: in, not in.
    /// Returns profile, id, `created_at_ms`.
    pub idle_since: [String; 2],
    /// `$1` profiles (JSON), `$2` max events, `$3` before, `$4` limit; per scope.
    pub trim_candidates: [String; 2],
    /// `$1` session: retained_from_seq, latest_seq, the latest compaction's seq.
    pub trim_bounds: String,
    /// `$1` session, `$2` from, `$3` window end (excluded), `$4` before: the last seq old enough.
    pub trim_by_age: String,
    /// `$1` session, `$2` up to seq.
    pub trim_events: String,
    /// `$1` session, `$2` new retained_from_seq.
    pub trim_mark: String,
}

impl EraseSql {
    pub(crate) fn new(d: &Dialect) -> Self {
        let closed = SessionStatus::Closed.as_str();
        let compacted = EventType::SessionCompacted.as_str();
        let scoped = |f: &dyn Fn(&str) -> String| [f(d.profile_in), f(d.profile_not_in)];
        EraseSql {
            delete_session: "DELETE FROM sessions WHERE id = $1 AND profile = $2 \
                             AND (CAST($3 AS BIGINT) IS NULL \
                                  OR created_at_ms = CAST($3 AS BIGINT)) \
                             RETURNING latest_seq"
                .into(),
            // What the store ever held only grows: erased events still count.
            count_erased: "INSERT INTO meta (key, value) \
                           VALUES ('erased_events', CAST(CAST($1 AS BIGINT) AS TEXT)) \
                           ON CONFLICT (key) DO UPDATE SET value = \
                           CAST(CAST(meta.value AS BIGINT) + CAST($1 AS BIGINT) AS TEXT)"
                .into(),
            mark_erasing: "INSERT INTO erasing (session_id, since_ms) VALUES ($1, $2) \
                           ON CONFLICT (session_id) DO NOTHING"
                .into(),
            unlink_branches: "UPDATE sessions SET parent_session_id = NULL \
                              WHERE parent_session_id = $1 RETURNING id"
                .into(),
            delete_hanging: std::iter::once(&"handoffs")
                .chain(d.hanging)
                .map(|t| format!("DELETE FROM {t} WHERE session_id = $1"))
                .collect(),
            delete_events: "DELETE FROM events WHERE session_id = $1 AND seq IN \
                            (SELECT seq FROM events WHERE session_id = $1 ORDER BY seq LIMIT $2)"
                .into(),
            unmark_erasing: "DELETE FROM erasing WHERE session_id = $1".into(),
            profile_sessions: "SELECT id FROM sessions WHERE profile = $1 LIMIT $2".into(),
            drop_profile: [
                "DELETE FROM handoffs WHERE profile = $1".into(),
                "DELETE FROM profiles WHERE name = $1".into(),
            ],
            erasing: "SELECT session_id FROM erasing LIMIT $1".into(),
            idle_since: scoped(&|within| {
                format!(
                    "SELECT profile, id, created_at_ms FROM sessions WHERE {within} AND status = $2 \
                     AND updated_at_ms < $3 ORDER BY updated_at_ms LIMIT $4"
                )
            }),
            // The latest compaction bounds what may go; then either rule picks the session.
            trim_candidates: scoped(&|within| {
                format!(
                    "SELECT s.profile, s.id FROM sessions s \
                     JOIN (SELECT session_id, MAX(seq) AS cut FROM events \
                           WHERE type = '{compacted}' GROUP BY session_id) c \
                       ON c.session_id = s.id \
                     WHERE s.{within} AND s.status <> '{closed}' AND s.retained_from_seq < c.cut \
                     AND ((CAST($2 AS BIGINT) IS NOT NULL \
                           AND s.latest_seq - s.retained_from_seq + 1 > CAST($2 AS BIGINT)) \
                       OR (CAST($3 AS BIGINT) IS NOT NULL AND EXISTS (SELECT 1 FROM events e \
                           WHERE e.session_id = s.id AND e.seq = s.retained_from_seq \
                           AND e.ts_ms < CAST($3 AS BIGINT)))) \
                     LIMIT $4"
                )
            }),
            trim_bounds: format!(
                "SELECT retained_from_seq, latest_seq, \
                 (SELECT MAX(seq) FROM events WHERE session_id = $1 AND type = '{compacted}') \
                 FROM sessions WHERE id = $1"
            ),
            trim_by_age: "SELECT MAX(seq) FROM events WHERE session_id = $1 AND seq >= $2 \
                          AND seq < $3 AND ts_ms < $4"
                .into(),
            trim_events: "DELETE FROM events WHERE session_id = $1 AND seq <= $2".into(),
            trim_mark: "UPDATE sessions SET retained_from_seq = $2 WHERE id = $1".into(),
        }
    }
}
