//! Telling every node that some or all of a session was erased:
//! `pg_notify('tether_erased', '<session>')`, sent inside the transaction that removes the
//! session's row (a delete) or moves its `retained_from_seq` (each batch of a trim, in
//! `erase/steps.rs`, with the statement `postgres/erase.rs` gives), so it is delivered exactly when that is committed, never for one
//! that rolled back.
//!
//! Like every notification it is a hint: a node that holds the session live reads the row
//! and acts on what it finds (no row: deleted; a later `retained_from_seq`: trimmed). One
//! lost while a listener reconnected is made up by the [`super::Wake::Resync`] that follows,
//! on which every follower reads its row again.

/// The channel of erased sessions.
pub const ERASED_CHANNEL: &str = "tether_erased";

/// The statement the erase steps run inside those transactions (`$1` the session): on
/// commit, every listening node hears of it.
pub(crate) const NOTIFY_ERASED: &str = "SELECT pg_notify('tether_erased', $1)";

#[cfg(test)]
mod tests {
    #[test]
    fn the_statement_notifies_the_channel_listened_to() {
        assert!(super::NOTIFY_ERASED.contains(&format!("'{}'", super::ERASED_CHANNEL)));
    }
}
