-- Schedules: when each schedule first ran in this database. A schedule catches up on the slots
-- after its newest run; before it has any, on the slots after this moment — so a slot missed
-- while nothing ran is caught up even if the schedule never ran a slot yet.
CREATE TABLE stead_schedules (
    name  TEXT PRIMARY KEY,
    since TEXT NOT NULL
) WITHOUT ROWID;
