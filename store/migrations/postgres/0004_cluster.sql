-- Several gateways on one PostgreSQL (issue 19; DESIGN.md "Several gateways on one PostgreSQL").
--
-- PostgreSQL only: a SQLite store is always one gateway, so its schema stays as it is. Every
-- time here is a TIMESTAMPTZ written with the server's `clock_timestamp()`: liveness is judged by
-- the database's clock, inside the claiming transaction, never by a node's clock.

-- One row per node (a `tether serve` process), under a fresh id each time it starts.
-- `heartbeat_at` is moved every second; a node whose heartbeat is older than the lease is dead.
-- `run_since` is when the node's current unbroken run of heartbeats began: a heartbeat that comes
-- later than the allowed gap after the previous one (an outage, a stalled process) starts a new
-- run, and a node claims another node's session only once its run is one lease long
-- (postgres/cluster/claim.rs).
CREATE TABLE nodes (
    id           TEXT PRIMARY KEY,
    started_at   TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
    heartbeat_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
    run_since    TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp()
);

-- Who owns a session: the only node that assigns its seqs and writes anything of it.
-- `node_id` NULL: nobody (never claimed, or released). `fence` grows by one with every claim;
-- every write of the session locks this row and checks node and fence first. No foreign key to
-- `nodes`: a row naming a node that is gone simply names a dead owner.
-- `claimed_at`: when the current fence was taken (for operators, and for checking the outage
-- rule after the fact).
CREATE TABLE session_owners (
    session_id TEXT PRIMARY KEY,
    node_id    TEXT,
    fence      BIGINT NOT NULL DEFAULT 0,
    claimed_at TIMESTAMPTZ
);

-- The fence each event was written under, so that "the fence never decreases along seq" can be
-- checked with SQL. 0: written by a single gateway (no cluster). A constant default, so adding
-- it rewrites no row.
ALTER TABLE events ADD COLUMN fence BIGINT NOT NULL DEFAULT 0;

-- Each node's peer count per session. Counts of a dead node are ignored (join on `nodes` and
-- the lease), so a node that dies leaves no session pinned.
CREATE TABLE session_peers (
    session_id TEXT NOT NULL,
    node_id    TEXT NOT NULL,
    peers      BIGINT NOT NULL CHECK (peers >= 0),
    PRIMARY KEY (session_id, node_id)
);

-- Requests forwarded to a session's owner by another node. `state`: `pending` (written by the
-- forwarder), `accepted` (written by the owner in the same transaction as the request's first
-- write, so "was it run?" has one answer even if the owner dies right after), `answered`
-- (`answer` holds the reply), `refused` (past its deadline, or the owner would not run it).
-- `deadline` is judged with the server's clock like every other time here.
CREATE TABLE forwards (
    id         TEXT PRIMARY KEY,
    session_id TEXT NOT NULL,
    from_node  TEXT NOT NULL,
    method     TEXT NOT NULL,
    params     TEXT NOT NULL,
    deadline   TIMESTAMPTZ NOT NULL,
    state      TEXT NOT NULL DEFAULT 'pending'
        CHECK (state IN ('pending', 'accepted', 'answered', 'refused')),
    answer     TEXT,
    created_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp()
);
-- The owner's poll: the pending forwards of a session, oldest first.
CREATE INDEX forwards_pending ON forwards (session_id, created_at) WHERE state = 'pending';
