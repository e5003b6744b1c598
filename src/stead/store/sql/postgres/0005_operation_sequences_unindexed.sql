-- stead journal, PostgreSQL dialect, schema version 5: the sequences an operation row announces
-- its events with (`started_seq`, `completed_seq`) are no longer indexed. Sequences come from
-- the counter in stead_meta, so nothing needs their maximum; a run's events are read through
-- the run's rows (the primary key). The two indexes were written at every operation and every
-- result — and one on `completed_seq` kept a result's UPDATE from being a heap-only update, so
-- it wrote the primary key's index again too — to serve only a read of the log across runs,
-- which now reads the table.
DROP INDEX IF EXISTS stead_operations_started_seq;
DROP INDEX IF EXISTS stead_operations_completed_seq;
