//! The handoff statements of both stores (`sqlite/handoffs.rs`, `postgres/handoffs.rs`), as one
//! SQL text for both dialects (`$n` placeholders, which SQLite takes too). What differs is
//! only the column that orders rows by insertion and how a claim keeps others off the row it
//! picks ([`Ordering`]); the binds stay beside each pool.

use tether_protocol::{HandoffState, SessionStatus};

use crate::rows::HANDOFF_COLUMNS;

/// What a dialect says about insertion order and concurrent claims.
pub(crate) struct Ordering {
    /// The column that grows with every insert (`rowid`, a sequence): not the clock, which may
    /// step back and hide the newest row, and a tie-breaker within a millisecond.
    pub inserted: &'static str,
    /// Appended to the claim's choice of row: PostgreSQL's `FOR UPDATE SKIP LOCKED` (two claims
    /// under READ COMMITTED never return the same handoff, and neither waits for the other);
    /// empty where one statement at a time writes (SQLite).
    pub claim_lock: &'static str,
}

/// The statements, built once.
pub(crate) struct HandoffSql {
    /// `$1` id, `$2` session, `$3` profile, `$4` target, `$5` now.
    pub request: String,
    /// `$1` profile, `$2` target, `$3` now.
    pub claim: String,
    /// `$1` id, `$2` profile, `$3` now.
    pub complete: String,
    /// `$1` id, `$2` profile, `$3` error, `$4` now, `$5` only_if_pending.
    pub fail: String,
    /// `$1` session, `$2` profile.
    pub latest: String,
    /// `$1` session, `$2` profile.
    pub in_flight: String,
    /// `$1` id, `$2` profile.
    pub state_of: String,
    /// `$1` session, `$2` profile.
    pub session_status: String,
}

impl HandoffSql {
    pub(crate) fn new(ordering: &Ordering) -> Self {
        let pending = HandoffState::Pending.as_str();
        let running = HandoffState::Running.as_str();
        let completed = HandoffState::Completed.as_str();
        let failed = HandoffState::Failed.as_str();
        let closed = SessionStatus::Closed.as_str();
        let Ordering {
            inserted,
            claim_lock,
        } = ordering;
        HandoffSql {
            // The session (open, in this profile) and the absence of a handoff in flight are
            // checked by the INSERT itself: no other writer can slip in between (and a unique
            // index keeps two racing requests from both inserting).
            request: format!(
                "INSERT INTO handoffs ({HANDOFF_COLUMNS}) \
                 SELECT $1, $2, $3, $4, '{pending}', NULL, $5, $5 \
                 WHERE EXISTS (SELECT 1 FROM sessions WHERE id = $2 AND profile = $3 \
                     AND status <> '{closed}') \
                 AND NOT EXISTS (SELECT 1 FROM handoffs WHERE session_id = $2 \
                     AND state IN ('{pending}', '{running}'))"
            ),
            // The oldest pending one, moved in the same statement that picks it. The repeated
            // `state = pending` keeps it a compare-and-set even under an isolation level that
            // re-reads the row.
            claim: format!(
                "UPDATE handoffs SET state = '{running}', updated_at_ms = $3 \
                 WHERE id = (SELECT id FROM handoffs WHERE profile = $1 AND target = $2 \
                     AND state = '{pending}' ORDER BY created_at_ms, {inserted} LIMIT 1 \
                     {claim_lock}) \
                 AND state = '{pending}' RETURNING {HANDOFF_COLUMNS}"
            ),
            complete: format!(
                "UPDATE handoffs SET state = '{completed}', updated_at_ms = $3 \
                 WHERE id = $1 AND profile = $2 AND state = '{running}' RETURNING {HANDOFF_COLUMNS}"
            ),
            fail: format!(
                "UPDATE handoffs SET state = '{failed}', error = $3, updated_at_ms = $4 \
                 WHERE id = $1 AND profile = $2 \
                 AND (state = '{pending}' OR (NOT $5 AND state = '{running}')) \
                 RETURNING {HANDOFF_COLUMNS}"
            ),
            latest: format!(
                "SELECT {HANDOFF_COLUMNS} FROM handoffs WHERE session_id = $1 AND profile = $2 \
                 ORDER BY {inserted} DESC LIMIT 1"
            ),
            in_flight: format!(
                "SELECT {HANDOFF_COLUMNS} FROM handoffs WHERE session_id = $1 AND profile = $2 \
                 AND state IN ('{pending}', '{running}')"
            ),
            state_of: "SELECT state FROM handoffs WHERE id = $1 AND profile = $2".to_string(),
            session_status: "SELECT status FROM sessions WHERE id = $1 AND profile = $2"
                .to_string(),
        }
    }
}
