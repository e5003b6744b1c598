-- A run's session history is the conversation of an earlier completed run, found by its id:
-- messages are built from that run's operations instead of being stored again as blobs and
-- chain nodes. Runs started before this migration keep their chain (history_run is NULL).
ALTER TABLE stead_runs ADD COLUMN history_run TEXT;
