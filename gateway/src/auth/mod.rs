//! Tokens and profiles (PROTOCOL 1.1, docs/AUTHENTICATION.md): who a
//! connection is.
//!
//! With tokens configured, static ones (`--token PROFILE:TOKEN`,
//! [`tokens`]) and/or signed ones (JWT, [`jwt`]), every WebSocket upgrade
//! and HTTP request must present one, as `Authorization: Bearer TOKEN` or
//! `?token=TOKEN`; otherwise it is refused with 401 before any frame. A
//! token shaped as a JWT is checked as one (when JWTs are configured),
//! anything else as a static token. The token fixes the caller's profile.
//! Without tokens only loopback peers are served, and each call names its
//! profile itself (default `default`).
//!
//! The configuration can be replaced while the gateway runs ([`Auth::reload`],
//! on SIGHUP): every live connection is then told to check its token again
//! and is closed (4403) if it is no longer accepted.

mod caller;
mod jwks;
mod jwt;
mod times;
mod tokens;

use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::extract::{ConnectInfo, Query, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use tether_actors::{CheckFuture, TokenCheck, TokenGrant, Verified};
use tokio::sync::watch;
use tracing::debug;

use crate::http::status_text;
use crate::server::AppState;

pub use caller::{caller_of, Caller};
pub use jwks::JwksError;
pub use jwt::{JwtConfig, JwtConfigError};
pub use tokens::{HexError, TokenError, Tokens};

/// Everything that decides who may connect: what `--token` and `--jwt-*`
/// configure.
#[derive(Debug, Default)]
pub struct AuthConfig {
    pub tokens: Tokens,
    pub jwt: Option<JwtConfig>,
    /// How long before a token's `exp` its connection is told
    /// (`gateway.token_expiring`); zero: never.
    pub warn_before: Duration,
}

/// Why an [`AuthConfig`] cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error(transparent)]
    Jwt(#[from] JwtConfigError),
}

/// One configuration's verifiers.
struct Verifiers {
    tokens: Tokens,
    jwt: Option<jwt::JwtVerifier>,
    warn_before: Duration,
    /// `--jwt-leeway-s`: a JWT ends at `exp` plus this, at the door and on
    /// a live connection alike.
    leeway: Duration,
}

impl Verifiers {
    fn new(config: AuthConfig) -> Result<Self, AuthError> {
        let leeway = config.jwt.as_ref().map_or(Duration::ZERO, |j| j.leeway);
        let jwt = config.jwt.map(jwt::JwtVerifier::new).transpose()?;
        Ok(Verifiers {
            tokens: config.tokens,
            jwt,
            warn_before: config.warn_before,
            leeway,
        })
    }

    fn is_open(&self) -> bool {
        self.tokens.is_empty() && self.jwt.is_none()
    }
}

/// The gateway's token configuration, replaceable while it runs.
pub struct Auth {
    current: RwLock<Arc<Verifiers>>,
    /// Bumped at each reload; every live connection watches it.
    reloads: watch::Sender<u64>,
}

impl Default for Auth {
    /// No tokens: loopback peers only, each naming its own profile.
    fn default() -> Self {
        Auth {
            current: RwLock::new(Arc::new(Verifiers {
                tokens: Tokens::default(),
                jwt: None,
                warn_before: Duration::ZERO,
                leeway: Duration::ZERO,
            })),
            reloads: watch::channel(0).0,
        }
    }
}

impl Auth {
    /// The configuration in force at start (its JWKS fetched).
    pub async fn start(config: AuthConfig) -> Result<Arc<Auth>, AuthError> {
        let verifiers = Verifiers::new(config)?;
        if let Some(jwt) = &verifiers.jwt {
            jwt.prefetch().await;
        }
        Ok(Arc::new(Auth {
            current: RwLock::new(Arc::new(verifiers)),
            reloads: watch::channel(0).0,
        }))
    }

    /// Replaces the configuration (its JWKS fetched anew); then every live
    /// connection checks its token again. A configuration that cannot be
    /// used changes nothing.
    pub async fn reload(&self, config: AuthConfig) -> Result<(), AuthError> {
        let verifiers = Verifiers::new(config)?;
        if let Some(jwt) = &verifiers.jwt {
            jwt.prefetch().await;
        }
        let verifiers = Arc::new(verifiers);
        match self.current.write() {
            Ok(mut slot) => *slot = verifiers,
            Err(poisoned) => *poisoned.into_inner() = verifiers,
        }
        self.reloads.send_modify(|n| *n += 1);
        Ok(())
    }

    fn current(&self) -> Arc<Verifiers> {
        match self.current.read() {
            Ok(v) => v.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// No token of any kind is configured.
    pub fn is_open(&self) -> bool {
        self.current().is_open()
    }

    /// Changes at each reload.
    pub(crate) fn reloads(&self) -> watch::Receiver<u64> {
        self.reloads.subscribe()
    }

    /// What a presented token grants under the current configuration.
    async fn verify(&self, presented: &str) -> Option<Verified> {
        let current = self.current();
        if let Some(jwt) = &current.jwt {
            if jwt::looks_like_jwt(presented) {
                return match jwt.verify(presented).await {
                    Ok(v) => Some(v),
                    Err(why) => {
                        debug!(reason = %why, "JWT refused");
                        None
                    }
                };
            }
        }
        current
            .tokens
            .profile_of(presented)
            .map(|profile| Verified {
                profile: profile.to_string(),
                expires_at: None,
                sessions: None,
                limits: None,
            })
    }
}

impl TokenCheck for Auth {
    fn check<'a>(&'a self, token: &'a str) -> CheckFuture<'a> {
        Box::pin(self.verify(token))
    }

    fn generation(&self) -> u64 {
        *self.reloads.borrow()
    }
}

/// Middleware: 401 without a valid token when tokens are configured; the
/// caller's profile in the request's extensions otherwise.
pub async fn authenticate(State(app): State<AppState>, mut req: Request, next: Next) -> Response {
    // Probes of orchestrators carry no token and learn nothing private;
    // neither do the console's static files (the socket they open does).
    if matches!(req.uri().path(), "/healthz" | "/readyz")
        || crate::console::is_console_path(req.uri().path())
    {
        return next.run(req).await;
    }
    let current = app.auth.current();
    let caller = if current.is_open() {
        // Without tokens the gateway only listens on loopback (checked at
        // start); a peer from elsewhere can only come through a proxy.
        let remote = req
            .extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map(|c| c.0.ip());
        if remote.is_some_and(|ip| !ip.is_loopback()) {
            return status_text(
                StatusCode::FORBIDDEN,
                "only loopback clients without tokens",
            );
        }
        Caller::anonymous()
    } else {
        let Some(presented) = presented_token(&req) else {
            return unauthorized();
        };
        // Read before the check: a reload in between makes the connection
        // check its token again before its first request.
        let generation = app.auth.generation();
        let Some(verified) = app.auth.verify(&presented).await else {
            return unauthorized();
        };
        let checker: Arc<dyn TokenCheck> = app.auth.clone();
        let presented: Arc<str> = Arc::from(presented);
        Caller {
            profile: verified.profile.clone(),
            fixed: true,
            limits: tether_actors::own_limits(&presented, &verified),
            grant: Some(TokenGrant {
                presented,
                verified,
                checker,
                warn_before: current.warn_before,
                leeway: current.leeway,
                checked_under: generation,
            }),
        }
    };
    req.extensions_mut().insert(caller);
    next.run(req).await
}

/// `Authorization: Bearer TOKEN`, else `?token=TOKEN`.
fn presented_token(req: &Request) -> Option<String> {
    if let Some(value) = req.headers().get(header::AUTHORIZATION) {
        let value = value.to_str().ok()?.trim();
        let (scheme, token) = value.split_once(' ')?;
        return scheme
            .eq_ignore_ascii_case("bearer")
            .then(|| token.trim().to_string());
    }
    let Query(q) =
        Query::<std::collections::HashMap<String, String>>::try_from_uri(req.uri()).ok()?;
    q.get("token").cloned()
}

fn unauthorized() -> Response {
    let mut resp = status_text(StatusCode::UNAUTHORIZED, "a valid token is required");
    resp.headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    resp
}
