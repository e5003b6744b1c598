-- The sequence of an operation's result event (`completed_seq`) is no longer indexed: the index
-- was written at every result and read only to find the highest sequence handed out, which an
-- owner opening the file after a crash continues from. That highest sequence is now found from
-- three places that cost nothing to keep: the event rows (their primary key), the first-start
-- sequences (`started_seq`, still indexed) and `stead_meta.completed_through`, which a
-- transaction whose last sequence is an operation's result raises to it in the same commit.
ALTER TABLE stead_meta ADD COLUMN completed_through INTEGER NOT NULL DEFAULT 0;
UPDATE stead_meta SET completed_through =
    COALESCE((SELECT MAX(completed_seq) FROM stead_operations), 0);
DROP INDEX stead_operations_completed_seq;
