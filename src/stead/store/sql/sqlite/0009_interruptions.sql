-- A run's executions cut off by a crash in a row without anything new committed between them:
-- an execution that begins where the last one was cut off (the process died while the run was
-- `running`) counts one more when the run's journal holds nothing it did not hold at the last
-- such beginning (`interruption_mark`), and starts the count again at one otherwise. At
-- `Limits.max_interruptions` (3 by default) the run goes to needs_attention instead of executing
-- once more: work that kills the process before it commits anything (a crash in a definition's
-- own code, in replay, or in a `safe` operation whose intent is not written yet) does not loop.
-- A runtime that closes or drains gives its runs back in good order, which resets the count, as
-- a retry does.
ALTER TABLE stead_runs ADD COLUMN interruptions INTEGER NOT NULL DEFAULT 0;
ALTER TABLE stead_runs ADD COLUMN interruption_mark INTEGER;
