//! Identifier newtypes.
//!
//! Every id on the wire is a string. Wrapping each kind in its own type keeps
//! a `TurnId` from being passed where a `SessionId` is expected, while
//! `#[serde(transparent)]` keeps the wire form a bare JSON string.
//!
//! Ids minted by the gateway are a one-letter prefix plus a ULID, so they are
//! unique without coordination and sort by creation time (useful in logs and
//! for `session.list`'s newest-first order). Ids received from clients are
//! accepted verbatim: a string that names nothing is a lookup miss (4001),
//! never a parse error, so `From<String>` does no validation.

use std::fmt;

use rand::Rng;
use serde::{Deserialize, Serialize};

macro_rules! string_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// The id as it appears on the wire.
            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// Unwraps the id into its string.
            pub fn into_string(self) -> String {
                self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl From<String> for $name {
            fn from(s: String) -> Self {
                Self(s)
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                Self(s.to_owned())
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }
    };
}

/// One monotonic ULID generator for the process: two ids made in the same
/// millisecond still sort in the order they were made (a plain `Ulid::new`
/// orders them by its random part), so "newest first" listings and
/// time-sorted ids agree with creation order.
static ULIDS: std::sync::Mutex<ulid::Generator> = std::sync::Mutex::new(ulid::Generator::new());

/// `prefix` + a fresh ULID (26 Crockford base32 characters, time-sortable).
fn prefixed_ulid(prefix: &str) -> String {
    let next = ULIDS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .generate()
        // Overflow needs 2^80 ids in one millisecond; a random one is fine.
        .unwrap_or_else(|_| ulid::Ulid::new());
    let ulid = next.to_string();
    let mut s = String::with_capacity(prefix.len() + ulid.len());
    s.push_str(prefix);
    s.push_str(&ulid);
    s
}

string_id!(
    /// A session, `s_` + ULID.
    SessionId
);
string_id!(
    /// A turn (one accepted prompt and everything it produces), `t_` + ULID.
    TurnId
);
string_id!(
    /// A connection (WebSocket, stdio, one HTTP request), `p_` + ULID.
    PeerId
);
string_id!(
    /// A handoff work item, `h_` + ULID.
    HandoffId
);
string_id!(
    /// A turn's trace id: 12 lower-case hex digits, short enough to grep for
    /// in logs and to read aloud, random because it need not sort.
    TraceId
);

// A `Default` that mints a fresh random id would surprise more than help, so
// the constructors are plain `new()`.
#[allow(clippy::new_without_default)]
impl SessionId {
    /// Mints a new `s_…` id.
    pub fn new() -> Self {
        Self(prefixed_ulid("s_"))
    }
}

#[allow(clippy::new_without_default)]
impl TurnId {
    /// Mints a new `t_…` id.
    pub fn new() -> Self {
        Self(prefixed_ulid("t_"))
    }
}

#[allow(clippy::new_without_default)]
impl PeerId {
    /// Mints a new `p_…` id.
    pub fn new() -> Self {
        Self(prefixed_ulid("p_"))
    }
}

#[allow(clippy::new_without_default)]
impl HandoffId {
    /// Mints a new `h_…` id.
    pub fn new() -> Self {
        Self(prefixed_ulid("h_"))
    }
}

#[allow(clippy::new_without_default)]
impl TraceId {
    /// Mints 12 random lower-case hex digits (48 bits).
    pub fn new() -> Self {
        let bits: u64 = rand::thread_rng().gen::<u64>() & 0xffff_ffff_ffff;
        Self(format!("{bits:012x}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_ulid_part(id: &str, prefix: &str) {
        let rest = id.strip_prefix(prefix).expect("prefix");
        assert_eq!(rest.len(), 26, "{id}");
        assert!(
            rest.chars()
                .all(|c| c.is_ascii_digit() || c.is_ascii_uppercase()),
            "{id}"
        );
        assert!(ulid::Ulid::from_string(rest).is_ok(), "{id}");
    }

    #[test]
    fn prefixes_and_ulid_part() {
        assert_ulid_part(SessionId::new().as_str(), "s_");
        assert_ulid_part(TurnId::new().as_str(), "t_");
        // Made in a burst (mostly within one millisecond), ids still sort
        // in creation order.
        let ids: Vec<SessionId> = (0..1000).map(|_| SessionId::new()).collect();
        let mut sorted = ids.clone();
        sorted.sort();
        assert_eq!(ids, sorted);
        assert_ulid_part(PeerId::new().as_str(), "p_");
        assert_ulid_part(HandoffId::new().as_str(), "h_");
    }

    #[test]
    fn ids_are_unique() {
        let a = SessionId::new();
        let b = SessionId::new();
        assert_ne!(a, b);
    }

    #[test]
    fn time_sortable() {
        let a = SessionId::new();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = SessionId::new();
        assert!(a < b, "{a} !< {b}");
        assert!(a.as_str() < b.as_str());
    }

    #[test]
    fn trace_id_is_12_lower_hex() {
        for _ in 0..100 {
            let t = TraceId::new();
            assert_eq!(t.as_str().len(), 12, "{t}");
            assert!(
                t.as_str()
                    .chars()
                    .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c)),
                "{t}"
            );
        }
        assert_ne!(TraceId::new(), TraceId::new());
    }

    #[test]
    fn transparent_serde_and_conversions() {
        let id = SessionId::from("s_anything");
        assert_eq!(serde_json::to_string(&id).unwrap(), r#""s_anything""#);
        let back: SessionId = serde_json::from_str(r#""s_anything""#).unwrap();
        assert_eq!(back, id);
        assert_eq!(id.to_string(), "s_anything");
        assert_eq!(SessionId::from("x".to_string()).into_string(), "x");
        // Any string is a valid id; only lookups decide whether it names something.
        let odd: TurnId = serde_json::from_str(r#""""#).unwrap();
        assert_eq!(odd.as_str(), "");
        assert!(serde_json::from_str::<SessionId>("5").is_err());
    }
}
