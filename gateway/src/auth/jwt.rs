//! Signed tokens (JWT, RFC 7519) from the app's own backend: the
//! signature, the algorithm, the time claims and the issuer and audience
//! are checked by the `jsonwebtoken` crate (no crypto of ours); the claims
//! the gateway reads from a valid token are checked here.
//!
//! Keys: a shared secret for HS256/384/512 (from a file or the
//! environment, never a flag, so it never shows in `ps`), a PEM public key
//! (RSA, EC or Ed25519) and/or a JWKS URL (`super::jwks`). Every key
//! verifies only algorithms of its own family, and only those of the
//! configured set: a token signed with HMAC is never checked with a public
//! key (the old "alg confusion"), and `alg: none` is no algorithm at all.
//!
//! Claims: `exp` is required; `exp`, `nbf` and `iat` are NumericDates
//! with the configured leeway, checked in `times.rs`; `iss` and `aud` must match when configured. The profile is the
//! string claim `--jwt-profile-claim` (default `sub`). Optional: `sessions`
//! (the session ids the token may reach, a list of strings) and `limits`
//! (per-token limits: an object of the limit names, any other key refuses
//! the token).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use jsonwebtoken::{decode, decode_header, Algorithm, DecodingKey, Validation};
use serde_json::{Map, Value};
use tether_actors::profile_limits::ProfileLimits;
use tether_actors::Verified;

use super::jwks::Jwks;
use super::times::{self, TimeRefused};

/// Longest profile name a token may carry.
const MAX_PROFILE_BYTES: usize = 256;
/// The shortest HMAC secret accepted without a warning.
const MIN_SECRET_BYTES: usize = 32;
/// Most session ids one token may list.
const MAX_SESSIONS: usize = 1000;

/// The algorithms accepted when none are configured: every one the brief
/// of the configured keys allows, RSA-PSS only when named.
const DEFAULT_ALGORITHMS: [Algorithm; 9] = [
    Algorithm::HS256,
    Algorithm::HS384,
    Algorithm::HS512,
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::EdDSA,
];

/// The kinds of key an algorithm verifies with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Family {
    Hmac,
    Rsa,
    Ec,
    Ed,
}

impl Family {
    pub(super) fn of(alg: Algorithm) -> Family {
        match alg {
            Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512 => Family::Hmac,
            Algorithm::RS256
            | Algorithm::RS384
            | Algorithm::RS512
            | Algorithm::PS256
            | Algorithm::PS384
            | Algorithm::PS512 => Family::Rsa,
            Algorithm::ES256 | Algorithm::ES384 => Family::Ec,
            Algorithm::EdDSA => Family::Ed,
        }
    }
}

/// How the gateway checks JWTs, as configured (`--jwt-*`).
#[derive(Clone, Default)]
pub struct JwtConfig {
    /// The HMAC secret (bytes of the file, or of the variable).
    pub hmac_secret: Option<Vec<u8>>,
    /// A PEM public key (RSA, EC or Ed25519), as the file holds it.
    pub public_key_pem: Option<Vec<u8>>,
    pub jwks_url: Option<String>,
    /// Empty: every algorithm the configured keys can verify.
    pub algorithms: Vec<Algorithm>,
    pub leeway: Duration,
    pub issuer: Option<String>,
    pub audience: Option<String>,
    pub profile_claim: String,
    pub jwks_refetch: Duration,
}

impl std::fmt::Debug for JwtConfig {
    // Never the secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JwtConfig")
            .field("hmac_secret", &self.hmac_secret.as_ref().map(|_| "***"))
            .field("public_key_pem", &self.public_key_pem.is_some())
            .field("jwks_url", &self.jwks_url)
            .field("algorithms", &self.algorithms)
            .field("leeway", &self.leeway)
            .field("issuer", &self.issuer)
            .field("audience", &self.audience)
            .field("profile_claim", &self.profile_claim)
            .finish()
    }
}

impl JwtConfig {
    /// Whether the keys and algorithms can be used (nothing is fetched).
    pub fn validate(&self) -> Result<(), JwtConfigError> {
        JwtVerifier::new(self.clone()).map(|_| ())
    }
}

/// Why the JWT configuration cannot be used (exit status 64).
#[derive(Debug, thiserror::Error)]
pub enum JwtConfigError {
    #[error("JWT checking needs a key: an HMAC secret, a public key file or a JWKS URL")]
    NoKey,
    #[error("the HMAC secret is empty")]
    EmptySecret,
    #[error("the JWT public key file holds no RSA, EC or Ed25519 public key in PEM")]
    BadPem,
    #[error("--jwt-algorithms names {0:?}, which no configured key can verify")]
    NoKeyFor(Algorithm),
    #[error("--jwt-profile-claim must not be empty")]
    EmptyProfileClaim,
    #[error("cannot set up the JWKS client: {0}")]
    Client(#[from] reqwest::Error),
}

/// Why a token was refused: logged at debug, never told to the client
/// (which gets 401).
#[derive(Debug, thiserror::Error)]
pub(super) enum Refused {
    #[error("not a JWT, or its alg is none or unknown: {0}")]
    Header(jsonwebtoken::errors::Error),
    #[error("alg {0:?} is not accepted")]
    Algorithm(Algorithm),
    #[error("no key verifies this token")]
    NoKey,
    #[error("{0}")]
    Check(jsonwebtoken::errors::Error),
    #[error(transparent)]
    Time(#[from] TimeRefused),
    #[error("the header's `crit` names extensions the gateway does not understand")]
    Critical,
    #[error("claim {0:?} is missing or not a usable string")]
    Profile(String),
    #[error("claim `sessions` is not a list of at most {MAX_SESSIONS} strings")]
    Sessions,
    #[error("claim `limits` is not an object of known limits: {0}")]
    Limits(serde_json::Error),
}

/// The configured keys and checks.
pub(super) struct JwtVerifier {
    hmac: Option<DecodingKey>,
    /// The PEM key and its family.
    public: Option<(Family, DecodingKey)>,
    jwks: Option<Jwks>,
    algorithms: Vec<Algorithm>,
    config: JwtConfig,
}

impl JwtVerifier {
    pub(super) fn new(config: JwtConfig) -> Result<Self, JwtConfigError> {
        if config.profile_claim.trim().is_empty() {
            return Err(JwtConfigError::EmptyProfileClaim);
        }
        let hmac = match &config.hmac_secret {
            Some(secret) if secret.is_empty() => return Err(JwtConfigError::EmptySecret),
            Some(secret) => {
                // RFC 7518 §3.2: a key at least as long as the hash. Shorter
                // ones work, but can be guessed offline from any token.
                if secret.len() < MIN_SECRET_BYTES {
                    tracing::warn!(
                        bytes = secret.len(),
                        "the JWT HMAC secret is shorter than {MIN_SECRET_BYTES} bytes; use a longer random one"
                    );
                }
                Some(DecodingKey::from_secret(secret))
            }
            None => None,
        };
        let public = match &config.public_key_pem {
            Some(pem) => Some(public_key(pem)?),
            None => None,
        };
        let jwks = match &config.jwks_url {
            Some(url) => Some(Jwks::new(url.clone(), config.jwks_refetch)?),
            None => None,
        };
        if hmac.is_none() && public.is_none() && jwks.is_none() {
            return Err(JwtConfigError::NoKey);
        }
        let can = |family: Family| match family {
            Family::Hmac => hmac.is_some(),
            _ => jwks.is_some() || public.as_ref().is_some_and(|(f, _)| *f == family),
        };
        let algorithms = if config.algorithms.is_empty() {
            DEFAULT_ALGORITHMS
                .into_iter()
                .filter(|alg| can(Family::of(*alg)))
                .collect()
        } else {
            for alg in &config.algorithms {
                if !can(Family::of(*alg)) {
                    return Err(JwtConfigError::NoKeyFor(*alg));
                }
            }
            config.algorithms.clone()
        };
        Ok(JwtVerifier {
            hmac,
            public,
            jwks,
            algorithms,
            config,
        })
    }

    /// Fetches the JWKS, if one is configured.
    pub(super) async fn prefetch(&self) {
        if let Some(jwks) = &self.jwks {
            jwks.prefetch().await;
        }
    }

    /// What a valid token grants, or why it is refused.
    pub(super) async fn verify(&self, token: &str) -> Result<Verified, Refused> {
        let header = decode_header(token).map_err(Refused::Header)?;
        // RFC 7515 §4.1.11: a token naming an extension the receiver does
        // not understand must be refused; this gateway understands none.
        if header_json(token)
            .and_then(|h| h.get("crit").cloned())
            .is_some_and(|crit| crit != Value::Array(Vec::new()))
        {
            return Err(Refused::Critical);
        }
        let alg = header.alg;
        if !self.algorithms.contains(&alg) {
            return Err(Refused::Algorithm(alg));
        }
        let family = Family::of(alg);
        let validation = self.validation(alg);
        let check = |key: &DecodingKey| decode::<Map<String, Value>>(token, key, &validation);
        let mut last = Refused::NoKey;
        let mut try_key = |key: &DecodingKey| match check(key) {
            Ok(data) => Some(data.claims),
            Err(e) => {
                last = Refused::Check(e);
                None
            }
        };
        let claims = if family == Family::Hmac {
            self.hmac.as_ref().and_then(&mut try_key)
        } else {
            let pem = self
                .public
                .as_ref()
                .filter(|(f, _)| *f == family)
                .and_then(|(_, key)| try_key(key));
            match (pem, &self.jwks) {
                (Some(claims), _) => Some(claims),
                (None, Some(jwks)) => {
                    let fits = |k: &&super::jwks::JwkKey| {
                        k.family == family && k.alg.is_none_or(|a| a == alg)
                    };
                    let mut keys = jwks.keys();
                    if let Some(kid) = header.kid.as_deref() {
                        if !keys.iter().any(|k| k.kid.as_deref() == Some(kid)) {
                            keys = jwks.refetch_for(kid).await;
                        }
                    }
                    // With a `kid`, only that key; without, each key that fits.
                    keys.iter()
                        .filter(|k| header.kid.is_none() || k.kid == header.kid)
                        .filter(fits)
                        .find_map(|k| try_key(&k.key))
                }
                (None, None) => None,
            }
        };
        let claims = claims.ok_or(last)?;
        self.granted(&claims)
    }

    fn validation(&self, alg: Algorithm) -> Validation {
        let mut v = Validation::new(alg);
        // The time claims are checked in `times.rs`: one rule, fractions
        // and all. The crate only sees that `exp` is there.
        v.leeway = 0;
        v.validate_exp = false;
        v.validate_nbf = false;
        // The crate checks `iss` and `aud` only when present; configured,
        // they are required too.
        let mut required = vec!["exp"];
        match &self.config.issuer {
            Some(iss) => {
                v.set_issuer(&[iss]);
                required.push("iss");
            }
            None => v.iss = None,
        }
        match &self.config.audience {
            Some(aud) => {
                v.set_audience(&[aud]);
                required.push("aud");
            }
            None => v.validate_aud = false,
        }
        v.set_required_spec_claims(&required);
        v
    }

    /// The grant of a token whose signature and standard claims are valid.
    fn granted(&self, claims: &Map<String, Value>) -> Result<Verified, Refused> {
        let exp = times::check(claims, tether_actors::unix_now_ms(), self.config.leeway)?;
        let name = &self.config.profile_claim;
        let profile = match claims.get(name).and_then(Value::as_str) {
            Some(p)
                if !p.is_empty()
                    && p.len() <= MAX_PROFILE_BYTES
                    && p.trim() == p
                    && !p.chars().any(char::is_control) =>
            {
                p.to_string()
            }
            _ => return Err(Refused::Profile(name.clone())),
        };
        let sessions = match claims.get("sessions") {
            None => None,
            Some(Value::Array(items)) if items.len() <= MAX_SESSIONS => {
                let mut set = HashSet::with_capacity(items.len());
                for item in items {
                    set.insert(item.as_str().ok_or(Refused::Sessions)?.to_string());
                }
                Some(Arc::new(set))
            }
            Some(_) => return Err(Refused::Sessions),
        };
        let limits = match claims.get("limits") {
            None => None,
            Some(v) => Some(Arc::new(
                serde_json::from_value::<ProfileLimits>(v.clone()).map_err(Refused::Limits)?,
            )),
        };
        Ok(Verified {
            profile,
            expires_at: Some(exp),
            sessions,
            limits,
        })
    }
}

/// The PEM public key and the family it verifies.
fn public_key(pem: &[u8]) -> Result<(Family, DecodingKey), JwtConfigError> {
    if let Ok(key) = DecodingKey::from_rsa_pem(pem) {
        return Ok((Family::Rsa, key));
    }
    if let Ok(key) = DecodingKey::from_ec_pem(pem) {
        return Ok((Family::Ec, key));
    }
    if let Ok(key) = DecodingKey::from_ed_pem(pem) {
        return Ok((Family::Ed, key));
    }
    Err(JwtConfigError::BadPem)
}

/// Whether `token` is shaped as a JWT (three parts, the first base64url
/// of a JSON object): then it is checked as one and never as a static
/// token, whatever its `alg` (an unknown one, or `none`, is refused).
pub(super) fn looks_like_jwt(token: &str) -> bool {
    token.split('.').count() == 3 && header_is_json(token)
}

/// Whether a token's first part is base64url of a JSON object (its alg
/// aside).
fn header_is_json(token: &str) -> bool {
    header_json(token).is_some()
}

/// A token's header as a JSON object, if its first part is one.
fn header_json(token: &str) -> Option<Map<String, Value>> {
    use base64::Engine as _;
    let first = token.split('.').next()?;
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(first.trim_end_matches('='))
        .ok()
        .and_then(|bytes| serde_json::from_slice::<Map<String, Value>>(&bytes).ok())
}
