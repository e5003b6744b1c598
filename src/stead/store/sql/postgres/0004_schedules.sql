-- stead journal, PostgreSQL dialect, schema version 4: when each schedule first ran in this
-- schema. A schedule catches up on the slots after its newest run; before it has any, on the
-- slots after this moment — so a slot missed while no worker ran is caught up even if the
-- schedule never ran a slot yet.
CREATE TABLE stead_schedules (
    name  TEXT PRIMARY KEY,
    since TEXT NOT NULL
);
