//! `gateway.refresh_token`: a new token for a live connection.

use serde::{Deserialize, Serialize};

use super::Params;

/// `gateway.refresh_token`.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefreshTokenParams {
    pub token: String,
}

// Never the token itself in logs: it is a credential.
impl std::fmt::Debug for RefreshTokenParams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RefreshTokenParams").finish_non_exhaustive()
    }
}

impl Params for RefreshTokenParams {}

/// The answer to `gateway.refresh_token`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefreshTokenResult {
    /// The new `exp` (seconds since the Unix epoch); `null` never expires.
    pub expires_at: Option<u64>,
}
