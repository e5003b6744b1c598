-- The events of an operation are announced from its row: `started_seq` is the sequence of the
-- event of its first start (model_started, tool_started) and `completed_seq` that of its result
-- (model_completed, tool_completed). Their data is built from the row (stead.journal.events), so
-- a model response or a tool result is not copied into an event row. Later attempts, results
-- supplied by hand and every other event are rows of stead_events as before; operations written
-- before this migration keep their event rows (both sequences NULL).
ALTER TABLE stead_operations ADD COLUMN started_seq INTEGER;
ALTER TABLE stead_operations ADD COLUMN completed_seq INTEGER;
CREATE INDEX stead_operations_started_seq ON stead_operations (started_seq)
    WHERE started_seq IS NOT NULL;
CREATE INDEX stead_operations_completed_seq ON stead_operations (completed_seq)
    WHERE completed_seq IS NOT NULL;
