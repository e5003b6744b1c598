-- stead journal, PostgreSQL dialect, schema version 1.
--
-- The same tables and columns as the SQLite schema at its version 5, so the journal's row SQL
-- (stead.store.rows) is written once for both. JSON and timestamps are text here too (ISO 8601
-- UTC, compared as text), exactly as the rows write them. What differs:
--   stead_meta        no owner columns: many workers share a database. `next_sequence` is the
--                     next event sequence; a transaction that writes events locks this row until
--                     it commits, so sequences are handed out in commit order, without gaps.
--   stead_runs        `number` is an identity column (SQLite's rowid).
--   stead_interactions, stead_inbox   an identity `number` / `id` keeps insertion order.
-- Every statement is applied in one transaction, under an advisory lock on the schema.

CREATE TABLE stead_meta (
    singleton      INTEGER PRIMARY KEY CHECK (singleton = 1),
    schema_version INTEGER NOT NULL,
    next_sequence  BIGINT NOT NULL DEFAULT 1
);

CREATE TABLE stead_runs (
    number            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id                TEXT NOT NULL UNIQUE,
    session_id        TEXT NOT NULL,
    request_id        TEXT NOT NULL,
    kind              TEXT NOT NULL,            -- 'agent'
    agent_id          TEXT NOT NULL,
    version           TEXT NOT NULL,            -- pinned at submit
    status            TEXT NOT NULL,
    input             TEXT NOT NULL,            -- JSON
    submission_digest TEXT NOT NULL,
    history_head      TEXT,
    history_length    INTEGER,
    outcome           TEXT,                     -- JSON, when completed
    error             TEXT,                     -- JSON {reason, ...}
    attention_key     TEXT,
    usage             TEXT NOT NULL DEFAULT '{}',
    created_at        TEXT NOT NULL,
    updated_at        TEXT NOT NULL,
    started_at        TEXT,
    finished_at       TEXT,
    next_attempt_at   TEXT,
    error_kind        TEXT,
    history_run       TEXT,
    UNIQUE (session_id, request_id)
);
CREATE INDEX stead_runs_session ON stead_runs (session_id, number);
CREATE INDEX stead_runs_status ON stead_runs (status, number);
CREATE INDEX stead_runs_agent ON stead_runs (agent_id, number);

CREATE TABLE stead_operations (
    run_id        TEXT NOT NULL REFERENCES stead_runs (id) ON DELETE CASCADE,
    key           TEXT NOT NULL,
    position      INTEGER NOT NULL,
    kind          TEXT NOT NULL,
    status        TEXT NOT NULL,                -- 'started' | 'completed'
    recovery      TEXT NOT NULL,                -- 'safe' | 'idempotent' | 'manual'
    input_hash    TEXT NOT NULL,
    input         TEXT NOT NULL,                -- JSON
    result        TEXT,                         -- JSON, when completed
    attempts      INTEGER NOT NULL DEFAULT 1,
    rerun         INTEGER NOT NULL DEFAULT 0,
    created_at    TEXT NOT NULL,
    updated_at    TEXT NOT NULL,
    copied_from   TEXT,
    attempt_base  INTEGER NOT NULL DEFAULT 0,
    started_seq   BIGINT,                       -- the event of its first start
    completed_seq BIGINT,                       -- the event of its result
    PRIMARY KEY (run_id, key)
);
CREATE INDEX stead_operations_started_seq ON stead_operations (started_seq)
    WHERE started_seq IS NOT NULL;
CREATE INDEX stead_operations_completed_seq ON stead_operations (completed_seq)
    WHERE completed_seq IS NOT NULL;

CREATE TABLE stead_events (
    sequence   BIGINT PRIMARY KEY,
    run_id     TEXT NOT NULL,
    kind       TEXT NOT NULL,
    data       TEXT NOT NULL,                   -- JSON
    created_at TEXT NOT NULL
);
CREATE INDEX stead_events_run ON stead_events (run_id, sequence);

CREATE TABLE stead_blobs (
    hash TEXT PRIMARY KEY,
    body TEXT NOT NULL
);

CREATE TABLE stead_history (
    hash     TEXT PRIMARY KEY,
    previous TEXT,
    message  TEXT NOT NULL
);

CREATE TABLE stead_interactions (
    number       BIGINT GENERATED ALWAYS AS IDENTITY,
    id           TEXT PRIMARY KEY,
    run_id       TEXT NOT NULL REFERENCES stead_runs (id) ON DELETE CASCADE,
    key          TEXT NOT NULL,
    kind         TEXT NOT NULL,                 -- 'approval' | 'question' | 'budget'
    status       TEXT NOT NULL,                 -- 'pending' | 'responded' | 'cancelled'
    tool         TEXT,
    arguments    TEXT NOT NULL DEFAULT 'null',
    digest       TEXT NOT NULL,
    payload      TEXT NOT NULL DEFAULT 'null',
    response     TEXT,
    requested_at TEXT NOT NULL,
    responded_at TEXT,
    UNIQUE (run_id, key)
);
CREATE INDEX stead_interactions_status ON stead_interactions (status, requested_at);

CREATE TABLE stead_inbox (
    id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    command    TEXT NOT NULL,
    status     TEXT NOT NULL,                   -- 'posted' | 'applied' | 'failed'
    answer     TEXT,
    posted_at  TEXT NOT NULL,
    applied_at TEXT
);
CREATE INDEX stead_inbox_status ON stead_inbox (status, id);
