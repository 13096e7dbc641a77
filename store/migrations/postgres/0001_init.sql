-- tether store, schema version 1, PostgreSQL dialect.
--
-- Mirrors migrations/sqlite/0001_init.sql column for column (same names, same meaning, same
-- version numbers), so that the store's code and its tests read both alike. Integers are BIGINT
-- (the model's u64 counters are checked into i64 on the way in); flags are BOOLEAN. JSON columns
-- are TEXT on purpose: an event's payload must come back byte for byte as it was written (JSONB
-- would reorder its keys), and the engine pin and turn marker are only ever read by tether.

-- Store-wide facts. `epoch` names this event history (PROTOCOL.md 1.3); it is inserted by the
-- code on first open (it needs randomness), `schema_version` here.
CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
INSERT INTO meta (key, value) VALUES ('schema_version', '1');

-- Profiles are created implicitly by the first session created in them.
CREATE TABLE profiles (
    name          TEXT PRIMARY KEY,
    created_at_ms BIGINT NOT NULL
);

-- One row per session. `latest_seq` is the highest durable event seq; the writer checks every
-- append against it (in the same statement that moves it), so it is also the source of truth for
-- "what comes next". `retained_from_seq` is the first seq still stored.
CREATE TABLE sessions (
    id                    TEXT NOT NULL,
    profile               TEXT NOT NULL DEFAULT 'default',
    title                 TEXT NOT NULL,
    status                TEXT NOT NULL,
    parent_session_id     TEXT,
    kind                  TEXT NOT NULL DEFAULT 'chat',
    history_version       BIGINT NOT NULL DEFAULT 0,
    close_on_disconnect   BOOLEAN NOT NULL DEFAULT FALSE,
    engine_pin            TEXT,
    follow_profile_config BOOLEAN NOT NULL DEFAULT FALSE,
    turn_marker           TEXT,
    created_at_ms         BIGINT NOT NULL,
    updated_at_ms         BIGINT NOT NULL,
    latest_seq            BIGINT NOT NULL DEFAULT 0,
    message_count         BIGINT NOT NULL DEFAULT 0,
    retained_from_seq     BIGINT NOT NULL DEFAULT 1,
    PRIMARY KEY (id)
);
-- session.list: newest first within a profile, keyset-paginated on (created_at_ms, id).
CREATE INDEX sessions_by_profile_created ON sessions (profile, created_at_ms DESC, id DESC);

-- Durable events; (session_id, seq) is the only access path.
CREATE TABLE events (
    session_id TEXT NOT NULL,
    seq        BIGINT NOT NULL,
    type       TEXT NOT NULL,
    payload    TEXT NOT NULL,
    turn_id    TEXT,
    trace_id   TEXT,
    ts_ms      BIGINT NOT NULL,
    PRIMARY KEY (session_id, seq)
);
-- Finds the latest compaction (start of the current history segment) without scanning the
-- session's events. Partial, so ordinary appends pay nothing for it.
CREATE INDEX events_compactions ON events (session_id, seq) WHERE type = 'session.compacted';

-- Handoff work queue (pending -> running -> completed | failed). `ord` is the insertion order
-- SQLite gets from its rowid: claims take the oldest, `handoff.state` the newest, and a clock
-- that steps back must not reorder them.
CREATE TABLE handoffs (
    id            TEXT PRIMARY KEY,
    session_id    TEXT NOT NULL,
    profile       TEXT NOT NULL,
    target        TEXT NOT NULL,
    state         TEXT NOT NULL,
    error         TEXT,
    created_at_ms BIGINT NOT NULL,
    updated_at_ms BIGINT NOT NULL,
    ord           BIGINT GENERATED ALWAYS AS IDENTITY
);
CREATE INDEX handoffs_by_target ON handoffs (profile, target, state, created_at_ms);

-- The writer's guard (postgres/batch.rs): a batch is ONE autocommit statement, and this is how
-- it refuses to commit when a session's latest_seq is not what the writer planned against.
-- Raising aborts the whole statement, so nothing of the batch is written.
CREATE FUNCTION tether_expect_sessions(matched BIGINT, expected BIGINT) RETURNS BIGINT
LANGUAGE plpgsql AS $$
BEGIN
    IF matched <> expected THEN
        RAISE EXCEPTION 'tether: % of % sessions had the latest_seq the batch was planned on',
            matched, expected
            USING ERRCODE = 'TT001';
    END IF;
    RETURN matched;
END
$$;
