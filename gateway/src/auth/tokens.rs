//! Static tokens (`--token PROFILE:TOKEN`): a fixed list of secrets, each
//! naming its profile.
//!
//! Tokens are kept only as SHA-256 digests (a config file may give the
//! digest instead of the token: `PROFILE:sha256:HEX`), and a presented
//! token's digest is compared with every configured one in constant time,
//! so neither the comparison nor the position of a match leaks timing.

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Why a `--token` spec was refused. The binary reports it as bad
/// configuration (exit status 64).
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("a token is PROFILE:TOKEN or PROFILE:sha256:HEX")]
    NoColon,
    #[error("a token is PROFILE:TOKEN or PROFILE:sha256:HEX (got an empty or whitespace-only part in {spec:?})")]
    EmptyPart { spec: String },
    // A header's token is presented trimmed (`Bearer  TOKEN `), so a token
    // with whitespace at either end could never match there.
    #[error("profile {profile:?}'s token (or its name) starts or ends with whitespace; no client could present it")]
    Whitespace { profile: String },
    #[error("the sha256 of profile {profile}'s token must be 64 hex digits")]
    BadDigest {
        profile: String,
        #[source]
        source: HexError,
    },
}

/// What is wrong with a `sha256:HEX` digest.
#[derive(Debug, thiserror::Error)]
pub enum HexError {
    #[error("expected 64 hex digits, got {0}")]
    Length(usize),
    #[error(transparent)]
    NotUtf8(#[from] std::str::Utf8Error),
    #[error("bad hex {text:?}")]
    Digit {
        text: String,
        #[source]
        source: std::num::ParseIntError,
    },
}

/// The configured tokens, as (profile, SHA-256 of the token).
#[derive(Debug, Default)]
pub struct Tokens {
    entries: Vec<(String, [u8; 32])>,
}

impl Tokens {
    /// Parses `PROFILE:TOKEN` or `PROFILE:sha256:HEX` specs.
    pub fn parse(specs: &[String]) -> Result<Self, TokenError> {
        let mut entries = Vec::with_capacity(specs.len());
        for spec in specs {
            let (profile, secret) = spec.split_once(':').ok_or(TokenError::NoColon)?;
            if profile.trim().is_empty() || secret.trim().is_empty() {
                return Err(TokenError::EmptyPart { spec: spec.clone() });
            }
            if secret.trim() != secret || profile.trim() != profile {
                return Err(TokenError::Whitespace {
                    profile: profile.to_string(),
                });
            }
            let digest = match secret.strip_prefix("sha256:") {
                Some(hex) => decode_hex32(hex).map_err(|source| TokenError::BadDigest {
                    profile: profile.to_string(),
                    source,
                })?,
                None => Sha256::digest(secret.as_bytes()).into(),
            };
            entries.push((profile.to_string(), digest));
        }
        Ok(Self { entries })
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The profile of a presented token. Every entry is compared, in
    /// constant time, whether or not an earlier one matched.
    pub fn profile_of(&self, presented: &str) -> Option<&str> {
        let digest: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        let mut found = None;
        for (profile, expected) in &self.entries {
            if bool::from(expected.ct_eq(&digest)) && found.is_none() {
                found = Some(profile.as_str());
            }
        }
        found
    }
}

fn decode_hex32(hex: &str) -> Result<[u8; 32], HexError> {
    let hex = hex.trim();
    if hex.len() != 64 {
        return Err(HexError::Length(hex.len()));
    }
    let mut out = [0u8; 32];
    for (i, pair) in hex.as_bytes().chunks(2).enumerate() {
        let text = std::str::from_utf8(pair)?;
        out[i] = u8::from_str_radix(text, 16).map_err(|source| HexError::Digit {
            text: text.to_string(),
            source,
        })?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_map_to_their_profiles_and_hashes_work_too() {
        let digest = format!("{:x}", Sha256::digest(b"s3cret"));
        let t = Tokens::parse(&["alice:a-token".into(), format!("bob:sha256:{digest}")]).unwrap();
        assert_eq!(t.profile_of("a-token"), Some("alice"));
        assert_eq!(t.profile_of("s3cret"), Some("bob"));
        assert_eq!(t.profile_of("a-token "), None);
        assert_eq!(t.profile_of(""), None);
        // A token may contain colons.
        let t = Tokens::parse(&["p:a:b".into()]).unwrap();
        assert_eq!(t.profile_of("a:b"), Some("p"));
    }

    #[test]
    fn bad_specs_are_refused() {
        for bad in [
            "nocolon",
            ":tok",
            "p:",
            "p:sha256:abc",
            "p:sha256:zz",
            "p:   ",
            "p:\t",
            "  :tok",
            "p: tok",
            "p:tok ",
            " p:tok",
        ] {
            assert!(Tokens::parse(&[bad.to_string()]).is_err(), "{bad}");
        }
    }
}
