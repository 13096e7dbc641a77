//! The token settings of `tether serve`: `--token` and the `--jwt-*` flags,
//! what they make of the gateway's [`AuthConfig`], and their reload on
//! SIGHUP (docs/AUTHENTICATION.md).
//!
//! The HMAC secret is never a flag value (it would show in `ps`): it comes
//! from `--jwt-secret-file` or from the variable `TETHER_JWT_SECRET`.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::parser::ValueSource;
use clap::{ArgMatches, Args};
use tether_gateway::{AuthConfig, JwtAlgorithm, JwtConfig, Tokens};

/// The variable that may hold the HMAC secret itself.
pub const SECRET_ENV: &str = "TETHER_JWT_SECRET";

const DEFAULT_LEEWAY_S: u64 = 30;
const DEFAULT_REFETCH_S: u64 = 30;
const DEFAULT_EXPIRING_S: u64 = 60;
const DEFAULT_PROFILE_CLAIM: &str = "sub";

/// The `--jwt-*` flags (each also `TETHER_<NAME>` and a config file key).
#[derive(Debug, Clone, Args)]
pub struct JwtArgs {
    /// File holding the HMAC secret for HS256/384/512 tokens (its bytes, a
    /// trailing newline removed). Or set TETHER_JWT_SECRET.
    #[arg(long, env = "TETHER_JWT_SECRET_FILE")]
    pub jwt_secret_file: Option<PathBuf>,
    /// PEM file with the public key (RSA, EC or Ed25519) that signs tokens.
    #[arg(long, env = "TETHER_JWT_PUBLIC_KEY_FILE")]
    pub jwt_public_key_file: Option<PathBuf>,
    /// URL of the identity provider's JWKS (its public keys, by `kid`).
    #[arg(long, env = "TETHER_JWT_JWKS_URL")]
    pub jwt_jwks_url: Option<String>,
    /// An unknown `kid` refetches the JWKS at most this often, in seconds.
    #[arg(long, env = "TETHER_JWT_JWKS_REFETCH_S", default_value_t = DEFAULT_REFETCH_S)]
    pub jwt_jwks_refetch_s: u64,
    /// Accepted algorithms (comma-separated); default: every one of HS256,
    /// HS384, HS512, RS256, RS384, RS512, ES256, ES384, EdDSA that a
    /// configured key can verify.
    #[arg(long, env = "TETHER_JWT_ALGORITHMS", value_delimiter = ',')]
    pub jwt_algorithms: Vec<String>,
    /// Clock skew allowed on exp, nbf and iat, in seconds.
    #[arg(long, env = "TETHER_JWT_LEEWAY_S", default_value_t = DEFAULT_LEEWAY_S)]
    pub jwt_leeway_s: u64,
    /// Required `iss` of every token.
    #[arg(long, env = "TETHER_JWT_ISSUER")]
    pub jwt_issuer: Option<String>,
    /// Required `aud` of every token (one of its audiences).
    #[arg(long, env = "TETHER_JWT_AUDIENCE")]
    pub jwt_audience: Option<String>,
    /// The claim that names the profile.
    #[arg(long, env = "TETHER_JWT_PROFILE_CLAIM", default_value = DEFAULT_PROFILE_CLAIM)]
    pub jwt_profile_claim: String,
    /// A connection is told (`gateway.token_expiring`) this many seconds
    /// before its token's exp; 0: never.
    #[arg(long, env = "TETHER_TOKEN_EXPIRING_S", default_value_t = DEFAULT_EXPIRING_S)]
    pub token_expiring_s: u64,
}

/// The file's keys for the same settings.
#[derive(Debug, Default, Clone, serde::Deserialize)]
pub(super) struct FileAuth {
    pub token: Option<Vec<String>>,
    pub jwt_secret_file: Option<PathBuf>,
    pub jwt_public_key_file: Option<PathBuf>,
    pub jwt_jwks_url: Option<String>,
    pub jwt_jwks_refetch_s: Option<u64>,
    pub jwt_algorithms: Option<Vec<String>>,
    pub jwt_leeway_s: Option<u64>,
    pub jwt_issuer: Option<String>,
    pub jwt_audience: Option<String>,
    pub jwt_profile_claim: Option<String>,
    pub token_expiring_s: Option<u64>,
}

/// Which of the token settings came from the command line or the
/// environment: those a file (at start or at a reload) does not change.
#[derive(Debug, Clone, Default)]
pub struct Pinned(Vec<&'static str>);

impl Pinned {
    const IDS: [&'static str; 11] = [
        "token",
        "jwt_secret_file",
        "jwt_public_key_file",
        "jwt_jwks_url",
        "jwt_jwks_refetch_s",
        "jwt_algorithms",
        "jwt_leeway_s",
        "jwt_issuer",
        "jwt_audience",
        "jwt_profile_claim",
        "token_expiring_s",
    ];

    pub(super) fn of(matches: &ArgMatches) -> Pinned {
        Pinned(
            Self::IDS
                .into_iter()
                .filter(|id| {
                    matches!(
                        matches.value_source(id),
                        Some(ValueSource::CommandLine) | Some(ValueSource::EnvVariable)
                    )
                })
                .collect(),
        )
    }

    fn has(&self, id: &str) -> bool {
        self.0.contains(&id)
    }
}

impl super::ServeArgs {
    /// Takes the file's token settings, except those pinned by a flag or
    /// the environment. At a reload every unpinned one is the file's, so
    /// a key removed from the file goes back to its default.
    pub(super) fn apply_file_auth(&mut self, file: FileAuth) {
        let pinned = self.auth_pinned.clone();
        let jwt = &mut self.jwt;
        macro_rules! take {
            ($field:ident, $default:expr) => {
                if !pinned.has(stringify!($field)) {
                    jwt.$field = file.$field.unwrap_or($default);
                }
            };
        }
        take!(jwt_jwks_refetch_s, DEFAULT_REFETCH_S);
        take!(jwt_leeway_s, DEFAULT_LEEWAY_S);
        take!(token_expiring_s, DEFAULT_EXPIRING_S);
        take!(jwt_profile_claim, DEFAULT_PROFILE_CLAIM.to_string());
        take!(jwt_algorithms, Vec::new());
        macro_rules! take_opt {
            ($($field:ident),*) => {$(
                if !pinned.has(stringify!($field)) {
                    jwt.$field = file.$field;
                }
            )*};
        }
        take_opt!(
            jwt_secret_file,
            jwt_public_key_file,
            jwt_jwks_url,
            jwt_issuer,
            jwt_audience
        );
        if !pinned.has("token") {
            self.token = file.token.unwrap_or_default();
        }
    }

    /// Whether any token (static or JWT) is configured.
    pub fn has_tokens(&self) -> anyhow::Result<bool> {
        let config = self.auth_config()?;
        Ok(!config.tokens.is_empty() || config.jwt.is_some())
    }

    /// The gateway's token configuration: the static tokens, and the JWT
    /// checks when a key is configured (files read now).
    pub fn auth_config(&self) -> anyhow::Result<AuthConfig> {
        let tokens = Tokens::parse(&self.token)?;
        let j = &self.jwt;
        let hmac_secret = match (&j.jwt_secret_file, std::env::var_os(SECRET_ENV)) {
            (Some(_), Some(_)) => {
                bail!("give the JWT secret once: --jwt-secret-file or {SECRET_ENV}, not both")
            }
            (Some(path), None) => {
                let mut bytes = std::fs::read(path).with_context(|| {
                    format!("cannot read the JWT secret file {}", path.display())
                })?;
                // Files written by `echo` end in a newline that no issuer signs with.
                while bytes.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
                    bytes.pop();
                }
                Some(bytes)
            }
            (None, Some(value)) if value.is_empty() => None,
            (None, Some(value)) => Some(value.into_encoded_bytes()),
            (None, None) => None,
        };
        let public_key_pem = match &j.jwt_public_key_file {
            Some(path) => Some(std::fs::read(path).with_context(|| {
                format!("cannot read the JWT public key file {}", path.display())
            })?),
            None => None,
        };
        let keyed = hmac_secret.is_some() || public_key_pem.is_some() || j.jwt_jwks_url.is_some();
        let mut algorithms = Vec::with_capacity(j.jwt_algorithms.len());
        for name in &j.jwt_algorithms {
            let name = name.trim();
            let alg: JwtAlgorithm = name
                .parse()
                .map_err(|_| anyhow::anyhow!("--jwt-algorithms: unknown algorithm {name:?}"))?;
            algorithms.push(alg);
        }
        if !keyed {
            if !algorithms.is_empty() || j.jwt_issuer.is_some() || j.jwt_audience.is_some() {
                bail!("--jwt-* settings without a key: give --jwt-secret-file, {SECRET_ENV}, --jwt-public-key-file or --jwt-jwks-url");
            }
            return Ok(AuthConfig {
                tokens,
                jwt: None,
                warn_before: Duration::from_secs(j.token_expiring_s),
            });
        }
        if j.jwt_jwks_refetch_s == 0 {
            bail!("--jwt-jwks-refetch-s must be at least 1");
        }
        let jwt = JwtConfig {
            hmac_secret,
            public_key_pem,
            jwks_url: j.jwt_jwks_url.clone(),
            algorithms,
            leeway: Duration::from_secs(j.jwt_leeway_s),
            issuer: j.jwt_issuer.clone(),
            audience: j.jwt_audience.clone(),
            profile_claim: j.jwt_profile_claim.clone(),
            jwks_refetch: Duration::from_secs(j.jwt_jwks_refetch_s),
        };
        jwt.validate()?;
        Ok(AuthConfig {
            tokens,
            jwt: Some(jwt),
            warn_before: Duration::from_secs(j.token_expiring_s),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::parse;

    #[test]
    fn the_file_gives_the_jwt_settings_and_a_reload_rereads_only_what_flags_left() {
        let dir = tempfile::tempdir().expect("tempdir");
        let secret = dir.path().join("secret");
        std::fs::write(&secret, "s3cret\n").expect("write");
        let file = dir.path().join("tether.toml");
        let write = |body: &str| std::fs::write(&file, body).expect("write");
        write(&format!(
            "token = [\"a:tok-a\"]\njwt_secret_file = {secret:?}\njwt_issuer = \"https://id\"\njwt_leeway_s = 7\n"
        ));
        let path = file.to_string_lossy().into_owned();
        let args = parse(&["--config", &path, "--jwt-audience", "tether"]);
        let config = args.auth_config().expect("auth");
        let jwt = config.jwt.expect("jwt configured");
        assert_eq!(
            jwt.hmac_secret.as_deref(),
            Some(&b"s3cret"[..]),
            "newline trimmed"
        );
        assert_eq!(jwt.issuer.as_deref(), Some("https://id"));
        assert_eq!(jwt.audience.as_deref(), Some("tether"));
        assert_eq!(jwt.leeway.as_secs(), 7);
        assert_eq!(jwt.profile_claim, "sub");
        assert!(!config.tokens.is_empty());

        // The file changes: its keys are taken anew, removed ones go back
        // to their defaults, and the flag's audience stays.
        write(&format!(
            "token = [\"b:tok-b\"]\njwt_secret_file = {secret:?}\n"
        ));
        let reloaded = args.reload_auth().expect("reload");
        assert_eq!(reloaded.tokens.profile_of("tok-b"), Some("b"));
        assert_eq!(reloaded.tokens.profile_of("tok-a"), None);
        let jwt = reloaded.jwt.expect("jwt");
        assert_eq!(jwt.audience.as_deref(), Some("tether"));
        assert_eq!(jwt.issuer, None);
        assert_eq!(jwt.leeway.as_secs(), 30);
        // A file that drops the key the flag's audience needs is refused
        // (the gateway then keeps what it has).
        write("token = [\"b:tok-b\"]\n");
        assert!(args.reload_auth().is_err());
    }
}
