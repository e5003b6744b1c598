"""Operation rows keyed by their run and position (SQLite migration 10, PostgreSQL migration 7):
an older journal is rebuilt into that key with its order kept, a run's rows are read as a range
of the key, and a result finds its row by that key."""

from __future__ import annotations

import asyncio
import json
import signal
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

import stead
from stead.testing import ScriptedModel

from .._journal import schema_at
from .test_postgres import POSTGRES_URL, needs_postgres

SPAN = 1 << 32

#: Two runs of an older journal, written out of order and with the positions older stead could
#: leave: a gap (3 after 1), a position twice (3), a run's rows inserted last position first.
#: (run number, key, position, status) in insertion order.
OLD_OPERATIONS = [
    (3, "model:1", 1, "completed"),
    (7, "model:1", 2, "completed"),
    (3, "tool:1:a", 3, "completed"),
    (7, "tool:1:c", 1, "completed"),
    (3, "model:2", 3, "completed"),
    (3, "tool:2:b", 9, "started"),
]
#: What the migration makes of them: (id, run number, key, position), in key order.
MIGRATED = [
    (3 * SPAN + 1, 3, "model:1", 1),
    (3 * SPAN + 2, 3, "tool:1:a", 2),
    (3 * SPAN + 3, 3, "model:2", 3),
    (3 * SPAN + 4, 3, "tool:2:b", 4),
    (7 * SPAN + 1, 7, "tool:1:c", 1),
    (7 * SPAN + 2, 7, "model:1", 2),
]

#: The rows as :data:`MIGRATED` lists them.
MIGRATED_SQL = (
    "SELECT o.id, r.number, o.key, o.position FROM stead_operations AS o "
    "JOIN stead_runs AS r ON r.id = o.run_id ORDER BY o.id"
)


def _run_row(number: int) -> tuple[Any, ...]:
    return (
        number,
        f"run-{number}",
        f"s{number}",
        "r",
        "agent",
        "a",
        "1",
        "needs_attention",
        "{}",
        "d",
        "2026-01-01",
        "2026-01-01",
    )


def _operation_row(number: int, key: str, position: int, status: str) -> tuple[Any, ...]:
    result = None if status == "started" else "{}"
    return (
        f"run-{number}",
        key,
        position,
        key.split(":")[0],
        status,
        "manual",
        "h",
        "{}",
        result,
        "2026-01-01",
        "2026-01-01",
    )


RUN_INSERT = (
    "INSERT INTO stead_runs (number, id, session_id, request_id, kind, agent_id, version, "
    "status, input, submission_digest, created_at, updated_at) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
OPERATION_INSERT = (
    "INSERT INTO stead_operations (run_id, key, position, kind, status, recovery, input_hash, "
    "input, result, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


async def _acquire(store: Any) -> Any:
    loop = asyncio.get_running_loop()
    await asyncio.to_thread(store.acquire, loop, lambda events: None, lambda error: None)
    return store


async def _check_reads(store: Any) -> None:
    """What a run reads of its journal after the migration: its own rows, in order."""
    keys = await store.read(
        lambda tx: {n: [op.key for op in tx.operations(f"run-{n}")] for n in (3, 7)}
    )
    assert keys == {
        3: ["model:1", "tool:1:a", "model:2", "tool:2:b"],
        7: ["tool:1:c", "model:1"],
    }
    found = await store.read(lambda tx: tx.get_operation("run-7", "model:1"))
    assert (found.position, found.status) == (2, "completed")
    assert await store.read(lambda tx: tx.get_operation("run-7", "tool:2:b")) is None


def _old_sqlite_file(path: Path) -> None:
    conn = sqlite3.connect(path)
    schema_at(conn, 9)
    conn.executemany(RUN_INSERT, [_run_row(3), _run_row(7)])
    conn.executemany(OPERATION_INSERT, [_operation_row(*row) for row in OLD_OPERATIONS])
    conn.commit()
    conn.close()


async def test_an_older_sqlite_journal_is_keyed_by_run_and_position(tmp_path: Path) -> None:
    db = tmp_path / "v9.db"
    _old_sqlite_file(db)
    store = await _acquire(stead.SqliteStore(db))
    try:
        await _check_reads(store)
    finally:
        await store.aclose()
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute(MIGRATED_SQL).fetchall()
        assert rows == MIGRATED
        # a row at a position its run holds already is refused
        with pytest.raises(sqlite3.IntegrityError, match=r"stead_operations\.id"):
            conn.execute(
                "INSERT INTO stead_operations (id, run_id, key, position, kind, status, "
                "recovery, input_hash, input, created_at, updated_at) VALUES (?, 'run-3', "
                "'tool:3:d', 4, 'tool', 'started', 'manual', 'h', '{}', 'now', 'now')",
                (3 * SPAN + 4,),
            )
    finally:
        conn.close()


#: A process that opens a store and kills itself in the rebuild of migration 10, right after the
#: old table is dropped (uncommitted): the crash a long migration of a large file risks most.
_DIES_IN_MIGRATION = """
import asyncio, os, signal, sys
import stead
from stead.store import migrate
from stead.store.sqlite import store


def dying(conn, version):
    for number, script in migrate.migrations():
        if number > version:
            for statement in migrate.statements(script):
                conn.execute(statement)
                if statement.startswith("DROP TABLE stead_operations"):
                    os.kill(os.getpid(), signal.SIGKILL)


store.migrate = dying


async def main():
    opened = stead.SqliteStore(sys.argv[1])
    loop = asyncio.get_running_loop()
    await asyncio.to_thread(opened.acquire, loop, lambda events: None, lambda error: None)


asyncio.run(main())
"""


async def test_a_process_killed_in_the_rebuild_leaves_the_old_journal_whole(
    tmp_path: Path,
) -> None:
    """The rebuild is one transaction: killed half way (the old table dropped, its copy not
    committed, the log holding pages of both), the file still holds the old journal, and the
    next open rebuilds it in full."""
    db = tmp_path / "v9.db"
    _old_sqlite_file(db)
    conn = sqlite3.connect(db)
    # More than SQLite's page cache holds: the rebuild spills pages to the log before it commits.
    filler = json.dumps("x" * 1000)
    conn.executemany(
        OPERATION_INSERT,
        [
            (
                "run-7",
                f"tool:{n}:f",
                10 + n,
                "tool",
                "completed",
                "safe",
                "h",
                filler,
                filler,
                "2026-01-01",
                "2026-01-01",
            )
            for n in range(3000)
        ],
    )
    conn.commit()
    conn.close()
    child = subprocess.run(
        [sys.executable, "-c", _DIES_IN_MIGRATION, str(db)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr
    conn = sqlite3.connect(db)
    try:
        version = conn.execute("SELECT schema_version FROM stead_meta").fetchone()[0]
        columns = [row[1] for row in conn.execute("PRAGMA table_info(stead_operations)")]
        count = conn.execute("SELECT COUNT(*) FROM stead_operations").fetchone()[0]
    finally:
        conn.close()
    assert (version, "id" in columns, count) == (9, False, len(OLD_OPERATIONS) + 3000)
    store = await _acquire(stead.SqliteStore(db))
    try:
        keys = await store.read(lambda tx: [op.key for op in tx.operations("run-7")])
    finally:
        await store.aclose()
    assert keys[:2] == ["tool:1:c", "model:1"] and len(keys) == 3002
    assert keys[2:4] == ["tool:0:f", "tool:1:f"]


async def test_every_statement_a_run_makes_on_its_operations_searches_by_a_key(
    tmp_path: Path,
) -> None:
    """No statement of a run, a fork, a snapshot, a read of a run's events or what a person's
    resolve, retry or approval writes reads the operations of other runs: each reads the run's
    range of the key, or one row by it (not a scan of the table, nor the index of every run's
    start sequences)."""

    @stead.tool(recovery="manual")
    def pay(amount: int) -> str:
        return f"paid {amount}"

    script: list[Any] = [
        [stead.ToolCall(name="pay", arguments={"amount": 5}, id="c1")],
        [stead.ToolCall(name="pay", arguments={"amount": 6}, id="c2")],
        "done",
    ]
    agent = stead.Agent(id="a", version="1", model=ScriptedModel(script * 2), tools=[pay])
    db = tmp_path / "plans.db"
    store = stead.SqliteStore(db)
    seen: list[str] = []
    async with await stead.App(agents=[agent]).open(store) as runtime:
        store._conn.set_trace_callback(seen.append)  # type: ignore[union-attr]
        run = await runtime.submit("a", session_id="s", request_id="r", prompt="go")
        assert (await run.result()).output == "done"
        fork = await runtime.fork(run.id, before="model:2")
        assert (await fork.result()).output == "done"
        await run.snapshot()
        assert [event.kind async for event in fork.events()][:1] == ["submitted"]

        def by_hand(tx: Any) -> None:
            """The row operations a person's commands make (they match no row here)."""
            number = tx.get_run(run.id).number
            tx.get_operation(run.id, "tool:1:c1")
            tx.restart_operation(run.id, "tool:1:c1", 2, run_number=number, position=2)
            tx.complete_operation(run.id, "tool:1:c1", {}, run_number=number, position=2)
            tx.order_rerun(run.id, "tool:1:c1")
            tx.reset_attempts(run.id)
            tx.delete_operation(run.id, "tool:1:c1")

        await store.transact(by_hand, durability="commit")
        store._conn.set_trace_callback(None)  # type: ignore[union-attr]
    touching = {s for s in seen if "stead_operations" in s and not s.startswith("INSERT INTO")}
    assert touching
    conn = sqlite3.connect(db)
    try:
        for statement in sorted(touching):
            plan = [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {statement}")]
            steps = [step for step in plan if "stead_operations " in f"{step} "]
            assert steps, (statement, plan)
            assert all(
                step.startswith("SEARCH stead_operations USING ") and "INTEGER PRIMARY KEY" in step
                for step in steps
            ), (statement, plan)
    finally:
        conn.close()


@needs_postgres
async def test_an_older_postgres_journal_is_keyed_by_run_and_position() -> None:
    from stead.store.postgres import PostgresStore

    schema = f"pgkey_{uuid.uuid4().hex[:12]}"
    store = PostgresStore(str(POSTGRES_URL), schema=schema)
    conn = store.connect()
    try:
        conn.execute(f'CREATE SCHEMA "{schema}"')
        conn.execute(f'SET search_path TO "{schema}"')
        schema_at(conn, 6, "postgres")
        with conn.cursor() as cursor:
            cursor.executemany(
                RUN_INSERT.replace("VALUES", "OVERRIDING SYSTEM VALUE VALUES").replace("?", "%s"),
                [_run_row(3), _run_row(7)],
            )
            cursor.executemany(
                OPERATION_INSERT.replace("?", "%s"),
                [_operation_row(*row) for row in OLD_OPERATIONS],
            )
    finally:
        conn.close()
    try:
        await _acquire(store)
        try:
            await _check_reads(store)
        finally:
            await store.aclose()
        conn = store.connect()
        try:
            rows = conn.execute(MIGRATED_SQL).fetchall()
            assert rows == MIGRATED
            version = conn.execute("SELECT schema_version FROM stead_meta").fetchone()[0]
            assert version == 7
        finally:
            conn.close()
    finally:
        conn = store.connect()
        try:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        finally:
            conn.close()


async def test_a_key_the_journal_holds_twice_stops_the_run_before_it_replays(
    tmp_path: Path,
) -> None:
    """A run's keys are unique because the runtime replays a journaled key instead of writing
    it again, not because the store refuses a second row: a journal that holds one twice (a
    defect, or a file changed outside stead) stops the run when it begins, naming the key,
    instead of replaying either result."""

    @stead.tool(recovery="manual", approval=True)
    def pay(amount: int) -> str:
        return f"paid {amount}"

    script: list[Any] = [[stead.ToolCall(name="pay", arguments={"amount": 5}, id="c1")], "done"]
    agent = stead.Agent(id="a", version="1", model=ScriptedModel(script), tools=[pay])
    app = stead.App(agents=[agent])
    db = tmp_path / "twice.db"
    async with await app.open(stead.SqliteStore(db)) as runtime:
        run = await runtime.submit("a", session_id="s", request_id="r", prompt="go")
        while (await run.status()) is not stead.RunStatus.WAITING:
            await asyncio.sleep(0.01)
        (interaction,) = await run.interactions()
    conn = sqlite3.connect(db)
    try:
        (number,) = conn.execute("SELECT number FROM stead_runs WHERE id = ?", (run.id,)).fetchone()
        conn.execute(
            "INSERT INTO stead_operations (id, run_id, key, position, kind, status, recovery, "
            "input_hash, input, result, created_at, updated_at) SELECT ?, run_id, key, 99, kind, "
            "status, recovery, input_hash, input, result, created_at, updated_at "
            "FROM stead_operations WHERE run_id = ? AND key = 'model:1'",
            (number * SPAN + 99, run.id),
        )
        conn.commit()
    finally:
        conn.close()
    async with await app.open(stead.SqliteStore(db)) as runtime:
        await runtime.get_run(run.id).respond(interaction.interaction_id, stead.Approve())
        handle = runtime.get_run(run.id)
        for _ in range(1000):  # up to 10 s
            if (await handle.status()) in (
                stead.RunStatus.NEEDS_ATTENTION,
                stead.RunStatus.COMPLETED,
                stead.RunStatus.FAILED,
            ):
                break
            await asyncio.sleep(0.01)
        record = await handle.run()
    assert record.status is stead.RunStatus.NEEDS_ATTENTION
    assert record.attention_key == "model:1"
    assert record.error is not None
    assert "holds operation model:1 twice" in record.error["reason"]
