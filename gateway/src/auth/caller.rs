//! Who a request or connection is, for the routes (a request extension
//! the middleware sets).

use tether_actors::{TokenGrant, TokenLimits};

/// Who the caller is.
#[derive(Debug, Clone)]
pub struct Caller {
    pub profile: String,
    /// Fixed by a token: a `profile` parameter cannot change it.
    pub fixed: bool,
    /// The limits its token's claim sets for the token's own work.
    pub limits: Option<TokenLimits>,
    /// The token presented, for a connection that outlives the request:
    /// its expiry, the sessions it may reach, and how to check it again.
    pub grant: Option<TokenGrant>,
}

impl Caller {
    pub(super) fn anonymous() -> Self {
        Caller {
            profile: "default".into(),
            fixed: false,
            limits: None,
            grant: None,
        }
    }
}

/// The caller of a request that went through [`super::authenticate`].
pub fn caller_of(caller: Option<axum::Extension<Caller>>) -> Caller {
    caller.map(|c| c.0).unwrap_or_else(Caller::anonymous)
}
