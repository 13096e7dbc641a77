//! The ids the fencing works with: a node's, and a forwarded request's.

use std::fmt;

/// A node's id: `n_` + 24 hex digits (time, then random), fresh for every process start, so a
/// restarted node never inherits its previous life's sessions without claiming them.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(String);

impl NodeId {
    /// A fresh id.
    pub fn fresh() -> NodeId {
        let ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        NodeId(format!(
            "n_{:012x}{:012x}",
            ms & 0xffff_ffff_ffff,
            rand::random::<u64>() & 0xffff_ffff_ffff
        ))
    }

    /// The id as stored.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<String> for NodeId {
    fn from(s: String) -> Self {
        NodeId(s)
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A forward's id: `f_` + 32 random hex digits.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ForwardId(String);

impl ForwardId {
    /// A fresh id.
    pub fn fresh() -> ForwardId {
        ForwardId(format!("f_{:032x}", rand::random::<u128>()))
    }

    /// The id as stored.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<String> for ForwardId {
    fn from(s: String) -> Self {
        ForwardId(s)
    }
}

impl fmt::Display for ForwardId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
