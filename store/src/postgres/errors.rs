//! PostgreSQL errors → [`StoreError`].
//!
//! By SQLSTATE (class first), because the state, unlike the message, says whether anything can
//! be retried and which wire code (5070/5071/5072) a client must see. A lost connection is told
//! apart from an error the server answered: only the first can leave a commit in doubt
//! (`writer.rs`).

use sqlx::migrate::MigrateError;

use crate::rows::is_bad_data;
use crate::StoreError;

/// The SQLSTATE our guard function raises when a session's `latest_seq` is not the one a batch
/// was planned on (migrations/postgres/0001_init.sql).
pub(crate) const STALE_PLAN: &str = "TT001";

/// What a failed call tells about the connection it ran on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Failure {
    /// The server answered with an error: the statement did nothing and the connection is fine.
    Refused(StoreError),
    /// The connection broke (or timed out) mid-call: a statement sent may or may not have run,
    /// and the connection must be dropped.
    Lost(StoreError),
    /// The batch statement's guard refused it: a `latest_seq` was not what it was planned on.
    /// Nothing was written.
    Stale(StoreError),
}

impl Failure {
    pub(crate) fn error(&self) -> &StoreError {
        match self {
            Failure::Refused(e) | Failure::Lost(e) | Failure::Stale(e) => e,
        }
    }
}

/// Classifies a sqlx error.
pub(crate) fn classify(err: sqlx::Error) -> Failure {
    let text = err.to_string();
    match &err {
        sqlx::Error::Database(db) => {
            let state = db.code().map(|c| c.into_owned()).unwrap_or_default();
            // The server ends the connection after these (shutdown, terminated backend).
            if matches!(state.as_str(), "57P01" | "57P02" | "57P03") || state.starts_with("08") {
                Failure::Lost(StoreError::Unavailable(text))
            } else if state == STALE_PLAN {
                Failure::Stale(StoreError::Conflict(text))
            } else {
                Failure::Refused(map_state(&state, text))
            }
        }
        sqlx::Error::Io(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::PoolClosed => Failure::Lost(StoreError::Unavailable(text)),
        sqlx::Error::PoolTimedOut | sqlx::Error::Configuration(_) => {
            Failure::Refused(StoreError::Unavailable(text))
        }
        _ if is_bad_data(&err) => Failure::Refused(StoreError::Invalid(text)),
        _ => Failure::Refused(StoreError::Io(text)),
    }
}

/// Maps a sqlx error, for callers that do not care whether the connection survived (the pools
/// drop broken connections by themselves).
pub(crate) fn map_sqlx(err: sqlx::Error) -> StoreError {
    classify(err).error().clone()
}

/// Maps a failed migration that is not about versions (those are the caller's: see
/// `open.rs`).
pub(crate) fn map_migrate(err: MigrateError) -> StoreError {
    match err {
        MigrateError::Execute(e) | MigrateError::ExecuteMigration(e, _) => map_sqlx(e),
        other => StoreError::Unavailable(format!("migrations: {other}")),
    }
}

/// Maps a SQLSTATE (<https://www.postgresql.org/docs/current/errcodes-appendix.html>).
fn map_state(state: &str, text: String) -> StoreError {
    match state {
        // disk_full, out_of_memory: nothing of the statement exists.
        "53100" | "53200" => StoreError::Full(text),
        "23505" => StoreError::Conflict(text),
        // Lock and serialization trouble, too many connections, a cancelled statement
        // (statement_timeout), the server in recovery: retrying later may work.
        "40001" | "40P01" | "55P03" | "53300" | "57014" | "57P04" => StoreError::Unavailable(text),
        // io_error, data_corrupted, index_corrupted, a read-only transaction (a standby).
        "58030" | "XX001" | "XX002" | "25006" => StoreError::Io(text),
        _ if state.starts_with("23") || state.starts_with("22") => StoreError::Invalid(text),
        _ if state.starts_with("53") => StoreError::Unavailable(text),
        _ => StoreError::Io(text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_follow_the_wire_codes() {
        let code = |s: &str| map_state(s, String::new()).code();
        assert_eq!(code("53100"), 5070);
        assert_eq!(code("23505"), 5071);
        assert_eq!(code("23502"), 5071);
        assert_eq!(code("22021"), 5071);
        assert_eq!(code("58030"), 5071);
        assert_eq!(code("40001"), 5072);
        assert_eq!(code("57014"), 5072);
        assert_eq!(code("53300"), 5072);
        assert!(matches!(
            map_state("23505", String::new()),
            StoreError::Conflict(_)
        ));
    }

    #[test]
    fn a_broken_socket_is_a_lost_connection() {
        let io = sqlx::Error::Io(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert!(matches!(
            classify(io),
            Failure::Lost(StoreError::Unavailable(_))
        ));
        assert!(matches!(
            classify(sqlx::Error::PoolTimedOut),
            Failure::Refused(StoreError::Unavailable(_))
        ));
    }

    #[test]
    fn decoding_fails_as_this_dialect_says() {
        // The shared row decoders map their errors without a dialect (`crate::rows`).
        let err = || sqlx::Error::ColumnIndexOutOfBounds { index: 9, len: 8 };
        assert_eq!(map_sqlx(err()), crate::rows::decode_err(err()));
    }
}
