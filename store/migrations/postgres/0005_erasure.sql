-- Deletion and retention (mirrors migrations/sqlite/0004_erasure.sql).
--
-- A session is erased in two steps: its row goes (with its handoffs, its peer rows, and its
-- branches' link to it) in one short transaction that also records it
-- here, then its events go in bounded batches. The row here is what lets a crash between the two
-- steps be finished later by whoever erases next.
CREATE TABLE erasing (
    session_id TEXT PRIMARY KEY,
    since_ms   BIGINT NOT NULL
);

CREATE INDEX sessions_by_parent ON sessions (parent_session_id) WHERE parent_session_id IS NOT NULL;
