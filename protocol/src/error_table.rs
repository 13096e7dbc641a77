//! Every error code of PROTOCOL 1.6 as one table: its name, the HTTP status
//! a route answers it with, whether a client may send the same request
//! again, and its default message.
//!
//! Each transport that turns a code into something else (an HTTP status, a
//! retry decision) reads it here, so two routes cannot disagree about a
//! code and a new code cannot silently become a 500: the tests below fail
//! until every constant of [`codes`] has its row, and until
//! docs/PROTOCOL.md's table says the same as this one.

use crate::codes;

/// One row of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErrorCode {
    /// The wire code.
    pub code: i64,
    /// Its name, as the constant in [`codes`] spells it.
    pub name: &'static str,
    /// The HTTP status a route that refuses a request with this code
    /// answers (`POST /rpc` answers 200 and carries the code in the body).
    pub http_status: u16,
    /// The same request may succeed if sent again unchanged, after a wait
    /// (`data.retry_after_ms` when the gateway knows how long).
    pub retryable: bool,
    /// The message, or the start of it when the error adds a detail.
    pub message: &'static str,
}

macro_rules! row {
    ($name:ident, $status:expr, $retry:expr, $message:expr) => {
        ErrorCode {
            code: codes::$name,
            name: stringify!($name),
            http_status: $status,
            retryable: $retry,
            message: $message,
        }
    };
}

/// The table, in the order of docs/PROTOCOL.md 1.6.
pub const ERROR_CODES: &[ErrorCode] = &[
    row!(PARSE_ERROR, 400, false, "parse error"),
    row!(INVALID_REQUEST, 400, false, "invalid request"),
    row!(METHOD_NOT_FOUND, 404, false, "method not found"),
    row!(INVALID_PARAMS, 400, false, "invalid params"),
    row!(INTERNAL_ERROR, 500, false, "internal error"),
    row!(SESSION_NOT_FOUND, 404, false, "session not found"),
    row!(SESSION_CLOSED, 410, false, "session closed"),
    row!(
        TOKEN_REFUSED,
        403,
        false,
        "token refused (not valid, or for another profile)"
    ),
    row!(SESSION_BUSY, 409, true, "session busy"),
    row!(FRAME_TOO_LARGE, 413, false, "frame too large"),
    row!(RATE_LIMITED, 429, true, "rate limited"),
    row!(HANDOFF_CONFLICT, 409, false, "handoff conflict"),
    row!(
        TURN_IN_PROGRESS,
        409,
        true,
        "a turn is running or queued (multitask: reject)"
    ),
    row!(RESUME_TOO_LARGE, 413, false, "resume too large"),
    row!(PROFILE_LIMIT, 429, true, "profile limit reached"),
    row!(HOST_UNAVAILABLE, 503, true, "no compute host available"),
    row!(STORAGE_FULL, 503, false, "storage full"),
    row!(STORAGE_WRITE_FAILED, 503, true, "storage write failed"),
    row!(STORAGE_UNAVAILABLE, 503, true, "storage unavailable"),
    // Not retried as it is: it may have run (read the session first). The
    // owner did not answer in time, as a gateway timeout says.
    row!(OUTCOME_UNKNOWN, 504, false, "outcome unknown"),
];

/// What an unknown code is taken as: a bug on our side.
const UNKNOWN: ErrorCode = ErrorCode {
    code: codes::INTERNAL_ERROR,
    name: "INTERNAL_ERROR",
    http_status: 500,
    retryable: false,
    message: "internal error",
};

impl ErrorCode {
    /// The row of `code`; a code that is not in the table (none tether
    /// sends) is read as an internal error.
    pub fn of(code: i64) -> &'static ErrorCode {
        ERROR_CODES
            .iter()
            .find(|row| row.code == code)
            .unwrap_or(&UNKNOWN)
    }

    /// The row of `code`, if it is one of the table's.
    pub fn lookup(code: i64) -> Option<&'static ErrorCode> {
        ERROR_CODES.iter().find(|row| row.code == code)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RpcError;
    use std::collections::BTreeSet;

    /// The names of the constants in `codes`, read from its source: a
    /// constant added there without a row here fails this test.
    fn declared_codes() -> Vec<String> {
        let source = include_str!("error.rs");
        let start = source.find("pub mod codes {").expect("codes module");
        let end = start + source[start..].find("\n}").expect("end of codes");
        source[start..end]
            .lines()
            .filter_map(|l| l.trim().strip_prefix("pub const "))
            .filter_map(|l| l.split(':').next())
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn every_code_has_one_row() {
        let declared = declared_codes();
        assert!(declared.len() >= 19, "{declared:?}");
        for name in &declared {
            let rows = ERROR_CODES.iter().filter(|r| r.name == name).count();
            assert_eq!(rows, 1, "codes::{name} needs exactly one row");
        }
        assert_eq!(ERROR_CODES.len(), declared.len(), "a row without a code");
        let distinct: BTreeSet<i64> = ERROR_CODES.iter().map(|r| r.code).collect();
        assert_eq!(distinct.len(), ERROR_CODES.len(), "a code listed twice");
    }

    #[test]
    fn every_row_has_a_real_status_and_message() {
        for row in ERROR_CODES {
            assert!(
                (400..600).contains(&row.http_status),
                "{}: {}",
                row.name,
                row.http_status
            );
            assert!(!row.message.is_empty(), "{}", row.name);
            // Client mistakes are 4xx, the gateway's troubles 5xx, as the
            // code's own band says.
            let server_side = row.code == codes::INTERNAL_ERROR || row.code >= 5000;
            assert_eq!(row.http_status >= 500, server_side, "{}", row.name);
        }
    }

    #[test]
    fn unknown_codes_are_internal_errors() {
        assert_eq!(ErrorCode::of(12345).http_status, 500);
        assert!(ErrorCode::lookup(12345).is_none());
        assert_eq!(ErrorCode::of(codes::SESSION_CLOSED).http_status, 410);
        assert_eq!(ErrorCode::of(codes::RATE_LIMITED).http_status, 429);
    }

    #[test]
    fn constructors_speak_the_table_messages() {
        for e in [
            RpcError::parse_error("x"),
            RpcError::invalid_request("x"),
            RpcError::method_not_found("x"),
            RpcError::invalid_params("f", "x"),
            RpcError::internal("x"),
            RpcError::session_not_found(),
            RpcError::session_closed(),
            RpcError::token_refused(),
            RpcError::session_busy("x"),
            RpcError::frame_too_large(1),
            RpcError::rate_limited(1),
            RpcError::handoff_conflict("x"),
            RpcError::turn_in_progress(),
            RpcError::resume_too_large(2, 1),
            RpcError::profile_limit("connections", 1, None),
            RpcError::host_unavailable(),
            RpcError::storage_full(),
            RpcError::storage_write_failed("x"),
            RpcError::storage_unavailable("x"),
        ] {
            let row = ErrorCode::lookup(e.code).expect("a row");
            assert!(e.message.starts_with(row.message), "{e}");
        }
    }

    /// docs/PROTOCOL.md 1.6 lists the same codes with the same HTTP status
    /// and retry column, in the same order.
    #[test]
    fn protocol_doc_table_matches() {
        let doc = include_str!("../../docs/PROTOCOL.md");
        let start = doc.find("### 1.6 Errors").expect("section 1.6");
        let rows: Vec<(i64, u16, bool)> = doc[start..]
            .lines()
            .skip_while(|l| !l.starts_with('|'))
            .take_while(|l| l.starts_with('|'))
            .filter_map(|l| {
                let cells: Vec<&str> = l.split('|').map(str::trim).collect();
                let code = cells.get(1)?.parse().ok()?;
                let status = cells.get(2)?.parse().ok()?;
                let retry = match *cells.get(3)? {
                    "yes" => true,
                    "no" => false,
                    other => panic!("retry column of {code}: {other}"),
                };
                Some((code, status, retry))
            })
            .collect();
        let table: Vec<(i64, u16, bool)> = ERROR_CODES
            .iter()
            .map(|r| (r.code, r.http_status, r.retryable))
            .collect();
        assert_eq!(rows, table);
    }
}
