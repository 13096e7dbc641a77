//! A JWKS URL's public keys: fetched at start, cached, and fetched again
//! when a token names a `kid` the cache does not hold, at most once per
//! `--jwt-jwks-refetch-s`, however many such tokens arrive (one fetch at a
//! time, and none within the interval of the last). Key rotation at the
//! identity provider so needs no restart, and a flood of tokens with bogus
//! `kid`s costs the provider one request per interval.
//!
//! Only asymmetric keys are taken from a JWKS: an `oct` (shared secret)
//! key is skipped, so a published set can never make the gateway accept
//! HMAC tokens. A key the crate cannot use (unknown `kty` or curve, or
//! `use: enc`) is skipped with a warning; the rest of the set still counts.

use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{AlgorithmParameters, Jwk, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey};
use tracing::{debug, info, warn};

use super::jwt::Family;

/// Longest wait for the JWKS server.
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest JWKS document read.
const MAX_JWKS_BYTES: usize = 1 << 20;

/// One usable key of the set.
pub(super) struct JwkKey {
    pub kid: Option<String>,
    pub family: Family,
    /// The key's own `alg`, when the set names one: a token must use it.
    pub alg: Option<Algorithm>,
    pub key: DecodingKey,
}

/// The keys of one JWKS URL.
pub(super) struct Jwks {
    url: String,
    client: reqwest::Client,
    refetch_every: Duration,
    keys: RwLock<Arc<Vec<JwkKey>>>,
    /// When the last fetch started; held across a fetch, so fetches never
    /// overlap.
    last_fetch: tokio::sync::Mutex<Option<Instant>>,
}

/// Why a JWKS could not be used.
#[derive(Debug, thiserror::Error)]
pub enum JwksError {
    #[error("cannot fetch the JWKS at {url}: {source}")]
    Fetch {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("the JWKS at {url} answered HTTP {status}")]
    Status { url: String, status: u16 },
    #[error("the JWKS at {url} is larger than {MAX_JWKS_BYTES} bytes")]
    TooLarge { url: String },
    #[error("the JWKS at {url} is not a JSON object with `keys`: {source}")]
    Malformed {
        url: String,
        #[source]
        source: serde_json::Error,
    },
}

impl Jwks {
    pub(super) fn new(url: String, refetch_every: Duration) -> Result<Self, reqwest::Error> {
        let client = reqwest::Client::builder()
            .timeout(FETCH_TIMEOUT)
            .redirect(reqwest::redirect::Policy::limited(3))
            .build()?;
        Ok(Jwks {
            url,
            client,
            refetch_every,
            keys: RwLock::new(Arc::new(Vec::new())),
            last_fetch: tokio::sync::Mutex::new(None),
        })
    }

    /// The first fetch (at start or a reload). A failure is logged and the
    /// cache stays empty: tokens are refused until a later fetch (on an
    /// unknown `kid`, within the refetch interval) succeeds.
    pub(super) async fn prefetch(&self) {
        let mut last = self.last_fetch.lock().await;
        *last = Some(Instant::now());
        if let Err(e) = self.fetch().await {
            warn!(error = %e, "JWKS not fetched; tokens are refused until it is");
        }
    }

    /// The cached keys.
    pub(super) fn keys(&self) -> Arc<Vec<JwkKey>> {
        match self.keys.read() {
            Ok(keys) => keys.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// The keys after a fetch for a `kid` the cache lacks, if the last
    /// fetch is older than the refetch interval; otherwise the cache as it
    /// is. Concurrent callers wait for one fetch rather than each start one.
    pub(super) async fn refetch_for(&self, kid: &str) -> Arc<Vec<JwkKey>> {
        let mut last = self.last_fetch.lock().await;
        let keys = self.keys();
        if keys.iter().any(|k| k.kid.as_deref() == Some(kid)) {
            return keys; // another caller's fetch brought it
        }
        if last.is_some_and(|at| at.elapsed() < self.refetch_every) {
            debug!(
                kid,
                "unknown kid; the JWKS was fetched too recently to fetch again"
            );
            return keys;
        }
        *last = Some(Instant::now());
        if let Err(e) = self.fetch().await {
            warn!(error = %e, "JWKS refetch failed; keeping the cached keys");
        }
        self.keys()
    }

    async fn fetch(&self) -> Result<(), JwksError> {
        let url = &self.url;
        let fetch = |source| JwksError::Fetch {
            url: url.clone(),
            source,
        };
        let mut resp = self.client.get(url).send().await.map_err(fetch)?;
        if !resp.status().is_success() {
            return Err(JwksError::Status {
                url: url.clone(),
                status: resp.status().as_u16(),
            });
        }
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(fetch)? {
            if body.len() + chunk.len() > MAX_JWKS_BYTES {
                return Err(JwksError::TooLarge { url: url.clone() });
            }
            body.extend_from_slice(&chunk);
        }
        #[derive(serde::Deserialize)]
        struct Set {
            keys: Vec<serde_json::Value>,
        }
        let set: Set = serde_json::from_slice(&body).map_err(|source| JwksError::Malformed {
            url: url.clone(),
            source,
        })?;
        let keys: Vec<JwkKey> = set.keys.into_iter().filter_map(usable).collect();
        info!(url = %url, keys = keys.len(), "JWKS fetched");
        let keys = Arc::new(keys);
        match self.keys.write() {
            Ok(mut slot) => *slot = keys,
            Err(poisoned) => *poisoned.into_inner() = keys,
        }
        Ok(())
    }
}

/// A JWK the gateway can verify with, or `None` (logged) for one it skips.
fn usable(value: serde_json::Value) -> Option<JwkKey> {
    let jwk: Jwk = match serde_json::from_value(value) {
        Ok(jwk) => jwk,
        Err(e) => {
            warn!(error = %e, "JWKS key skipped: not a key this gateway can use");
            return None;
        }
    };
    let kid = jwk.common.key_id.clone();
    if matches!(jwk.common.public_key_use, Some(PublicKeyUse::Encryption)) {
        debug!(kid, "JWKS key skipped: for encryption");
        return None;
    }
    let family = match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => Family::Rsa,
        AlgorithmParameters::EllipticCurve(_) => Family::Ec,
        AlgorithmParameters::OctetKeyPair(_) => Family::Ed,
        AlgorithmParameters::OctetKey(_) => {
            warn!(
                kid,
                "JWKS key skipped: a shared secret (oct) is never taken from a JWKS"
            );
            return None;
        }
    };
    let alg = match jwk
        .common
        .key_algorithm
        .map(|a| a.to_string().parse::<Algorithm>())
    {
        None => None,
        Some(Ok(alg)) if Family::of(alg) == family => Some(alg),
        Some(_) => {
            warn!(kid, "JWKS key skipped: its alg does not fit its key type");
            return None;
        }
    };
    match DecodingKey::from_jwk(&jwk) {
        Ok(key) => Some(JwkKey {
            kid,
            family,
            alg,
            key,
        }),
        Err(e) => {
            warn!(kid, error = %e, "JWKS key skipped");
            None
        }
    }
}
