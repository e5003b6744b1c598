"""The SQLite store: schema, ownership, fencing, durability modes, growth."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import socket
import sqlite3
import subprocess
import sys
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import stead
from stead.store.sqlite import SCHEMA_VERSION
from stead.testing import ScriptedModel

from ._journal import journal_events, schema_at, submission
from .conftest import paused_app


def _app(turns: list[object] | None = None) -> stead.App:
    model = ScriptedModel(turns or ["ok"])  # type: ignore[arg-type]
    return stead.App(agents=[stead.Agent(id="a", version="1", model=model)])


async def test_schema_is_created_with_a_version_row_and_wal(db: str) -> None:
    async with await _app().open(stead.SqliteStore(db)):
        pass
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("SELECT schema_version, owner_token FROM stead_meta").fetchone() == (
        SCHEMA_VERSION,
        None,
    )
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"stead_runs", "stead_operations", "stead_events", "stead_blobs"} <= tables
    conn.close()


async def test_a_new_file_gets_1_kb_pages_and_an_existing_one_keeps_its_own(
    tmp_path: object,
) -> None:
    """Page size is chosen when a file is created (see PAGE_SIZE); a file made with 4 KB pages
    (by an earlier version, say) keeps them and runs as before."""
    from pathlib import Path

    folder = Path(str(tmp_path))
    async with await _app().open(stead.SqliteStore(folder / "new.db")):
        pass
    older = folder / "older.db"
    conn = sqlite3.connect(older)
    conn.execute("PRAGMA page_size = 4096")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.close()
    async with await _app().open(stead.SqliteStore(older)) as runtime:
        run = await runtime.submit("a", session_id="s", request_id="r", prompt="go")
        assert (await run.result()).output == "ok"
    for path, size in ((folder / "new.db", 1024), (older, 4096)):
        conn = sqlite3.connect(path)
        assert conn.execute("PRAGMA page_size").fetchone()[0] == size, path
        conn.close()


async def test_a_database_newer_than_the_library_is_refused(db: str) -> None:
    async with await _app().open(stead.SqliteStore(db)):
        pass
    conn = sqlite3.connect(db)
    conn.execute("UPDATE stead_meta SET schema_version = ?", (SCHEMA_VERSION + 1,))
    conn.commit()
    conn.close()
    with pytest.raises(
        stead.SchemaVersionError,
        match=f"schema version {SCHEMA_VERSION + 1}, newer than this stead reads",
    ):
        await _app().open(stead.SqliteStore(db))


async def test_a_foreign_sqlite_file_is_refused(db: str) -> None:
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE mine (x)")
    conn.close()
    with pytest.raises(stead.StorageError, match="holds other tables"):
        await _app().open(stead.SqliteStore(db))


async def test_a_second_live_owner_is_refused_naming_pid_and_host(db: str) -> None:
    async with await _app().open(stead.SqliteStore(db)):
        with pytest.raises(stead.OwnershipError) as caught:
            await _app().open(stead.SqliteStore(db))
    assert f"pid {os.getpid()}" in str(caught.value)
    assert socket.gethostname() in str(caught.value)
    # after close, the file can be opened again
    async with await _app().open(stead.SqliteStore(db)):
        pass


async def test_another_process_is_refused_while_the_owner_lives(db: str) -> None:
    async with await _app().open(stead.SqliteStore(db)):
        code = (
            "import asyncio, stead\n"
            "from stead.testing import ScriptedModel\n"
            "app = stead.App(agents=[stead.Agent(id='a', version='1', "
            "model=ScriptedModel(['x']))])\n"
            "try:\n"
            f"    asyncio.run(app.open(stead.SqliteStore({db!r})))\n"
            "except stead.OwnershipError as e:\n"
            "    print('refused:', e)\n"
        )
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
        )
    assert out.stdout.startswith("refused:"), out.stderr
    assert f"pid {os.getpid()}" in out.stdout


async def test_an_owner_whose_pid_is_gone_is_replaced(db: str) -> None:
    async with await _app().open(stead.SqliteStore(db)):
        pass
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    conn = sqlite3.connect(db)
    conn.execute(
        "UPDATE stead_meta SET owner_token = 't', owner_pid = ?, owner_host = ?",
        (dead.pid, socket.gethostname()),
    )
    conn.commit()
    conn.close()
    store = stead.SqliteStore(db)
    async with await _app().open(store):
        assert store.open_info is not None and store.open_info.previous_owner_crashed


async def _store_with_a_result_committed_last(db: str) -> int:
    """A run whose last commit ends with an operation's result (its sequence is the highest
    handed out); returns that sequence. The store is closed as after a crash: its owner row
    still names an owner (a pid that is gone, on this host and boot), with a reservation far
    above what was written, which an owner on the same boot does not continue from."""
    from stead._ids import boot_id
    from stead.journal import transitions

    store = stead.SqliteStore(db)
    loop = asyncio.get_running_loop()
    await asyncio.to_thread(store.acquire, loop, lambda events: None, lambda error: None)
    await store.transact(submission("run-1"), durability="barrier")
    await store.transact(
        functools.partial(
            transitions.start_operation,
            run_id="run-1",
            run_number=1,
            key="tool:1:c1",
            position=1,
            kind="tool",
            recovery="manual",
            input_hash="h",
            input={"tool": "pay", "call_id": "c1"},
            writes=None,
        ),
        durability="barrier",
    )
    await store.transact(
        functools.partial(
            transitions.finish_operation,
            run_id="run-1",
            run_number=1,
            key="tool:1:c1",
            position=1,
            kind="tool",
            input={"tool": "pay", "call_id": "c1"},
            result={"output": 1},
            writes=None,
        ),
        durability="barrier",
    )
    await store.aclose()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    conn = sqlite3.connect(db)
    (completed,) = conn.execute("SELECT completed_seq FROM stead_operations").fetchone()
    written = conn.execute(
        "SELECT MAX(sequence) FROM stead_events UNION ALL SELECT MAX(started_seq) "
        "FROM stead_operations"
    ).fetchall()
    assert all(row[0] < completed for row in written)  # the result's is the highest
    conn.execute(
        "UPDATE stead_meta SET owner_token = 't', owner_pid = ?, owner_host = ?, "
        "owner_boot_id = ?, sequence_reserved_through = 1000000",
        (dead.pid, socket.gethostname(), boot_id()),
    )
    conn.commit()
    conn.close()
    return int(completed)


async def test_after_a_crash_the_sequence_continues_above_a_result_committed_last(
    db: str,
) -> None:
    """The sequence of an operation's result is not indexed: a commit whose last sequence is
    one keeps it in ``stead_meta.completed_through``, so the next owner neither reuses it nor
    leaves a gap."""
    completed = await _store_with_a_result_committed_last(db)
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT completed_through FROM stead_meta").fetchone() == (completed,)
    conn.close()
    store = stead.SqliteStore(db)
    async with await _app().open(store) as runtime:
        assert store.open_info is not None and store.open_info.previous_owner_crashed
        assert store.open_info.next_sequence == completed + 1
        run = await runtime.submit("a", session_id="s2", request_id="r", prompt="go")
        await run.result()
    sequences = [e.sequence for e in journal_events(db)]
    assert sequences == list(range(1, len(sequences) + 1))


async def test_a_client_writing_after_a_crash_continues_above_a_result_committed_last(
    db: str,
) -> None:
    completed = await _store_with_a_result_committed_last(db)
    async with stead.Client(stead.SqliteStore(db)) as client:
        await client.submit("a", session_id="s2", request_id="r", prompt="go", version="1")
    sequences = [e.sequence for e in journal_events(db)]
    assert completed + 1 in sequences
    assert sequences == list(range(1, len(sequences) + 1))


def test_an_older_file_keeps_the_highest_result_sequence_when_migrated(tmp_path: Any) -> None:
    """Migration 8 drops the index of result sequences; the highest one is kept in the meta
    row first, so an owner opening the file continues above it."""
    db = str(tmp_path / "v7.db")
    conn = sqlite3.connect(db)
    schema_at(conn, 7)
    conn.execute(
        "INSERT INTO stead_runs (id, session_id, request_id, kind, agent_id, version, status, "
        "input, submission_digest, created_at, updated_at) VALUES ('run-1', 's', 'r', 'agent', "
        "'a', '1', 'completed', '{}', 'd', '2026-01-01', '2026-01-01')"
    )
    conn.execute(
        "INSERT INTO stead_operations (run_id, key, position, kind, status, recovery, "
        "input_hash, input, result, created_at, updated_at, started_seq, completed_seq) "
        "VALUES ('run-1', 'tool:1:c1', 1, 'tool', 'completed', 'manual', 'h', '{}', '1', "
        "'2026-01-01', '2026-01-01', 3, 41)"
    )
    conn.commit()
    conn.close()

    async def reopen() -> int:
        store = stead.SqliteStore(db)
        async with await _app().open(store):
            assert store.open_info is not None
            return store.open_info.next_sequence

    assert asyncio.run(reopen()) == 42
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT schema_version, completed_through FROM stead_meta").fetchone() == (
        SCHEMA_VERSION,
        41,
    )
    conn.close()


async def test_a_replaced_owner_can_commit_nothing(db: str) -> None:
    fatal: list[stead.StorageError] = []
    store = stead.SqliteStore(db)
    runtime = await stead.runtime.runtime.Runtime.open(_app(), store, on_fatal_error=fatal.append)
    conn = sqlite3.connect(db, timeout=5)
    conn.execute("UPDATE stead_meta SET owner_token = 'usurper'")
    conn.commit()
    conn.close()
    with pytest.raises(stead.StorageError, match="no longer owns"):
        await runtime.submit("a", session_id="s", request_id="r", prompt="go")
    with pytest.raises(stead.StorageError, match="no longer owns"):  # poisoned from now on
        await runtime.list_runs()
    await asyncio.sleep(0)
    assert len(fatal) == 1
    await runtime.close()
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT COUNT(*) FROM stead_runs").fetchone() == (0,)
    conn.close()


async def test_memory_store_works_for_tests() -> None:
    async with await _app(["hello"]).open(stead.SqliteStore(":memory:")) as runtime:
        run = await runtime.submit("a", session_id="s", request_id="r", prompt="go")
        assert (await run.result()).output == "hello"


def test_store_arguments_are_validated(tmp_path: object) -> None:
    with pytest.raises(stead.ValidationError, match="fsync must be 'barriers' or 'always'"):
        stead.SqliteStore(":memory:", fsync="sometimes")  # type: ignore[arg-type]
    with pytest.raises(stead.ValidationError, match="does not exist"):
        stead.SqliteStore("/no/such/folder/stead.db")
    with pytest.raises(stead.ValidationError, match="blank"):
        stead.SqliteStore(" ")


@pytest.mark.parametrize("fsync", ["barriers", "always"])
async def test_concurrent_runs_share_commits(db: str, fsync: str) -> None:
    """Group commit: 50 concurrent runs need far fewer commits than writes."""
    app = _app()
    store = stead.SqliteStore(db, fsync=fsync)  # type: ignore[arg-type]
    commits = 0
    async with await app.open(store, max_concurrent_runs=50) as runtime:
        original = store.commit

        def counting(tx):  # type: ignore[no-untyped-def]
            nonlocal commits
            commits += 1
            return original(tx)

        store.commit = counting  # type: ignore[method-assign]
        runs = await asyncio.gather(
            *(
                runtime.submit("a", session_id=f"s{i}", request_id="r", prompt="go")
                for i in range(50)
            )
        )
        await asyncio.gather(*(r.result() for r in runs))
    events = len(journal_events(db))
    assert events == 50 * 5
    assert commits < events / 2


async def test_a_run_submitted_with_room_begins_in_its_submissions_commit(db: str) -> None:
    """A new run at its session's head, submitted while the runtime has room, begins its
    execution in the transaction that inserts it: one commit (and, with fsync="always", one
    fsync) from the submission to the first step. A run queued behind its session, or
    submitted while the runtime is full, is begun later by the scheduler, in its own."""
    gate = asyncio.Event()

    @stead.tool(recovery="safe", blocking=False)
    async def hold() -> str:
        """Wait for the test."""
        await gate.wait()
        return "held"

    model = ScriptedModel([[stead.ToolCall(name="hold", arguments={}, id="c1")], "done"])
    app = stead.App(agents=[stead.Agent(id="a", version="1", model=model, tools=[hold])])
    store = stead.SqliteStore(db)
    commits: list[list[tuple[str, str]]] = []
    async with await app.open(store, max_concurrent_runs=1) as runtime:
        original = store.commit

        def recording(tx):  # type: ignore[no-untyped-def]
            events, durable = original(tx)
            commits.append(
                [
                    (e.run_id, str(e.data["status"]) if e.kind == "status" else e.kind)
                    for e in events
                    if not isinstance(e, str)  # an operation's event: its run's id alone
                ]
            )
            return events, durable

        store.commit = recording  # type: ignore[method-assign]
        first = await runtime.submit("a", session_id="s1", request_id="r", prompt="go")
        queued = await runtime.submit(
            "a", session_id="s1", request_id="r2", prompt="go", enqueue=True
        )
        full = await runtime.submit("a", session_id="s2", request_id="r", prompt="go")
        gate.set()
        for run in (first, queued, full):
            assert (await run.result()).output == "done"
    with_submission = {
        run_id: batch for batch in commits for run_id, kind in batch if kind == "submitted"
    }
    assert (first.id, "running") in with_submission[first.id]
    for later in (queued, full):
        assert (later.id, "running") not in with_submission[later.id]
        assert any((later.id, "running") in batch for batch in commits)


async def test_a_submitted_run_begins_without_reading_its_empty_journal(db: str) -> None:
    """The transaction that inserts a run and begins it knows the run has no operations or
    interactions yet, so it does not select them; a fork, which copies its source's
    operations, does (test_control's fork test checks that it reuses them)."""
    model = ScriptedModel(["done"])
    app = stead.App(agents=[stead.Agent(id="a", version="1", model=model)])
    store = stead.SqliteStore(db)
    transactions: list[list[str]] = [[]]

    def trace(statement: str) -> None:
        transactions[-1].append(statement)
        if statement.startswith(("COMMIT", "ROLLBACK")):
            transactions.append([])

    async with await app.open(store) as runtime:
        store._conn.set_trace_callback(trace)  # type: ignore[union-attr]
        run = await runtime.submit("a", session_id="s", request_id="r", prompt="go")
        assert (await run.result()).output == "done"
        store._conn.set_trace_callback(None)  # type: ignore[union-attr]
    (submission,) = [t for t in transactions if any("INSERT INTO stead_runs" in s for s in t)]
    assert any("UPDATE stead_runs SET" in s and "'running'" in s for s in submission)
    journal_reads = [
        s
        for s in submission
        if s.startswith("SELECT") and ("stead_operations" in s or "stead_interactions" in s)
    ]
    assert journal_reads == []


async def test_each_safe_tool_call_of_runs_going_at_once_is_one_row(
    db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A safe call's intent is held back for its result, so it is written with it as one row:
    queued at once, it committed with the commit of another run that came by while the tool
    ran on its thread, and the result then updated the row (two writes for one call). (The
    hold is raised to 5 s here, so that a busy machine's slow burst is not what is tested.)"""
    from stead.runtime import context

    monkeypatch.setattr(context, "INTENT_HOLD", 5.0)

    @stead.tool(recovery="safe")
    def lookup(i: int) -> dict[str, int]:
        return {"i": i}

    script: list[Any] = [[stead.ToolCall(name="lookup", arguments={"i": n})] for n in range(3)]
    app = stead.App(
        agents=[
            stead.Agent(id="a", version="1", model=ScriptedModel([*script, "done"]), tools=[lookup])
        ]
    )
    store = stead.SqliteStore(db)
    statements: list[str] = []
    async with await app.open(store, max_concurrent_runs=50) as runtime:
        store._conn.set_trace_callback(statements.append)  # type: ignore[union-attr]
        runs = await asyncio.gather(
            *(
                runtime.submit("a", session_id=f"s{i}", request_id="r", prompt="go")
                for i in range(50)
            )
        )
        for run in runs:
            assert (await run.result(timeout=30)).output == "done"
        store._conn.set_trace_callback(None)  # type: ignore[union-attr]
    tool_rows = [
        s for s in statements if s.startswith("INSERT INTO stead_operations") and "'tool:" in s
    ]
    assert len(tool_rows) == 150
    assert all("'tool', 'completed'" in s for s in tool_rows)
    assert not [s for s in statements if s.startswith("UPDATE stead_operations") and "'tool:" in s]


async def test_a_safe_call_stopped_within_its_hold_leaves_no_intent(
    db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A safe call that ends without a result before its intent was written (its run was
    cancelled) writes none: as if it had not started, which for safe work is what a crash
    would leave too. (The hold is raised to 0.3 s, so that the cancellation surely comes
    within it, and the test waits past it: a held intent left behind would be written then.)"""
    from stead.runtime import context

    monkeypatch.setattr(context, "INTENT_HOLD", 0.3)
    started = asyncio.Event()
    app = paused_app(started, asyncio.Event())  # its tool never ends
    async with await app.open(stead.SqliteStore(db)) as runtime:
        run = await runtime.submit("a", session_id="s", request_id="r", prompt="go")
        await asyncio.wait_for(started.wait(), 10)
        await run.cancel()
        await asyncio.sleep(0.5)  # past the hold
    conn = sqlite3.connect(db)
    try:
        keys = conn.execute("SELECT key FROM stead_operations WHERE run_id = ?", (run.id,))
        status = conn.execute("SELECT status FROM stead_runs WHERE id = ?", (run.id,))
        assert ([row[0] for row in keys], status.fetchone()[0]) == (["model:1"], "cancelled")
    finally:
        conn.close()


async def test_storage_grows_linearly_with_a_conversation(tmp_path: object) -> None:
    """Each message is stored once: 100 turns cost about twice 50 turns, and the file stays
    within a small factor of the unique content (benchmarks/scale.py prints the ratio)."""
    from pathlib import Path

    sizes = {}
    for turns in (50, 100):
        db = str(Path(str(tmp_path)) / f"growth{turns}.db")
        content = 0

        @stead.tool(recovery="safe")
        def note(text: str) -> str:
            """Store a note."""
            return text.upper()

        script: list[object] = []
        for i in range(turns):
            text = f"turn {i:04d} " + ("lorem ipsum dolor sit amet " * 40)[:1000]  # 1 KB
            content += len(text) + len(text.upper())  # the argument and the result
            script.append([stead.ToolCall(name="note", arguments={"text": text}, id=f"n{i}")])
        script.append("done")
        app = stead.App(
            agents=[
                stead.Agent(
                    id="a",
                    version="1",
                    max_turns=turns + 1,
                    model=ScriptedModel(script),
                    tools=[note],
                )
            ]
        )
        async with await app.open(stead.SqliteStore(db)) as runtime:
            run = await runtime.submit("a", session_id="s", request_id="r", prompt="go")
            await run.result()
        conn = sqlite3.connect(db)
        conn.execute("VACUUM")
        size = (
            conn.execute("PRAGMA page_count").fetchone()[0]
            * conn.execute("PRAGMA page_size").fetchone()[0]
        )
        conn.close()
        sizes[turns] = (size, content)
    (small, _), (large, content) = sizes[50], sizes[100]
    assert large / small < 2.1  # linear, not quadratic
    # Each argument is kept once (in the model's message, in its operation's result) and each
    # tool result once (in the tool's operation); the operations' events are built from their
    # rows. The rest is row, page and index overhead: about 1.8x at this message size with
    # 1 KB pages (2.7x with 4 KB pages, where a leaf holds two such rows and a quarter of it
    # stays empty).
    assert large <= 2.5 * content, (large, content)


# -- reads that must not grow with the store's history: counted in SQLite VM steps ----------

_STAMP = "'2026-01-01T00:00:00.000+00:00'"


async def _schema_only(tmp_path: object, name: str) -> str:
    """A new store file holding the schema and no run."""
    from pathlib import Path

    db = str(Path(str(tmp_path)) / name)
    async with await stead.App().open(stead.SqliteStore(db), resume=False):
        pass
    return db


def _add_runs(
    conn: sqlite3.Connection,
    first: int,
    count: int,
    *,
    kind: str = "agent",
    status: str = "'completed'",
    next_attempt_at: str = "NULL",
) -> None:
    """Runs ``r<first>``... of sessions ``s<first>``..., one each (``status`` and
    ``next_attempt_at`` are SQL over ``x``, the run's number in the series)."""
    conn.execute(
        "WITH RECURSIVE g(x) AS (SELECT ? UNION ALL SELECT x + 1 FROM g WHERE x < ?) "
        "INSERT INTO stead_runs (id, session_id, request_id, kind, agent_id, version, status, "
        "input, submission_digest, created_at, updated_at, next_attempt_at) "
        f"SELECT 'r' || x, 's' || x, 'r' || x, '{kind}', 'a', '1', {status}, "
        f"'{{\"prompt\":\"go\"}}', 'd', {_STAMP}, {_STAMP}, {next_attempt_at} FROM g",
        (first, first + count - 1),
    )
    conn.commit()


def _vm_steps(conn: sqlite3.Connection, read: Any) -> int:
    """SQLite VM steps of ``read(tx)`` on a read-only transaction of ``conn``."""
    from stead._clock import SystemClock
    from stead.store.sqlite.tx import SqliteTx

    tx = SqliteTx(conn, SystemClock(), 0, False, read_only=True)
    counted = [0]

    def tick() -> int:
        counted[0] += 1
        return 0

    conn.set_progress_handler(tick, 1)
    try:
        read(tx)
    finally:
        conn.set_progress_handler(None, 1)
    return counted[0]


def _steps_stay_flat(
    db: str, add: Any, read: Any, *, then: Any = None, autocommit: bool = False
) -> None:
    """``read(tx)`` takes about as many VM steps after ``add`` made 21,000 rows as after it
    made 1,000 (``then(conn)`` runs after each ``add``)."""
    conn = sqlite3.connect(db, isolation_level=None) if autocommit else sqlite3.connect(db)
    counts: list[int] = []
    try:
        for first, count in ((1, 1_000), (1_001, 20_000)):
            add(conn, first, count)
            if then is not None:
                then(conn)
            counts.append(_vm_steps(conn, read))
    finally:
        conn.close()
    small, large = counts
    assert large < small + 200, (small, large)  # not proportional to the 21,000 rows


async def test_finding_runnable_runs_reads_the_candidates_not_the_history(tmp_path: object) -> None:
    """However many runs ended (or wait without a timer), the scheduler's query reads only the
    candidates, through their indexes: counted in SQLite VM steps, not timed."""

    def look(tx: Any) -> None:
        tx.runnable(8, [])
        tx.next_wakeup()

    def add(conn: sqlite3.Connection, first: int, count: int) -> None:
        _add_runs(
            conn,
            first,
            count,
            kind="task",
            status="CASE WHEN x % 2 = 0 THEN 'waiting' ELSE 'completed' END",
            next_attempt_at="CASE WHEN x % 4 = 0 THEN '2999-01-01T00:00:00.000+00:00' END",
        )

    _steps_stay_flat(await _schema_only(tmp_path, "history.db"), add, look)


async def test_a_sessions_runs_are_read_through_its_index_not_the_stores_history(
    tmp_path: object,
) -> None:
    """A run's start looks for its session's newest completed agent run (the history it
    continues), and ``stead runs --session S --status completed`` lists a session's runs in one
    status. However many runs of other sessions completed, both read the session's runs
    through the session's index, not every completed run through the status index, which is
    what the planner picks with no statistics: counted in SQLite VM steps, not timed."""

    def targets(conn: sqlite3.Connection) -> None:
        """After every other run: a session's history and two runs to begin, one continuing
        that session and one opening a new session (which has no completed run to find)."""
        conn.execute("DELETE FROM stead_runs WHERE id IN ('t1', 't2', 't3')")
        for run_id, session, status in (
            ("t1", "mine", "completed"),
            ("t2", "mine", "pending"),
            ("t3", "new", "pending"),
        ):
            conn.execute(
                "INSERT INTO stead_runs (id, session_id, request_id, kind, agent_id, version, "
                "status, input, submission_digest, created_at, updated_at) "
                f"VALUES (?, ?, ?, 'agent', 'a', '1', ?, '{{}}', 'd', {_STAMP}, {_STAMP})",
                (run_id, session, run_id, status),
            )
        conn.commit()

    def begin_both(tx: Any) -> None:
        for run_id, history in (("t2", "t1"), ("t3", None)):
            _, previous = tx.run_to_begin(run_id)
            assert (previous[0] if previous else None) == history
        listed = tx.list_runs(
            session_id="mine", agent_id=None, statuses=["completed"], before_number=None, limit=10
        )
        assert [run.id for run in listed] == ["t1"]

    db = await _schema_only(tmp_path, "history.db")
    _steps_stay_flat(db, _add_runs, begin_both, then=targets)


async def test_listing_runs_in_several_statuses_reads_a_page_not_every_finished_run(
    tmp_path: object,
) -> None:
    """``stead runs list --status completed,failed`` pages through the newest runs in those
    statuses. SQLite reads each status's newest runs through the status index and stops once
    no more can make the page (its plan says it sorts, but it ends early): counted in VM
    steps, not timed; and the page is the one the statuses' runs, newest first, begin with
    (also after a cursor)."""
    statuses = ["completed", "failed"]

    def add(conn: sqlite3.Connection, first: int, count: int) -> None:
        _add_runs(
            conn,
            first,
            count,
            status="CASE x % 3 WHEN 0 THEN 'completed' WHEN 1 THEN 'failed' ELSE 'waiting' END",
        )

    def page(tx: Any, before: int | None = None) -> list[int]:
        runs = tx.list_runs(
            session_id=None, agent_id=None, statuses=statuses, before_number=before, limit=10
        )
        return [run.number for run in runs]

    db = await _schema_only(tmp_path, "finished.db")
    _steps_stay_flat(db, add, page)

    from stead._clock import SystemClock
    from stead.store.sqlite.tx import SqliteTx

    conn = sqlite3.connect(db)
    try:
        tx = SqliteTx(conn, SystemClock(), 0, False, read_only=True)
        every = [
            number
            for number, status in conn.execute(
                "SELECT number, status FROM stead_runs ORDER BY number DESC"
            )
            if status in statuses
        ]
        assert page(tx) == every[:10]
        assert page(tx, every[9]) == every[10:20]
        assert page(tx, every[-3]) == every[-2:]
    finally:
        conn.close()


async def test_a_runs_interactions_are_read_through_its_index_not_every_pending_one(
    tmp_path: object,
) -> None:
    """Responding to an interaction asks whether the run waits for any other, cancelling a run
    cancels its pending ones, and ``stead interactions list --session S --status pending``
    lists a session's. Where thousands of runs wait for people, each reads the run's (or the
    session's) own interactions, not every pending one through the status index (what the
    planner picks with no statistics): counted in SQLite VM steps, not timed."""

    def add(conn: sqlite3.Connection, first: int, count: int) -> None:
        """``count`` runs waiting, each for one pending approval."""
        _add_runs(conn, first, count, status="'waiting'")
        conn.execute(
            "WITH RECURSIVE g(x) AS (SELECT ? UNION ALL SELECT x + 1 FROM g WHERE x < ?) "
            "INSERT INTO stead_interactions (id, run_id, key, kind, status, digest, requested_at) "
            f"SELECT 'i' || x, 'r' || x, 'approval:1', 'approval', 'pending', 'd', {_STAMP} "
            "FROM g",
            (first, first + count - 1),
        )
        conn.commit()

    def count_and_cancel(tx: Any) -> None:
        assert tx.pending_interactions("r1") == 1
        listed = tx.list_interactions(status="pending", session_id="s1", run_id=None, limit=10)
        assert [i.interaction_id for i in listed] == ["i1"]
        tx.execute("SAVEPOINT look")
        tx.cancel_interactions("r1")
        assert tx.pending_interactions("r1") == 0
        tx.execute("ROLLBACK TO look")
        tx.execute("RELEASE look")

    db = await _schema_only(tmp_path, "waiting.db")
    _steps_stay_flat(db, add, count_and_cancel, autocommit=True)


@pytest.mark.parametrize("recovery", ["manual", "idempotent"])
async def test_a_side_effects_result_is_on_disk_before_the_next_model_call(
    db: str, recovery: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The agent loop does not wait for a tool's result on its own: the result shares a commit
    with the next model call's intent. The model is still called only after a disk flush that
    covered the committed result."""
    from stead.store.sqlite.store import SqliteStore

    flushed_with_result: list[bool] = []
    real_sync = SqliteStore._sync_wal

    def sync(store: SqliteStore) -> None:
        reader = sqlite3.connect(db)  # what is committed now is what this flush makes durable
        row = reader.execute(
            "SELECT status FROM stead_operations WHERE key = 'tool:1:c1'"
        ).fetchone()
        reader.close()
        real_sync(store)
        flushed_with_result.append(row is not None and row[0] == "completed")

    monkeypatch.setattr(SqliteStore, "_sync_wal", sync)
    seen_at_turn_2: list[bool] = []

    class Watching(ScriptedModel):
        async def complete(self, request: stead.ModelRequest) -> stead.ModelResponse:
            if request.turn == 2:
                seen_at_turn_2.append(any(flushed_with_result))
            return await super().complete(request)

    @stead.tool(recovery=recovery)  # type: ignore[call-overload]
    def charge(amount: int) -> str:
        """Charge a card."""
        return f"charged {amount}"

    model = Watching([[stead.ToolCall(name="charge", arguments={"amount": 5}, id="c1")], "done"])
    app = stead.App(agents=[stead.Agent(id="a", version="1", model=model, tools=[charge])])
    async with await app.open(stead.SqliteStore(db)) as runtime:
        run = await runtime.submit("a", session_id="s", request_id="r", prompt="go")
        assert (await run.result()).output == "done"
    assert seen_at_turn_2 == [True]


async def test_a_submission_whose_flush_fails_is_not_acknowledged_and_resumes_on_reopen(
    db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The disk refusing the submission's flush fails the submission (the caller hears of no
    run) and stops the runtime. Nothing is half-applied: a runtime opened on the file
    afterwards has the committed submission (the same request gives the same run, not a
    second one) and finishes it."""
    from stead.store.sqlite.store import SqliteStore

    real_sync = SqliteStore._sync_wal
    failing = [True]

    def sync(store: SqliteStore) -> None:
        if failing[0]:
            raise OSError(5, "Input/output error")
        real_sync(store)

    monkeypatch.setattr(SqliteStore, "_sync_wal", sync)
    app = _app(["ok"])
    runtime = await app.open(stead.SqliteStore(db))
    with pytest.raises(stead.StorageError, match="flushing the journal to disk failed"):
        await runtime.submit("a", session_id="s", request_id="r", prompt="go")
    with contextlib.suppress(stead.StorageError):
        await runtime.close()
    failing[0] = False
    async with await app.open(stead.SqliteStore(db)) as runtime:
        run = await runtime.submit("a", session_id="s", request_id="r", prompt="go")
        assert (await run.result()).output == "ok"
        assert [r.id for r in (await runtime.list_runs()).runs] == [run.id]


async def test_one_run_has_its_barriers_flushed_on_the_loop_and_many_on_the_flush_thread(
    db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the runtime executes one run, nobody else would wait for the disk: a barrier is
    flushed on the event loop, without the hand-off to the flush thread. With two runs
    executing, the flush goes to the thread so the other run goes on meanwhile; on Linux the
    thread is woken on the loop's CPU and flushes free of that (``stead._threads.Placement``)."""
    import threading

    from stead.store.sqlite.store import SqliteStore

    flushed_on: list[str] = []
    flushed_by: list[tuple[int, set[int] | None]] = []  # native id, CPUs allowed meanwhile
    real_sync = SqliteStore._sync_wal
    placing = hasattr(os, "sched_setaffinity")

    def sync(store: SqliteStore) -> None:
        flushed_on.append(threading.current_thread().name)
        allowed = os.sched_getaffinity(0) if placing else None
        flushed_by.append((threading.get_native_id(), allowed))
        real_sync(store)

    monkeypatch.setattr(SqliteStore, "_sync_wal", sync)
    pins: list[tuple[int, set[int]]] = []
    if placing:
        plain = os.sched_setaffinity

        def recorded(pid: int, cpus: Any) -> None:
            pins.append((pid, set(cpus)))
            plain(pid, cpus)

        monkeypatch.setattr(os, "sched_setaffinity", recorded)
    loop_thread = threading.current_thread().name
    go_on = asyncio.Event()

    @stead.tool(recovery="manual")
    def charge(amount: int) -> str:
        """Charge a card."""
        return f"charged {amount}"

    @stead.tool(recovery="safe")
    async def wait_here() -> str:
        """Wait until told."""
        await go_on.wait()
        return "waited"

    charging = stead.Agent(
        id="charging",
        version="1",
        model=ScriptedModel([[stead.ToolCall(name="charge", arguments={"amount": 5})], "done"]),
        tools=[charge],
    )
    waiting = stead.Agent(
        id="waiting",
        version="1",
        model=ScriptedModel([[stead.ToolCall(name="wait_here", arguments={})], "done"]),
        tools=[wait_here],
    )
    app = stead.App(agents=[charging, waiting])
    async with await app.open(stead.SqliteStore(db)) as runtime:
        run = await runtime.submit("charging", session_id="s1", request_id="r", prompt="go")
        assert (await run.result()).output == "done"
        assert flushed_on and set(flushed_on) == {loop_thread}, flushed_on

        flushed_on.clear()
        held = await runtime.submit("waiting", session_id="s2", request_id="r", prompt="go")
        for _ in range(200):  # until the waiting run executes (it waits in its tool)
            if held.id in runtime._scheduler.active:
                break
            await asyncio.sleep(0.01)
        assert held.id in runtime._scheduler.active
        flushed_on.clear()
        run = await runtime.submit("charging", session_id="s3", request_id="r", prompt="go")
        assert (await run.result()).output == "done"
        assert any(name != loop_thread for name in flushed_on), flushed_on
        if placing:
            everywhere = os.sched_getaffinity(0)
            loop_id = threading.get_native_id()
            on_thread = [(tid, cpus) for tid, cpus in flushed_by if tid != loop_id]
            assert on_thread and all(cpus == everywhere for _, cpus in on_thread)
            tids = {tid for tid, _ in on_thread}
            assert any(pid in tids and len(cpus) == 1 for pid, cpus in pins), pins
        go_on.set()
        assert (await held.result()).output == "done"


async def test_a_waited_for_commit_happens_in_the_callers_step_while_one_run_executes(
    db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With at most one run executing, nobody else would join a batch: a commit someone waits
    for happens at once (its lazy forerunners with it), and its future is settled when
    ``transact`` returns; a barrier's is on disk by then too. With more runs executing, jobs
    wait for the end of the loop's turn to share one commit. A commit asked for while a flush
    delivers waits its turn too, so deliveries stay in commit order. A lazy barrier (a side
    effect's result the run does not wait for) waits for the next commit and shares its
    fsync."""
    from stead.journal import transitions
    from stead.journal.events import Custom
    from stead.store.sqlite.store import SqliteStore

    flushes: list[int] = []  # how many batches had been delivered at each fsync
    real_sync = SqliteStore._sync_wal

    def sync(store: SqliteStore) -> None:
        real_sync(store)
        flushes.append(len(delivered))

    monkeypatch.setattr(SqliteStore, "_sync_wal", sync)
    store = stead.SqliteStore(db)
    delivered: list[list[int]] = []
    during_delivery: list[asyncio.Future[object]] = []

    def note(text: str) -> Any:
        return functools.partial(
            transitions.emit, run_id="run-1", payload=Custom(name="note", value=text)
        )

    def on_commit(events: list[Any]) -> None:
        delivered.append([e.sequence for e in events])
        if len(delivered) == 2:  # ask for a commit while this one is delivered
            future = store.transact(note("nested"), durability="commit", isolated=False)
            during_delivery.append(future)
            assert not future.done()

    await asyncio.to_thread(store.acquire, asyncio.get_running_loop(), on_commit, print)
    one_run = True
    store.flush_here_when(lambda: one_run)
    try:
        submitted = store.transact(submission(), durability="commit")
        assert submitted.done()
        lazy = store.transact(note("lazy"), durability="lazy", isolated=False)
        first = store.transact(note("first"), durability="commit", isolated=False)
        assert lazy.done() and first.done()  # committed together, before transact returned
        await asyncio.wait_for(during_delivery[0], 5)
        assert len(delivered) == 3

        # A barrier commits at once too, and is flushed to disk before it is delivered.
        flushes.clear()
        intent = store.transact(note("intent"), durability="barrier", isolated=False)
        assert intent.done() and len(delivered) == 4 and flushes == [3]

        # A lazy barrier waits in the queue: a side effect's result, which the run does not
        # wait for, shares its commit (and fsync) with what the run writes next.
        result = store.transact(note("result"), durability="lazy_barrier", isolated=False)
        assert not result.done() and len(delivered) == 4
        intent = store.transact(note("intent"), durability="commit", isolated=False)
        assert result.done() and intent.done()
        assert len(delivered) == 5 and len(delivered[4]) == 2 and flushes == [3, 4]

        # Alone in the queue, it commits and is flushed after the lazy delay.
        result = store.transact(note("result"), durability="lazy_barrier", isolated=False)
        assert not result.done()
        await asyncio.wait_for(result, 5)
        assert len(delivered) == 6 and flushes == [3, 4, 5]

        one_run = False
        second = store.transact(note("second"), durability="commit", isolated=False)
        assert not second.done()  # it waits for company until the loop's turn ends
        await second
    finally:
        await store.aclose()
    assert len(delivered) == 7
    sequences = [s for batch in delivered for s in batch]
    assert sequences == sorted(sequences) and len(sequences) == len(set(sequences))


@given(
    moment=st.datetimes(
        min_value=datetime(2, 1, 1),
        max_value=datetime(9998, 12, 31),
        timezones=st.builds(
            timezone, st.timedeltas(min_value=timedelta(hours=-23), max_value=timedelta(hours=23))
        ),
    )
)
@settings(max_examples=500, deadline=None, database=None)
def test_a_timestamps_storage_form_is_isoformats_in_utc_to_the_millisecond(
    moment: datetime,
) -> None:
    """The journal's timestamps are written by hand for speed; they are what
    ``isoformat(timespec="milliseconds")`` writes in UTC, which every store reads back and
    orders by, whatever the time's zone, year or microseconds."""
    from stead._clock import iso

    assert iso(moment) == moment.astimezone(UTC).isoformat(timespec="milliseconds")
    utc = moment.astimezone(UTC)
    assert datetime.fromisoformat(iso(moment)) == utc.replace(
        microsecond=utc.microsecond // 1000 * 1000
    )
