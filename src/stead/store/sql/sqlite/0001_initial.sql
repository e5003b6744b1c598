-- stead journal, SQLite dialect, schema version 1.
--
-- Architecture in one page:
--   stead_meta        one row: schema version, the live owner (token, pid, host, boot id) and the
--                     event-sequence reservation. Every write transaction checks owner_token, so a
--                     replaced owner can commit nothing.
--   stead_runs        one durable execution each. (session_id, request_id) is the caller's
--                     idempotency key. `number` orders runs: FIFO within a session.
--   stead_operations  the journal proper: one row per durable operation of a run, keyed by a
--                     deterministic key (model:<turn>, tool:<turn>:<call_id>). An operation is
--                     written `started` (the intent, with its recovery policy) before it runs and
--                     `completed` (the result) after. A completed result is never run again.
--   stead_events      append-only progress, `sequence` is the global cursor subscribers resume from.
--   stead_blobs       content-addressed JSON (messages, instructions+tools), stored once.
--   stead_history     a persistent linked list of message blobs: a conversation prefix is a
--                     (head, length) pair, so each message is stored once however many model
--                     requests include it.

CREATE TABLE stead_meta (
    singleton                 INTEGER PRIMARY KEY CHECK (singleton = 1),
    schema_version            INTEGER NOT NULL,
    owner_token               TEXT,
    owner_pid                 INTEGER,
    owner_host                TEXT,
    owner_boot_id             TEXT,
    owner_since               TEXT,
    sequence_reserved_through INTEGER NOT NULL DEFAULT 0
);

CREATE TABLE stead_runs (
    number            INTEGER PRIMARY KEY,
    id                TEXT NOT NULL UNIQUE,
    session_id        TEXT NOT NULL,
    request_id        TEXT NOT NULL,
    kind              TEXT NOT NULL,            -- 'agent'
    target            TEXT NOT NULL,            -- agent id
    version           TEXT NOT NULL,            -- pinned at submit
    status            TEXT NOT NULL,
    input             TEXT NOT NULL,            -- JSON
    submission_digest TEXT NOT NULL,            -- canonical digest of what was submitted
    history_head      TEXT,                     -- session history captured when the run starts
    history_length    INTEGER,
    outcome           TEXT,                     -- JSON, when completed
    error             TEXT,                     -- JSON {reason, ...} when failed/cancelled/needs_attention
    blocked_operation TEXT,                     -- key, when needs_attention names an operation
    usage             TEXT NOT NULL DEFAULT '{}',
    created_at        TEXT NOT NULL,
    updated_at        TEXT NOT NULL,
    started_at        TEXT,
    finished_at       TEXT,
    UNIQUE (session_id, request_id)
);
CREATE INDEX stead_runs_session ON stead_runs (session_id, number);
CREATE INDEX stead_runs_status ON stead_runs (status, number);
CREATE INDEX stead_runs_target ON stead_runs (target, number);

CREATE TABLE stead_operations (
    run_id      TEXT NOT NULL REFERENCES stead_runs (id) ON DELETE CASCADE,
    key         TEXT NOT NULL,
    position    INTEGER NOT NULL,               -- order of first start within the run
    kind        TEXT NOT NULL,                  -- 'model' | 'tool'
    status      TEXT NOT NULL,                  -- 'started' | 'completed'
    recovery    TEXT NOT NULL,                  -- 'safe' | 'idempotent' | 'manual', fixed at intent
    input_hash  TEXT NOT NULL,
    input       TEXT NOT NULL,                  -- JSON (large parts by blob reference)
    result      TEXT,                           -- JSON, when completed
    attempts    INTEGER NOT NULL DEFAULT 1,
    rerun       INTEGER NOT NULL DEFAULT 0,     -- 1: a person ordered an interrupted manual op re-run
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL,
    PRIMARY KEY (run_id, key)
);

CREATE TABLE stead_events (
    sequence   INTEGER PRIMARY KEY,
    run_id     TEXT NOT NULL,
    type       TEXT NOT NULL,
    data       TEXT NOT NULL,                   -- JSON
    created_at TEXT NOT NULL
);
CREATE INDEX stead_events_run ON stead_events (run_id, sequence);

CREATE TABLE stead_blobs (
    hash TEXT PRIMARY KEY,                      -- sha256 of body
    body TEXT NOT NULL
);

CREATE TABLE stead_history (
    hash     TEXT PRIMARY KEY,                  -- sha256(previous || ':' || message)
    previous TEXT,                              -- NULL for the first message
    message  TEXT NOT NULL                      -- stead_blobs.hash
) WITHOUT ROWID;
