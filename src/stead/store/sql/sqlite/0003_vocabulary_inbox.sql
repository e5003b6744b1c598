-- stead journal, SQLite dialect, schema version 3: one vocabulary, and an inbox.
--
--   One word per concept (DESIGN §2): a run's definition is its agent_id (not `target`), a
--   needs_attention run names its operation by attention_key (not `blocked_operation`), every
--   record says what it is by `kind` (events too), and a person *responds* to an interaction
--   (status `responded`, event `interaction_responded`); *resolve* is only for supplying an
--   operation's result by hand.
--
--   stead_inbox   commands (submit, respond, resolve, retry, cancel, fork) posted by other
--                 processes — the CLI, a stead.Client — to the live owner of this file, which
--                 applies each with the same transition it uses in-process and records the
--                 answer. A command left by an owner that died is applied by the next one.

ALTER TABLE stead_runs RENAME COLUMN target TO agent_id;
ALTER TABLE stead_runs RENAME COLUMN blocked_operation TO attention_key;
DROP INDEX stead_runs_target;
CREATE INDEX stead_runs_agent ON stead_runs (agent_id, number);
UPDATE stead_runs SET error_kind = 'needs_attention' WHERE error_kind = 'blocked';
UPDATE stead_runs SET error = json_set(error, '$.kind', 'needs_attention')
    WHERE error IS NOT NULL AND json_extract(error, '$.kind') = 'blocked';

ALTER TABLE stead_events RENAME COLUMN type TO kind;
UPDATE stead_events SET kind = 'interaction_responded' WHERE kind = 'interaction_resolved';
UPDATE stead_events SET data = json_set(data, '$.kind', 'needs_attention')
    WHERE kind = 'status' AND json_extract(data, '$.kind') = 'blocked';

ALTER TABLE stead_interactions RENAME COLUMN resolved_at TO responded_at;
UPDATE stead_interactions SET status = 'responded' WHERE status = 'resolved';

CREATE TABLE stead_inbox (
    id         INTEGER PRIMARY KEY,
    command    TEXT NOT NULL,                   -- JSON: one journal command
    status     TEXT NOT NULL,                   -- 'posted' | 'applied' | 'failed'
    answer     TEXT,                            -- JSON: the value, or the error the caller gets
    posted_at  TEXT NOT NULL,
    applied_at TEXT
);
CREATE INDEX stead_inbox_status ON stead_inbox (status, id);
