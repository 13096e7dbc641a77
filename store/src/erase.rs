//! Deletion and retention: what removes data from the store.
//!
//! Like the handoff queue, erasing does not go through the StoreWriter's connection: it runs on
//! a connection of its own, in short transactions, so a large erase never becomes one long
//! transaction that stalls the writer (the writer and an erase step take turns on the write
//! lock). A session is erased in two steps:
//!
//! 1. its row, its handoffs, its branches' link to it (`parent_session_id` set to NULL) and, on
//!    PostgreSQL, its peer rows go in one transaction that records the session in the
//!    `erasing` table (its ownership row stays a minute, for a forwarded delete's answer, and
//!    goes with [`StoreErase::finish_erasing`]). From this commit on nothing of it is readable: every read
//!    starts from the session row.
//! 2. its events go in batches of at most `batch` events, each its own transaction, and then its
//!    `erasing` row. A crash in between leaves the row, and [`StoreErase::finish_erasing`] (the
//!    retention sweep runs it) removes what is left.
//!
//! On SQLite the erase connection runs with `secure_delete`, so the bytes of what it removes are
//! overwritten in the database file, not just unlinked; [`StoreErase::reclaim`] then gives the
//! freed pages back to the file system (incremental vacuum).
//!
//! A caller erasing a live session stops it from writing first (the session actor settles its
//! appends before it asks): an erase never races an append of the session it removes.

mod sql;
mod steps;

use async_trait::async_trait;

use tether_protocol::SessionId;

use crate::StoreError;

pub(crate) use sql::Dialect;
pub(crate) use steps::{Eraser, Housekeeping};

/// Which profiles a retention query covers: one profile with rules of its own, or every
/// profile except those (the default rules).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope<'a> {
    /// Only this profile.
    Profile(&'a str),
    /// Every profile but these.
    AllBut(&'a [String]),
}

impl Scope<'_> {
    /// Whether `profile` is in scope.
    pub fn covers(&self, profile: &str) -> bool {
        match self {
            Scope::Profile(p) => *p == profile,
            Scope::AllBut(others) => !others.iter().any(|o| o == profile),
        }
    }
}

/// A session a retention rule found idle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Idle {
    /// Its profile.
    pub profile: String,
    /// The session.
    pub id: SessionId,
    /// Which life of the id it is (its row's `created_at_ms`): what an erase decided on
    /// this finding names ([`StoreErase::delete_session`]).
    pub life: i64,
}

/// What a trim did to one session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Trimmed {
    /// The session's first stored seq afterwards.
    pub retained_from_seq: u64,
    /// Events removed.
    pub removed: u64,
}

/// Deletion and retention on a connection of their own (module doc).
#[async_trait]
pub trait StoreErase: Send + Sync {
    /// Erases session `id` if it belongs to `profile` and, with `life`, if it is that life of
    /// the id (its row's `created_at_ms`): step 1, then its events `batch` at a time (module
    /// doc), and returns the branches it unlinked from it. `Ok(None)` when there is no such
    /// session in that profile (unknown, another profile's, already erased, or a later life
    /// under the same id): nothing is changed.
    ///
    /// A caller that decided to erase from what it read earlier (retention's listing, a
    /// delete that found the session closed) names the life it read, so that an id reused
    /// since, by a new session that has nothing to do with that decision, is never erased
    /// by it.
    async fn delete_session(
        &self,
        profile: &str,
        id: &SessionId,
        life: Option<i64>,
        batch: u32,
    ) -> Result<Option<Vec<SessionId>>, StoreError>;

    /// Erases every session of `profile` (at most `batch` rows or events per transaction), its
    /// handoffs, and the profile row. Returns how many sessions were erased.
    async fn erase_profile(&self, profile: &str, batch: u32) -> Result<u64, StoreError>;

    /// Removes up to `batch` events of sessions whose rows are already gone (an erase that a
    /// crash cut short), and the `erasing` rows of those that have none left. Returns the
    /// events removed: 0 when nothing is left to finish.
    async fn finish_erasing(&self, batch: u32) -> Result<u64, StoreError>;

    /// Up to `limit` sessions in `scope` whose status is `status` (`closed` or `parked`) and
    /// whose last update is before `before_ms`, oldest first.
    async fn idle_since(
        &self,
        scope: Scope<'_>,
        status: tether_protocol::SessionStatus,
        before_ms: i64,
        limit: u32,
    ) -> Result<Vec<Idle>, StoreError>;

    /// Up to `limit` open sessions in `scope` that hold events a trim would remove: with more
    /// than `max_events` stored events, or (with `before_ms`) an event older than it, before
    /// their latest compaction. `(profile, id)`.
    async fn trim_candidates(
        &self,
        scope: Scope<'_>,
        max_events: Option<u64>,
        before_ms: Option<i64>,
        limit: u32,
    ) -> Result<Vec<(String, SessionId)>, StoreError>;

    /// Trims session `id`: removes, at most `batch` at a time, its events that are beyond
    /// `max_events` from its latest or older than `before_ms`, but never the latest
    /// `session.compacted` nor anything after it (the current history segment, which the
    /// transcript is made of, stays whole), and moves `retained_from_seq` past them in the
    /// same transaction as each batch. `None` if the session is gone.
    async fn trim(
        &self,
        id: &SessionId,
        max_events: Option<u64>,
        before_ms: Option<i64>,
        batch: u32,
    ) -> Result<Option<Trimmed>, StoreError>;

    /// Gives freed space back, at most `max_pages` pages a call (SQLite: incremental vacuum,
    /// then a checkpoint that truncates the WAL when no reader holds it; PostgreSQL: nothing,
    /// its autovacuum does it). Returns the pages given back.
    async fn reclaim(&self, max_pages: u32) -> Result<u64, StoreError>;

    /// Takes the store-wide retention lease for one sweep: `true` if this process holds it
    /// (always on SQLite, which has one gateway; on PostgreSQL an advisory lock, so that of
    /// several nodes one sweeps at a time). Released by [`StoreErase::release_lead`] or when
    /// the process's connection ends.
    async fn try_lead(&self) -> Result<bool, StoreError>;

    /// Releases the lease [`StoreErase::try_lead`] took.
    async fn release_lead(&self) -> Result<(), StoreError>;
}

/// The last seq one trim step removes, or `None` if it removes nothing: the session's events
/// start at `from` and end at `latest`; `compacted` is its latest `session.compacted` (nothing
/// at or after it goes, and a session never compacted is never trimmed); the count rule keeps
/// the last `max_events`; `by_age` is the last seq of the step's window older than the age
/// rule's limit. A step removes at most `batch` events.
pub(crate) fn trim_upto(
    from: i64,
    latest: i64,
    compacted: Option<i64>,
    max_events: Option<u64>,
    by_age: Option<i64>,
    batch: u32,
) -> Option<i64> {
    let cap = compacted?.checked_sub(1)?;
    let by_count = max_events.map(|n| latest.saturating_sub(i64::try_from(n).unwrap_or(i64::MAX)));
    let cut = match (by_count, by_age) {
        (Some(a), Some(b)) => a.max(b),
        (Some(a), None) | (None, Some(a)) => a,
        (None, None) => return None,
    };
    let upto = cut
        .min(cap)
        .min(from.saturating_add(i64::from(batch.max(1))) - 1);
    (upto >= from).then_some(upto)
}

#[cfg(test)]
mod tests {
    use super::trim_upto;

    #[test]
    fn the_current_segment_is_never_trimmed() {
        // Compacted at 50: at most 1..=49 may go, whatever the rules say.
        assert_eq!(trim_upto(1, 100, Some(50), Some(10), None, 1000), Some(49));
        assert_eq!(trim_upto(1, 100, None, Some(10), None, 1000), None);
        assert_eq!(trim_upto(50, 100, Some(50), Some(1), None, 1000), None);
    }

    #[test]
    fn either_rule_trims_and_a_step_is_bounded() {
        assert_eq!(trim_upto(1, 100, Some(90), Some(95), None, 1000), Some(5));
        assert_eq!(
            trim_upto(1, 100, Some(90), Some(95), Some(30), 1000),
            Some(30)
        );
        assert_eq!(trim_upto(1, 100, Some(90), None, Some(30), 1000), Some(30));
        assert_eq!(trim_upto(11, 100, Some(90), Some(1), None, 7), Some(17));
        assert_eq!(trim_upto(1, 100, Some(90), Some(200), None, 1000), None);
        assert_eq!(trim_upto(1, 100, Some(90), None, None, 1000), None);
    }
}
