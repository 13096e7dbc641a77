//! HTTP answers of the front-end routes when a request is refused before
//! its stream starts.
//!
//! A client error is a 4xx with a line of text that says what is wrong,
//! never a 5xx: a bad id or body is 400, another profile's chat or an
//! unknown one 404, a closed one 410, a busy session 409 (a regenerate
//! while a turn runs, a full queue), a rate limit 429. 503 is for a
//! gateway that cannot take the work now (no compute host, the store
//! unavailable, shutting down), 504 for one that did not answer in time.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::peer::CallError;
pub use crate::http::status_of;
use crate::http::status_text;

/// A request refused before its work starts: the response that says why
/// (boxed: a `Response` is large to move through every `Result`).
#[derive(Debug)]
pub struct Refusal(Box<Response>);

impl From<Response> for Refusal {
    fn from(r: Response) -> Self {
        Refusal(Box::new(r))
    }
}

impl From<CallError> for Refusal {
    fn from(e: CallError) -> Self {
        refused(&e).into()
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        *self.0
    }
}

/// The answer to a call that failed.
pub fn refused(err: &CallError) -> Response {
    match err {
        CallError::Timeout => status_text(StatusCode::GATEWAY_TIMEOUT, "no answer in time"),
        CallError::Ended => status_text(StatusCode::SERVICE_UNAVAILABLE, "gateway unavailable"),
        CallError::Rpc { code, message } => status_text(status_of(*code), message),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tether_protocol::codes;

    #[test]
    fn client_errors_are_4xx() {
        for code in [
            codes::INVALID_PARAMS,
            codes::SESSION_NOT_FOUND,
            codes::SESSION_CLOSED,
            codes::SESSION_BUSY,
            codes::RATE_LIMITED,
            codes::PROFILE_LIMIT,
            codes::RESUME_TOO_LARGE,
            codes::TURN_IN_PROGRESS,
        ] {
            assert!(status_of(code).is_client_error(), "{code}");
        }
        assert_eq!(
            status_of(codes::HOST_UNAVAILABLE),
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(status_of(codes::SESSION_CLOSED), StatusCode::GONE);
        assert_eq!(
            status_of(codes::RATE_LIMITED),
            StatusCode::TOO_MANY_REQUESTS
        );
        assert_eq!(status_of(12345), StatusCode::INTERNAL_SERVER_ERROR);
    }
}
