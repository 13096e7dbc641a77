//! Why a store could not be opened, told apart the way an operator must act on it.
//!
//! A running store answers with [`StoreError`]s (wire codes). Opening is different: the gateway
//! has not started, and what matters is whether to fix the configuration (exit 64), to wait for
//! the database (exit 69: it was retried for the configured time), or something else. Every
//! message names the database with its password masked ([`crate::mask_url`]).

use std::time::Duration;

use crate::StoreError;

/// Opening the store failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    /// The database URL cannot be used as written.
    #[error("bad --database-url {url}: {reason}")]
    BadUrl {
        /// The URL, password masked.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The server answered but refused us: bad credentials, no such database, no permission.
    #[error("{url} refused the connection: {cause}")]
    Refused {
        /// The URL, password masked.
        url: String,
        /// The server's answer.
        cause: String,
    },
    /// The database was migrated by a newer tether: this one must not write to it.
    #[error("{url} has a newer schema than this tether knows ({detail}); run a tether at least as new as the one that migrated it")]
    NewerSchema {
        /// The URL (or path), password masked.
        url: String,
        /// Which migration this build does not know.
        detail: String,
    },
    /// Another gateway holds the database (the same rule as the data directory's lock).
    #[error("{url} is in use by another tether gateway ({holder}); run one gateway per data directory and database")]
    Held {
        /// The URL, password masked.
        url: String,
        /// Who holds it, as far as the server tells (`pid 4242 on host-a`).
        holder: String,
    },
    /// The server could not be reached within the connect timeout.
    #[error("cannot reach {url} (tried for {} s): {cause}", waited.as_secs())]
    Unreachable {
        /// The URL, password masked.
        url: String,
        /// How long it was retried.
        waited: Duration,
        /// The last attempt's error.
        cause: String,
    },
    /// Anything else (an SQLite file that cannot be created, a failed migration, ...).
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl OpenError {
    /// True when the operator must change the configuration (or stop the other gateway) before
    /// trying again: sysexits' EX_USAGE (64) for `tether serve`.
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            OpenError::BadUrl { .. }
                | OpenError::Refused { .. }
                | OpenError::NewerSchema { .. }
                | OpenError::Held { .. }
        )
    }

    /// True when the database could not be reached in time: sysexits' EX_UNAVAILABLE (69).
    pub fn is_unreachable(&self) -> bool {
        matches!(self, OpenError::Unreachable { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_kinds() {
        let url = String::from("u");
        assert!(OpenError::Held {
            url: url.clone(),
            holder: "pid 1".into()
        }
        .is_usage());
        assert!(OpenError::Unreachable {
            url,
            waited: Duration::from_secs(30),
            cause: "refused".into()
        }
        .is_unreachable());
        assert!(!OpenError::Store(StoreError::Io("x".into())).is_usage());
    }
}
