//! The dialect-neutral store API, implemented by SQLite (`sqlite/`) and PostgreSQL
//! (`postgres/`); nothing outside those two may depend on SQL specifics.

use std::sync::Arc;

use async_trait::async_trait;

use tether_protocol::SessionId;

use crate::{EventRow, HandoffStore, SessionRow, StoreErase, StoreError, WriteOp};

/// Events per read of [`StoreRead::events_between`].
const EVENTS_PAGE: u32 = 2000;

/// What the single writer connection does.
///
/// Owned by exactly one StoreWriter actor; `&mut self` on purpose: there is one writer, writes are
/// serialized by its mailbox, and the type system keeps a second task from sharing it.
#[async_trait]
pub trait StoreWrite: Send {
    /// Commits a batch of ops and returns one result per op, in the same order. The batch is
    /// moved in: an implementation that runs it elsewhere (the SQLite writer's thread) takes it
    /// along without copying a byte of it.
    ///
    /// What a caller may rely on:
    ///
    /// - **Each op is atomic**: it is wholly written or not at all.
    /// - **Ops are independent**: an op that fails (refused by its checks, or by a write error of
    ///   its own, e.g. disk full) leaves no trace and does not fail the others.
    /// - **Ops run in batch order**: an op sees what the earlier ones of the batch wrote (two
    ///   Appends of one session, an Append after its session's CreateSession).
    /// - **`Ok` means committed**, as durably as the store's [`Synchronous`](crate::Synchronous)
    ///   says. If a COMMIT fails, every op it held gets that error and none of them is written.
    /// - **Dropping the future** loses the results, not the atomicity: each op is still written
    ///   wholly or not at all.
    ///
    /// How ops share transactions is the implementation's business, but a batch should cost about
    /// one durable commit, not one per op: that is what the StoreWriter's group commit is for.
    /// (The SQLite writer runs a batch as one transaction and takes a savepoint per op only when
    /// an op could fail half-way; see `sqlite/writer.rs`.)
    async fn commit(&mut self, ops: Vec<WriteOp>) -> Vec<Result<(), StoreError>>;

    /// Latest committed seq of a session as seen by the writer connection (0 if the session or
    /// its events do not exist). Used as a barrier by the writer actor: it reflects every commit
    /// made before, unlike a read-pool connection.
    async fn latest_seq(&mut self, session_id: &SessionId) -> Result<u64, StoreError>;
}

/// Reads, over a small read pool. Shared (`Arc`) by many actors and tasks.
#[async_trait]
pub trait StoreRead: Send + Sync {
    /// The store's epoch (PROTOCOL.md 1.3): 16 lowercase hex digits, fixed at creation.
    fn epoch(&self) -> &str;

    /// The session `id` if it belongs to `profile`; another profile's session is `None`
    /// (indistinguishable from an unknown one, as the protocol requires).
    async fn get_session(
        &self,
        profile: &str,
        id: &SessionId,
    ) -> Result<Option<SessionRow>, StoreError>;

    /// A page of a profile's sessions, newest first (`created_at_ms` DESC, `id` DESC).
    ///
    /// `cursor` is the opaque `next_cursor` of a previous page. Returns at most `limit` rows
    /// (`limit` must be at least 1) and a next cursor that is `Some` only if more rows exist.
    /// Closed sessions are skipped unless `include_closed`.
    async fn list_sessions(
        &self,
        profile: &str,
        include_closed: bool,
        cursor: Option<&str>,
        limit: u32,
    ) -> Result<(Vec<SessionRow>, Option<String>), StoreError> {
        self.list_sessions_within(profile, include_closed, cursor, limit, usize::MAX)
            .await
    }

    /// [`StoreRead::list_sessions`] whose page also ends once the titles and ids of its rows
    /// add up to more than `max_bytes`: the row that passes it is the page's last, so a page
    /// holds at least one row. A reply listing those rows is at least that large, so a caller
    /// bounding its reply to `max_bytes` loses nothing it could have sent; it may end the page
    /// earlier still (and continue with [`crate::list_cursor_after`]).
    async fn list_sessions_within(
        &self,
        profile: &str,
        include_closed: bool,
        cursor: Option<&str>,
        limit: u32,
        max_bytes: usize,
    ) -> Result<(Vec<SessionRow>, Option<String>), StoreError>;

    /// Durable events with `seq > after`, ascending, at most `limit`.
    async fn events_since(
        &self,
        session_id: &SessionId,
        after: u64,
        limit: u32,
    ) -> Result<Vec<EventRow>, StoreError>;

    /// Every durable event with `after < seq <= upto`, ascending, read [`EVENTS_PAGE`] at a
    /// time (a branch's source up to its cut, what a follower missed): one loop for every
    /// caller that needs a range whole rather than a page of it.
    async fn events_between(
        &self,
        session_id: &SessionId,
        mut after: u64,
        upto: u64,
    ) -> Result<Vec<EventRow>, StoreError> {
        let mut all = Vec::new();
        while after < upto {
            let page = self.events_since(session_id, after, EVENTS_PAGE).await?;
            let full = page.len() >= EVENTS_PAGE as usize;
            let Some(last) = page.last().map(|r| r.seq) else {
                break;
            };
            all.extend(page.into_iter().filter(|r| r.seq <= upto));
            after = last;
            if !full {
                break;
            }
        }
        Ok(all)
    }

    /// The transcript events of the history segment as it was at seq `upto`: the latest
    /// `session.compacted` event up to it (if any) and every later event up to it whose type
    /// feeds the transcript
    /// ([`EventType::feeds_transcript`](tether_protocol::EventType::feeds_transcript): the
    /// transcript types and `error`); ascending seq. A cut before the latest compaction is the
    /// segment that compaction ended, not an empty one: a reader that took its `upto` just
    /// before a compaction committed still gets the transcript it saw.
    async fn segment_events(
        &self,
        session_id: &SessionId,
        upto: u64,
    ) -> Result<Vec<EventRow>, StoreError>;

    /// The latest `todo.updated` event of a session, if any.
    async fn latest_todos(&self, session_id: &SessionId) -> Result<Option<EventRow>, StoreError>;

    /// `(profile, id)` of every session with a turn marker: turns that were
    /// running or queued when the gateway last stopped.
    async fn sessions_with_turn_marker(&self) -> Result<Vec<(String, SessionId)>, StoreError>;

    /// How many sessions are not closed, in every profile (`/metrics` derives the parked ones
    /// from it). A scan of the sessions table, not of events: meant for a scrape every few
    /// seconds, not for a request path.
    async fn count_open_sessions(&self) -> Result<u64, StoreError>;

    /// Titles of the sessions branched from `parent` (closed ones too), to
    /// number the next branch.
    async fn branch_titles(
        &self,
        profile: &str,
        parent: &SessionId,
    ) -> Result<Vec<String>, StoreError>;
}

/// An opened store: the one writer, the shared reader, the handoff queue, and the store's epoch.
/// What [`open_sqlite`](crate::open_sqlite) returns; a gateway uses [`open`](crate::open), which
/// hands the writer out through a [`WriterFactory`](crate::WriterFactory).
pub struct Opened {
    /// The single writer; hand it to the StoreWriter actor.
    pub writer: Box<dyn StoreWrite>,
    /// The read side, shared.
    pub reader: Arc<dyn StoreRead>,
    /// The handoff queue (its own connection: see `sqlite/handoffs.rs` for why), shared.
    pub handoffs: Arc<dyn HandoffStore>,
    /// Deletion and retention (their own connection: `erase.rs`), shared.
    pub eraser: Arc<dyn StoreErase>,
    /// The store's epoch (same as `reader.epoch()`).
    pub epoch: String,
    /// The events the store held when it was opened (the sum of every session's `latest_seq`).
    pub held: u64,
}

impl std::fmt::Debug for Opened {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Opened")
            .field("epoch", &self.epoch)
            .finish_non_exhaustive()
    }
}
