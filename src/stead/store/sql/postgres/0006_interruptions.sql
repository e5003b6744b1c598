-- stead journal, PostgreSQL dialect, schema version 6: a run's executions cut off by a crash in
-- a row without anything new committed between them (see the SQLite dialect's migration 9): an
-- execution that begins where the last one was cut off (its worker died, or its lease ran out
-- and another worker claimed the run) counts one more when the run's journal holds nothing it
-- did not hold at the last such beginning (`interruption_mark`), and starts the count again at
-- one otherwise. At `Limits.max_interruptions` (3 by default) the run goes to needs_attention
-- instead of executing once more. A worker that stops or drains gives its runs back in good
-- order, which resets the count, as a retry does.
ALTER TABLE stead_runs
    ADD COLUMN interruptions INTEGER NOT NULL DEFAULT 0,
    ADD COLUMN interruption_mark BIGINT;
