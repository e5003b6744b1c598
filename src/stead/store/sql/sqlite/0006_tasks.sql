-- Durable tasks: owned child runs, signals and timers.
--
-- `parent_id` names the run that owns a child run (a task's run_agent / run_task, a graph's
-- nodes): cancelling the parent cancels it, and its end wakes the parent.
-- A `waiting` run with `next_attempt_at` set is a timer (a sleep, a signal wait's timeout): it
-- becomes runnable when that time comes, through the scheduler's one wake-up time.
-- `stead_signals` journals each signal on arrival, deduplicated by (run, request id); the waits
-- of a run consume the signals of a name in the order they arrived (`number`, per name; the
-- writer numbers them one at a time, and a run's signals are read by its key's prefix).
ALTER TABLE stead_runs ADD COLUMN parent_id TEXT;
CREATE INDEX stead_runs_parent ON stead_runs (parent_id) WHERE parent_id IS NOT NULL;
CREATE INDEX stead_runs_timers ON stead_runs (next_attempt_at)
    WHERE status = 'waiting' AND next_attempt_at IS NOT NULL;

CREATE TABLE stead_signals (
    run_id     TEXT NOT NULL REFERENCES stead_runs (id) ON DELETE CASCADE,
    request_id TEXT NOT NULL,
    name       TEXT NOT NULL,
    number     INTEGER NOT NULL,
    value      TEXT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (run_id, request_id)
) WITHOUT ROWID;
