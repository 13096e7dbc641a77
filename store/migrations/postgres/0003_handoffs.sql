-- Handoffs (issue 5): the work queue of PROTOCOL.md 1.4.
--
-- At most one handoff per session may be in flight (`pending` or `running`). `handoff.request`
-- checks that in its INSERT already, but under READ COMMITTED two such INSERTs can both pass
-- their checks at once: this partial unique index makes it a property of the data.
CREATE UNIQUE INDEX handoffs_one_in_flight ON handoffs (session_id)
    WHERE state IN ('pending', 'running');

-- `handoff.state`: a session's latest handoff in one seek, newest first.
CREATE INDEX handoffs_by_session ON handoffs (session_id, ord);
