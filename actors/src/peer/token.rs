//! A connection's token, as its peer keeps it: when it expires, which
//! sessions it may reach, and how a new one is checked.
//!
//! The gateway verifies tokens (signatures, keys, claims); the peer only
//! asks it through [`TokenCheck`]: for `gateway.refresh_token`, and again
//! when the gateway reloads its token configuration (SIGHUP), so a token
//! that was removed or whose key was withdrawn ends the connection (4403).
//! The peer owns the clock of its token: `gateway.token_expiring` a while
//! before `exp`, and at `exp` a close with 4401 queued behind whatever its
//! outbox already holds, so a client sees every frame it was sent before
//! the close. Refreshing moves both; a timer of an older token is ignored
//! (each carries the generation it was set for).

use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::profile_limits::ProfileLimits;
use crate::registry::ledger::TokenLimits;

/// WebSocket close code: the connection's token expired.
pub const CLOSE_TOKEN_EXPIRED: u16 = 4401;
/// WebSocket close code: the connection's token is no longer accepted
/// (removed from the configuration, or its key withdrawn).
pub const CLOSE_TOKEN_REVOKED: u16 = 4403;

/// What a valid token grants.
#[derive(Debug, Clone)]
pub struct Verified {
    pub profile: String,
    /// `exp` in seconds since the Unix epoch; `None` never expires (a
    /// static token).
    pub expires_at: Option<u64>,
    /// The only sessions the token may reach; `None`: all of its profile's.
    pub sessions: Option<Arc<HashSet<String>>>,
    /// Limits it sets over the profile's configured ones.
    pub limits: Option<Arc<ProfileLimits>>,
}

/// Future of a [`TokenCheck`].
pub type CheckFuture<'a> = Pin<Box<dyn Future<Output = Option<Verified>> + Send + 'a>>;

/// The gateway's token verifier, as the peer uses it: `None` for a token
/// it does not accept (which one and why is the gateway's to log).
pub trait TokenCheck: Send + Sync + 'static {
    fn check<'a>(&'a self, token: &'a str) -> CheckFuture<'a>;

    /// The configuration's generation: it changes at each reload, and a
    /// token checked under an older one is checked again before its
    /// connection's next request.
    fn generation(&self) -> u64 {
        0
    }
}

/// The token a connection presented, with the verifier that accepted it.
#[derive(Clone)]
pub struct TokenGrant {
    pub presented: Arc<str>,
    pub verified: Verified,
    pub checker: Arc<dyn TokenCheck>,
    /// How long before `exp` the client is told (`gateway.token_expiring`).
    pub warn_before: Duration,
    /// The clock skew allowed past `exp` (`--jwt-leeway-s`): the token
    /// ends at `exp` + leeway, at the door and on a live connection alike.
    pub leeway: Duration,
    /// The [`TokenCheck::generation`] it was last checked under.
    pub checked_under: u64,
}

impl std::fmt::Debug for TokenGrant {
    // Never the token itself: it is a credential.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenGrant")
            .field("verified", &self.verified)
            .field("warn_before", &self.warn_before)
            .field("leeway", &self.leeway)
            .finish_non_exhaustive()
    }
}

impl TokenGrant {
    /// Whether the token may reach session `id`.
    pub fn may_reach(&self, id: &str) -> bool {
        self.verified
            .sessions
            .as_ref()
            .is_none_or(|allowed| allowed.contains(id))
    }

    /// The instant the token ends, in milliseconds since the Unix epoch:
    /// `exp` plus the leeway; `None` never (a static token). The door
    /// refuses it from this instant on, and a live connection is closed
    /// at it: one rule.
    pub fn ends_at_ms(&self) -> Option<u64> {
        let exp = self.verified.expires_at?;
        Some(
            exp.saturating_mul(1000)
                .saturating_add(u64::try_from(self.leeway.as_millis()).unwrap_or(u64::MAX)),
        )
    }
}

/// The limits a token's claim sets for its own work, kept under the token.
pub fn own_limits(presented: &Arc<str>, v: &Verified) -> Option<TokenLimits> {
    v.limits.as_ref().map(|limits| TokenLimits {
        key: presented.clone(),
        limits: limits.clone(),
    })
}

/// Milliseconds since the Unix epoch, now.
pub fn unix_now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// How long from now until `at_ms` (milliseconds since the epoch); zero if
/// past.
pub fn until_ms(at_ms: u64) -> Duration {
    Duration::from_millis(at_ms.saturating_sub(unix_now_ms()))
}

/// How long from now until `at` (seconds since the epoch); zero if past.
pub fn until(at: u64) -> Duration {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    Duration::from_secs(at).saturating_sub(now)
}

/// The notification a client gets `warn_before` ahead of its token's `exp`.
fn expiring_frame(expires_at: u64) -> String {
    serde_json::json!({
        "jsonrpc": "2.0",
        "method": "gateway.token_expiring",
        "params": {
            "expires_at": expires_at,
            "expires_in_s": until(expires_at).as_secs(),
        },
    })
    .to_string()
}

impl super::PeerState {
    /// Sets the timers of the current token (cancelling an older token's):
    /// only for a connection that lives on (a `POST /rpc` request checks
    /// its token as it arrives, and is over long before any `exp`).
    pub(super) fn arm_token_timers(&mut self, myself: &ractor::ActorRef<super::PeerMsg>) {
        for timer in self.token_timers.drain(..) {
            timer.abort();
        }
        let Some(grant) = &self.token else { return };
        let (Some(exp), Some(end)) = (grant.verified.expires_at, grant.ends_at_ms()) else {
            return;
        };
        if !self.identity.can_attach {
            return;
        }
        let generation = self.token_generation;
        let left = until_ms(end);
        if !grant.warn_before.is_zero() {
            let warn_in = until(exp).saturating_sub(grant.warn_before);
            let timer = myself.send_after(warn_in, move || super::PeerMsg::TokenTimer {
                generation,
                expired: false,
            });
            self.token_timers.push(timer);
        }
        let timer = myself.send_after(left, move || super::PeerMsg::TokenTimer {
            generation,
            expired: true,
        });
        self.token_timers.push(timer);
    }

    /// A timer of the current token: the warning, or the close at `exp`,
    /// queued behind everything the outbox already holds.
    pub(super) fn on_token_timer(&mut self, expired: bool) {
        let Some(exp) = self.token.as_ref().and_then(|g| g.verified.expires_at) else {
            return;
        };
        if expired {
            tracing::debug!(peer_id = %self.peer_id, profile = %self.identity.profile, "token expired; closing");
            self.outbox.close(CLOSE_TOKEN_EXPIRED, "token expired");
        } else {
            self.push_reply(expiring_frame(exp));
        }
    }

    /// `gateway.refresh_token`: a valid token of the same profile replaces
    /// the connection's (its expiry, sessions and limits); anything else is
    /// 4003 and changes nothing. Attachments are the connection's, and stay.
    pub(super) async fn refresh_token(
        &mut self,
        p: tether_protocol::RefreshTokenParams,
    ) -> Result<Box<serde_json::value::RawValue>, tether_protocol::RpcError> {
        let refused = tether_protocol::RpcError::token_refused;
        let Some(checker) = self.token.as_ref().map(|g| g.checker.clone()) else {
            return Err(refused());
        };
        let Some(verified) = checker.check(&p.token).await else {
            return Err(refused());
        };
        if verified.profile != self.identity.profile {
            tracing::info!(peer_id = %self.peer_id, profile = %self.identity.profile, "refresh with another profile's token refused");
            return Err(refused());
        }
        let expires_at = verified.expires_at;
        let presented: Arc<str> = Arc::from(p.token);
        self.identity.limits = own_limits(&presented, &verified);
        let generation = checker.generation();
        if let Some(grant) = self.token.as_mut() {
            grant.presented = presented;
            grant.verified = verified;
            grant.checked_under = generation;
        }
        self.token_generation += 1;
        Ok(tether_protocol::to_raw(
            &tether_protocol::RefreshTokenResult { expires_at },
        ))
    }

    /// After the gateway reloaded its token configuration: a token that is
    /// no longer accepted closes the connection (4401 if it merely
    /// expired, 4403 otherwise); one still accepted keeps it.
    pub(super) async fn recheck_token(&mut self, myself: &ractor::ActorRef<super::PeerMsg>) {
        let Some(grant) = self.token.clone() else {
            return;
        };
        let generation = grant.checker.generation();
        match grant.checker.check(&grant.presented).await {
            Some(v) if v.profile == self.identity.profile => {
                self.identity.limits = own_limits(&grant.presented, &v);
                if let Some(g) = self.token.as_mut() {
                    g.verified = v;
                    g.checked_under = generation;
                }
                self.token_generation += 1;
                self.arm_token_timers(myself);
            }
            _ if grant.ends_at_ms().is_some_and(|end| end <= unix_now_ms()) => {
                self.outbox.close(CLOSE_TOKEN_EXPIRED, "token expired");
            }
            _ => {
                tracing::info!(peer_id = %self.peer_id, profile = %self.identity.profile, "token no longer accepted after a reload; closing");
                self.outbox.close(CLOSE_TOKEN_REVOKED, "token revoked");
            }
        }
    }

    /// 4001 for a session the token may not reach: the same answer as for
    /// a session that is not there. Only for the rows of a listing; a
    /// request's own session is the admission's (`admission.rs`).
    pub(super) fn reach(&self, id: &str) -> Result<(), tether_protocol::RpcError> {
        match &self.token {
            Some(grant) if !grant.may_reach(id) => {
                Err(tether_protocol::RpcError::session_not_found())
            }
            _ => Ok(()),
        }
    }
}
