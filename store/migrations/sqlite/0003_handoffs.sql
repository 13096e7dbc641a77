-- Handoffs (issue 5): the work queue of PROTOCOL.md 1.4.
--
-- At most one handoff per session may be in flight (`pending` or `running`). `handoff.request`
-- checks that in its INSERT already (one statement, so atomic under SQLite's single writer); this
-- partial unique index makes it a property of the data, so it also holds for a dialect whose
-- isolation lets two such INSERTs pass their checks at once (PostgreSQL's READ COMMITTED).
CREATE UNIQUE INDEX handoffs_one_in_flight ON handoffs (session_id)
    WHERE state IN ('pending', 'running');

-- `handoff.state`: a session's latest handoff in one seek. SQLite appends the rowid to every
-- index entry, so this index is also in insertion order within a session.
CREATE INDEX handoffs_by_session ON handoffs (session_id);
