-- stead journal, PostgreSQL dialect, schema version 7: operations keyed by their run and
-- position (see the SQLite dialect's migration 10). `id` is the run's `number` times 2^32 plus
-- the operation's position in the run, so a run's rows are one range of the primary key, and
-- reading a run's journal reads that range. The primary key on (run_id, key) was an index of
-- two texts written at every operation; a result finds its row by `id` (the runtime knows the
-- position of each operation it starts) and changes no indexed column, so its UPDATE can stay
-- on the row's page (a heap-only update). Positions are renumbered 1, 2, 3… in their order
-- within each run (equal positions, which no stead wrote, by their time and then their place in
-- the table), so that every id is unique; only their order has ever mattered.
ALTER TABLE stead_operations ADD COLUMN id BIGINT;
UPDATE stead_operations AS operations
SET id = numbered.number * 4294967296 + numbered.renumbered, position = numbered.renumbered
FROM (
    SELECT runs.number, inner_operations.run_id, inner_operations.key, ROW_NUMBER() OVER (
        PARTITION BY inner_operations.run_id
        ORDER BY inner_operations.position, inner_operations.created_at, inner_operations.ctid
    ) AS renumbered
    FROM stead_operations AS inner_operations
    JOIN stead_runs AS runs ON runs.id = inner_operations.run_id
) AS numbered
WHERE operations.run_id = numbered.run_id AND operations.key = numbered.key;
ALTER TABLE stead_operations ALTER COLUMN id SET NOT NULL;
ALTER TABLE stead_operations DROP CONSTRAINT stead_operations_pkey;
ALTER TABLE stead_operations ADD CONSTRAINT stead_operations_pkey PRIMARY KEY (id);
