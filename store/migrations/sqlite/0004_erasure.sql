-- Deletion and retention.
--
-- A session is erased in two steps: its row goes (with its handoffs and its branches' link to
-- it) in one short transaction that also records it here, then its events go in bounded batches,
-- each a transaction of its own so the writer never waits long. The row here is what lets a
-- crash between the two steps be finished later: whoever erases next (the retention sweep, the
-- next delete) removes the remaining events of every session listed, then the row.
CREATE TABLE erasing (
    session_id TEXT PRIMARY KEY,
    since_ms   INTEGER NOT NULL
);

-- A deleted session unlinks its branches (`parent_session_id` set to NULL) without scanning
-- every session; `branch_titles` reads the same rows. Partial: most sessions are no branch.
CREATE INDEX sessions_by_parent ON sessions (parent_session_id) WHERE parent_session_id IS NOT NULL;
