-- Operations are keyed by their run and position: `id` is the run's `number` times 2^32 plus the
-- operation's position in the run, so the rows of a run are one range of the table's own key,
-- stored together and in order, and reading a run's journal reads that range. The primary key
-- on (run_id, key) was an index written at every operation; the runtime knows the position of
-- each operation it starts, so a result (or another attempt) finds its row by `id`, and a key
-- named by a person (resolve, retry) is looked up within its run's range. A run's keys are
-- unique because the runtime replays a journaled key instead of writing it again.
--
-- The table is rebuilt. Positions are renumbered 1, 2, 3… in their order within each run
-- (equal positions, which no stead wrote, by their time and then their insertion order), so
-- that every id is unique; only their order has ever mattered.
CREATE TABLE stead_operations_by_run (
    id            INTEGER PRIMARY KEY,          -- stead_runs.number * 2^32 + position
    run_id        TEXT NOT NULL REFERENCES stead_runs (id) ON DELETE CASCADE,
    key           TEXT NOT NULL,
    position      INTEGER NOT NULL,             -- order of first start within the run, from 1
    kind          TEXT NOT NULL,                -- 'model' | 'tool' | ...
    status        TEXT NOT NULL,                -- 'started' | 'completed'
    recovery      TEXT NOT NULL,                -- 'safe' | 'idempotent' | 'manual', fixed at intent
    input_hash    TEXT NOT NULL,
    input         TEXT NOT NULL,                -- JSON (large parts by blob reference)
    result        TEXT,                         -- JSON, when completed
    attempts      INTEGER NOT NULL DEFAULT 1,
    rerun         INTEGER NOT NULL DEFAULT 0,   -- 1: a person ordered an interrupted manual op re-run
    created_at    TEXT NOT NULL,
    updated_at    TEXT NOT NULL,
    copied_from   TEXT,
    attempt_base  INTEGER NOT NULL DEFAULT 0,
    started_seq   INTEGER,                      -- the event of its first start
    completed_seq INTEGER                       -- the event of its result
);
INSERT INTO stead_operations_by_run (
    id, run_id, key, position, kind, status, recovery, input_hash, input, result, attempts,
    rerun, created_at, updated_at, copied_from, attempt_base, started_seq, completed_seq
)
SELECT numbered.number * 4294967296 + numbered.renumbered, numbered.run_id, numbered.key,
    numbered.renumbered, numbered.kind, numbered.status, numbered.recovery, numbered.input_hash,
    numbered.input, numbered.result, numbered.attempts, numbered.rerun, numbered.created_at,
    numbered.updated_at, numbered.copied_from, numbered.attempt_base, numbered.started_seq,
    numbered.completed_seq
FROM (
    SELECT runs.number, ROW_NUMBER() OVER (
        PARTITION BY operations.run_id
        ORDER BY operations.position, operations.created_at, operations.rowid
    ) AS renumbered, operations.*
    FROM stead_operations AS operations JOIN stead_runs AS runs ON runs.id = operations.run_id
) AS numbered;
DROP TABLE stead_operations;
ALTER TABLE stead_operations_by_run RENAME TO stead_operations;
CREATE INDEX stead_operations_started_seq ON stead_operations (started_seq)
    WHERE started_seq IS NOT NULL;
