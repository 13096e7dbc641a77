//! HS256 tokens minted in the test itself (HMAC-SHA256 over the `sha2`
//! the suites already use), so the gate suites need no Python: a
//! secret in a file of the test's own directory, and tokens with any
//! header and claims, including the malformed ones an attacker would send.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

/// Seconds since the Unix epoch.
pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs()
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_millis()
}

fn b64url(bytes: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..=chunk.len() {
            out.push(ABC[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}

fn hmac_sha256(key: &[u8], msg: &[u8]) -> Vec<u8> {
    let mut k = [0u8; 64];
    if key.len() > 64 {
        k[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        k[..key.len()].copy_from_slice(key);
    }
    let pad = |x: u8| k.iter().map(|b| b ^ x).collect::<Vec<u8>>();
    let inner = Sha256::new()
        .chain_update(pad(0x36))
        .chain_update(msg)
        .finalize();
    Sha256::new()
        .chain_update(pad(0x5c))
        .chain_update(inner)
        .finalize()
        .to_vec()
}

/// A shared secret in a file, and the tokens it signs.
pub struct Signer {
    pub file: PathBuf,
    secret: Vec<u8>,
}

impl Signer {
    pub fn new(dir: &Path, name: &str) -> Signer {
        let secret: Vec<u8> = Sha256::digest(format!("{name} {}", now_ms()).as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
            .into_bytes();
        let file = dir.join(name);
        std::fs::write(&file, &secret).expect("write the secret");
        Signer { file, secret }
    }

    pub fn path(&self) -> String {
        self.file.to_string_lossy().into_owned()
    }

    /// A token with this header (besides `alg`, `typ`) and these claims.
    pub fn sign_with(&self, header: Value, claims: Value) -> String {
        let mut head = json!({"alg": "HS256", "typ": "JWT"});
        if let (Some(h), Some(extra)) = (head.as_object_mut(), header.as_object()) {
            h.extend(extra.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        let signing = format!(
            "{}.{}",
            b64url(head.to_string().as_bytes()),
            b64url(claims.to_string().as_bytes())
        );
        let mac = hmac_sha256(&self.secret, signing.as_bytes());
        format!("{signing}.{}", b64url(&mac))
    }

    pub fn sign(&self, claims: Value) -> String {
        self.sign_with(json!({}), claims)
    }

    /// A token of `sub` valid for an hour, with `extra` claims.
    pub fn token(&self, sub: &str, extra: Value) -> String {
        let mut claims = json!({"sub": sub, "exp": now() + 3600, "iat": now()});
        if let (Some(c), Some(extra)) = (claims.as_object_mut(), extra.as_object()) {
            c.extend(extra.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        self.sign(claims)
    }
}

/// The WebSocket URL with `token`.
pub fn ws_url(addr: &str, token: &str) -> String {
    format!("ws://{addr}/ws?token={token}")
}

#[test]
fn hmac_matches_rfc_4231_case_2() {
    let mac = hmac_sha256(b"Jefe", b"what do ya want for nothing?");
    let hex: String = mac.iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(
        hex,
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
    );
    assert_eq!(b64url(b"any carnal pleas"), "YW55IGNhcm5hbCBwbGVhcw");
}
