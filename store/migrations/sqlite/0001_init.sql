-- tether store, schema version 1.
--
-- Kept dialect-light on purpose: the PostgreSQL migrations will mirror these tables column for column.

-- Store-wide facts. `epoch` names this event history (see PROTOCOL.md 1.3); it is inserted by the
-- code on first open (it needs randomness), `schema_version` here.
CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
INSERT INTO meta (key, value) VALUES ('schema_version', '1');

-- Profiles are created implicitly by the first session created in them.
CREATE TABLE profiles (
    name          TEXT PRIMARY KEY,
    created_at_ms INTEGER NOT NULL
);

-- One row per session. `latest_seq` is the highest durable event seq; the writer checks every
-- append against it, so it is also the source of truth for "what comes next".
-- `retained_from_seq` is the first seq still stored (retention may remove older events).
CREATE TABLE sessions (
    id                    TEXT NOT NULL,
    profile               TEXT NOT NULL DEFAULT 'default',
    title                 TEXT NOT NULL,
    status                TEXT NOT NULL,
    parent_session_id     TEXT,
    kind                  TEXT NOT NULL DEFAULT 'chat',
    history_version       INTEGER NOT NULL DEFAULT 0,
    close_on_disconnect   INTEGER NOT NULL DEFAULT 0,
    engine_pin            TEXT,
    follow_profile_config INTEGER NOT NULL DEFAULT 0,
    turn_marker           TEXT,
    created_at_ms         INTEGER NOT NULL,
    updated_at_ms         INTEGER NOT NULL,
    latest_seq            INTEGER NOT NULL DEFAULT 0,
    message_count         INTEGER NOT NULL DEFAULT 0,
    retained_from_seq     INTEGER NOT NULL DEFAULT 1,
    PRIMARY KEY (id)
);
-- session.list: newest first within a profile, keyset-paginated on (created_at_ms, id).
CREATE INDEX sessions_by_profile_created ON sessions (profile, created_at_ms DESC, id DESC);

-- Durable events. WITHOUT ROWID: the (session_id, seq) key is the only access path, so the table
-- is its own clustered index and an append touches one b-tree instead of two.
CREATE TABLE events (
    session_id TEXT NOT NULL,
    seq        INTEGER NOT NULL,
    type       TEXT NOT NULL,
    payload    TEXT NOT NULL,
    turn_id    TEXT,
    trace_id   TEXT,
    ts_ms      INTEGER NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;
-- Finds the latest compaction (start of the current history segment) without scanning the
-- session's events. Partial, so ordinary appends pay nothing for it.
CREATE INDEX events_compactions ON events (session_id, seq) WHERE type = 'session.compacted';

-- Handoff work queue (pending -> running -> completed | failed); used by a later issue.
CREATE TABLE handoffs (
    id            TEXT PRIMARY KEY,
    session_id    TEXT NOT NULL,
    profile       TEXT NOT NULL,
    target        TEXT NOT NULL,
    state         TEXT NOT NULL,
    error         TEXT,
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL
);
CREATE INDEX handoffs_by_target ON handoffs (profile, target, state, created_at_ms);
