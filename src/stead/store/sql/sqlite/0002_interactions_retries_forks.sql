-- stead journal, SQLite dialect, schema version 2: human in the loop, model back-off, forks.
--
--   stead_interactions  something a person must answer before a run continues: a tool approval
--                       (key approval:<turn>:<call_id>), a question (ask_user) or a budget
--                       breach (budget:<turn>). The id is stable; the response is recorded once.
--   stead_runs.next_attempt_at   when a run in retry_wait may call its model again.
--   stead_runs.error_kind        a typed reason for failed / needs_attention runs.
--   stead_operations.copied_from  the run a fork copied this completed operation from.
--   stead_operations.attempt_base attempts made before the last retry(): the back-off budget
--                                 counts from there, while `attempts` keeps the total.

CREATE TABLE stead_interactions (
    id           TEXT PRIMARY KEY,
    run_id       TEXT NOT NULL REFERENCES stead_runs (id) ON DELETE CASCADE,
    key          TEXT NOT NULL,
    kind         TEXT NOT NULL,                 -- 'approval' | 'question' | 'budget'
    status       TEXT NOT NULL,                 -- 'pending' | 'resolved' | 'cancelled'
    tool         TEXT,
    arguments    TEXT NOT NULL DEFAULT 'null',  -- JSON, canonical
    digest       TEXT NOT NULL,                 -- sha256 of the canonical arguments
    payload      TEXT NOT NULL DEFAULT 'null',  -- JSON
    response     TEXT,                          -- JSON, once resolved
    requested_at TEXT NOT NULL,
    resolved_at  TEXT,
    UNIQUE (run_id, key)
);
CREATE INDEX stead_interactions_status ON stead_interactions (status, requested_at);

ALTER TABLE stead_runs ADD COLUMN next_attempt_at TEXT;
ALTER TABLE stead_runs ADD COLUMN error_kind TEXT;
ALTER TABLE stead_operations ADD COLUMN copied_from TEXT;
ALTER TABLE stead_operations ADD COLUMN attempt_base INTEGER NOT NULL DEFAULT 0;
