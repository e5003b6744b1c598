-- stead journal, PostgreSQL dialect, schema version 2: many workers on one schema.
--
-- A run is executed by the worker that holds its claim. Claiming a runnable run (FOR UPDATE
-- SKIP LOCKED) adds one to `claim_epoch`, names the worker in `claimed_by` and sets
-- `lease_until` (server time); the worker extends the lease by heartbeat and with every journal
-- write, each of which is fenced by the epoch it claimed. A run that leaves `running` (it
-- completed, parked, stopped or was cancelled) drops its claim and gets a new epoch, so nothing
-- its former worker still sends lands. An expired lease is claimed again by any worker.

ALTER TABLE stead_runs
    ADD COLUMN claim_epoch BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN claimed_by  TEXT,
    ADD COLUMN lease_until TIMESTAMPTZ;

-- The runs a worker may claim: a small partial index, however long the history.
CREATE INDEX stead_runs_runnable ON stead_runs (number)
    WHERE status IN ('queued', 'pending', 'running', 'retry_wait');

-- The agent versions live runtimes declared, so a client with no registry of its own pins a
-- submission to the version registered last (as a runtime would).
CREATE TABLE stead_agents (
    agent_id  TEXT NOT NULL,
    version   TEXT NOT NULL,
    latest_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (agent_id, version)
);
