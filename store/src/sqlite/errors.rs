//! SQLite errors (sqlx's for the readers, rusqlite's for the writer thread) → [`StoreError`].
//!
//! The mapping is by SQLite result code (the primary code is the low byte of the extended code
//! sqlx reports), because the code, unlike the message, says whether anything can be retried
//! and which wire code (5070/5071/5072) a client must see.

use sqlx::migrate::MigrateError;

use crate::rows::is_bad_data;
use crate::StoreError;

// SQLite primary result codes (https://www.sqlite.org/rescode.html).
const SQLITE_BUSY: i64 = 5;
const SQLITE_LOCKED: i64 = 6;
const SQLITE_NOMEM: i64 = 7;
const SQLITE_READONLY: i64 = 8;
const SQLITE_INTERRUPT: i64 = 9;
const SQLITE_IOERR: i64 = 10;
const SQLITE_CORRUPT: i64 = 11;
const SQLITE_FULL: i64 = 13;
const SQLITE_CANTOPEN: i64 = 14;
const SQLITE_CONSTRAINT: i64 = 19;
const SQLITE_NOTADB: i64 = 26;
// Extended constraint codes that mean "this key is taken", as opposed to malformed data.
const SQLITE_CONSTRAINT_PRIMARYKEY: i64 = 1555;
const SQLITE_CONSTRAINT_UNIQUE: i64 = 2067;

/// What the failing call was doing: the same code can mean different things. A file that cannot
/// be opened at start is "unavailable"; one that cannot be opened mid-write (e.g. the WAL) is a
/// failed write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Doing {
    /// Opening connections, running migrations.
    Open,
    /// Reading.
    Read,
    /// Writing.
    Write,
}

/// Maps a sqlx error.
pub(crate) fn map_sqlx(err: sqlx::Error, doing: Doing) -> StoreError {
    let text = err.to_string();
    match &err {
        sqlx::Error::Database(db) => {
            let extended = db
                .code()
                .and_then(|c| c.parse::<i64>().ok())
                .unwrap_or_default();
            map_code(extended, text, doing)
        }
        sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::Io(_)
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::Configuration(_) => StoreError::Unavailable(text),
        sqlx::Error::Migrate(_) => StoreError::Unavailable(text),
        _ if is_bad_data(&err) => StoreError::Invalid(text),
        _ => StoreError::Io(text),
    }
}

/// Maps a rusqlite error (the writer thread's connection).
pub(crate) fn map_rusqlite(err: rusqlite::Error, doing: Doing) -> StoreError {
    let text = err.to_string();
    match &err {
        rusqlite::Error::SqliteFailure(e, _) => map_code(i64::from(e.extended_code), text, doing),
        rusqlite::Error::FromSqlConversionFailure(..)
        | rusqlite::Error::IntegralValueOutOfRange(..)
        | rusqlite::Error::InvalidColumnType(..)
        | rusqlite::Error::QueryReturnedNoRows
        | rusqlite::Error::ToSqlConversionFailure(_) => StoreError::Invalid(text),
        _ => match doing {
            Doing::Open => StoreError::Unavailable(text),
            Doing::Read | Doing::Write => StoreError::Io(text),
        },
    }
}

/// Maps a failed migration: the store cannot be used until it is fixed.
pub(crate) fn map_migrate(err: MigrateError) -> StoreError {
    match err {
        MigrateError::Execute(e) | MigrateError::ExecuteMigration(e, _) => map_sqlx(e, Doing::Open),
        other => StoreError::Unavailable(format!("migrations: {other}")),
    }
}

/// Maps an SQLite extended result code.
fn map_code(extended: i64, text: String, doing: Doing) -> StoreError {
    match extended & 0xff {
        SQLITE_FULL => StoreError::Full(text),
        SQLITE_IOERR | SQLITE_READONLY | SQLITE_CORRUPT | SQLITE_NOTADB => StoreError::Io(text),
        SQLITE_CANTOPEN => match doing {
            Doing::Write => StoreError::Io(text),
            Doing::Open | Doing::Read => StoreError::Unavailable(text),
        },
        SQLITE_BUSY | SQLITE_LOCKED | SQLITE_INTERRUPT | SQLITE_NOMEM => {
            StoreError::Unavailable(text)
        }
        SQLITE_CONSTRAINT => match extended {
            SQLITE_CONSTRAINT_PRIMARYKEY | SQLITE_CONSTRAINT_UNIQUE => StoreError::Conflict(text),
            _ => StoreError::Invalid(text),
        },
        _ => StoreError::Io(text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(extended: i64, doing: Doing) -> StoreError {
        map_code(extended, String::new(), doing)
    }

    #[test]
    fn primary_codes() {
        assert_eq!(code(13, Doing::Write), StoreError::Full(String::new()));
        // SQLITE_IOERR_WRITE (778) is an IOERR.
        assert_eq!(code(778, Doing::Write), StoreError::Io(String::new()));
        assert_eq!(code(8, Doing::Write), StoreError::Io(String::new()));
        assert_eq!(code(11, Doing::Read), StoreError::Io(String::new()));
        assert_eq!(code(14, Doing::Write), StoreError::Io(String::new()));
        assert_eq!(
            code(14, Doing::Open),
            StoreError::Unavailable(String::new())
        );
        // SQLITE_BUSY_SNAPSHOT (517) is a BUSY.
        assert_eq!(
            code(517, Doing::Write),
            StoreError::Unavailable(String::new())
        );
        assert_eq!(
            code(1555, Doing::Write),
            StoreError::Conflict(String::new())
        );
        assert_eq!(
            code(2067, Doing::Write),
            StoreError::Conflict(String::new())
        );
        // NOT NULL violation: bad data, not a collision.
        assert_eq!(code(1299, Doing::Write), StoreError::Invalid(String::new()));
    }

    #[test]
    fn pool_errors_are_unavailable() {
        assert!(matches!(
            map_sqlx(sqlx::Error::PoolTimedOut, Doing::Read),
            StoreError::Unavailable(_)
        ));
        assert!(matches!(
            map_sqlx(sqlx::Error::PoolClosed, Doing::Write),
            StoreError::Unavailable(_)
        ));
    }

    #[test]
    fn decoding_fails_as_this_dialect_says() {
        // The shared row decoders map their errors without a dialect (`crate::rows`).
        let err = || sqlx::Error::ColumnIndexOutOfBounds { index: 9, len: 8 };
        assert_eq!(map_sqlx(err(), Doing::Read), crate::rows::decode_err(err()));
    }
}
