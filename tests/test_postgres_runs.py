"""Runs on PostgreSQL: a worker runs a schema's runs, clients in other connections answer them,
and a killed worker's work continues on another one, as on SQLite, once its lease ran out."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

import stead
from stead.testing import FunctionModel, ScriptedModel

from ._journal import submission
from .conftest import counted_outcome_reads, paused_app, until_tool_intent_written

POSTGRES_URL = os.environ.get("STEAD_TEST_POSTGRES_URL")
pytestmark = pytest.mark.skipif(not POSTGRES_URL, reason="STEAD_TEST_POSTGRES_URL is not set")
CHILD = Path(__file__).with_name("_pg_child.py")
TOUCHED = "2030-01-01T00:00:00.000+00:00"


def _store(schema: str, **options: Any) -> Any:
    from stead.store.postgres import PostgresStore

    return PostgresStore(str(POSTGRES_URL), schema=schema, **options)


@pytest.fixture
def schema() -> Iterator[str]:
    name = f"pgruns_{uuid.uuid4().hex[:12]}"
    yield name
    conn = _store(name).connect()
    try:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
    finally:
        conn.close()


def _bank(wired: list[str]) -> stead.App:
    @stead.tool(recovery="idempotent", approval=lambda args: args["amount"] > 100)
    async def wire(amount: int, ctx: stead.ToolContext) -> str:
        """Wire money."""
        wired.append(ctx.operation_id)
        return f"wired {amount}"

    model = ScriptedModel(
        [[stead.ToolCall(name="wire", arguments={"amount": 500}, id="w")], "Wired 500."]
    )
    return stead.App(agents=[stead.Agent(id="bank", version="1", model=model, tools=[wire])])


async def _until(run: Any, status: stead.RunStatus) -> None:
    for _ in range(1000):
        if await run.status() is status:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"run {run.id} never became {status.value}")


async def test_a_client_on_another_connection_answers_a_waiting_run(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from stead.store.postgres import store as pg

    monkeypatch.setattr(pg._Listener, "fallback", 3600.0)  # only the notification wakes it
    wired: list[str] = []
    async with await _bank(wired).open(_store(schema)) as runtime:
        run = await runtime.submit("bank", session_id="s", request_id="r", prompt="wire")
        await _until(run, stead.RunStatus.WAITING)
        async with stead.Client(_store(schema), command_timeout=10) as client:
            (pending,) = await client.list_interactions(status="pending")
            assert pending.key == "approval:1:w"
            await client.respond(pending.interaction_id, stead.Approve())
            outcome = await client.result(run.id, timeout=10)
    assert outcome.output == "Wired 500." and wired == [f"{run.id}/tool:1:w"]


async def test_a_read_leaves_the_writers_prepared_statements_in_place(schema: str) -> None:
    """Reads share the executions' connection; ending one must not make the server forget the
    statements the writes prepared (psycopg drops them all when it sees a ROLLBACK)."""
    store = _store(schema)
    async with await _bank([]).open(store) as runtime:
        run = await runtime.submit("bank", session_id="s", request_id="r", prompt="wire")
        await _until(run, stead.RunStatus.WAITING)
        assert await store.read(lambda tx: tx.execute("SELECT 1").fetchone()[0]) == 1
        prepared = await store.read(
            lambda tx: [
                row[0] for row in tx.execute("SELECT statement FROM pg_prepared_statements")
            ]
        )
    assert any(text.startswith("INSERT INTO stead_operations") for text in prepared), prepared


def _count_forgotten(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The first failure of a statement the server no longer knew (on the loop or a thread)."""
    from stead.store.postgres import wire

    forgotten: list[str] = []
    settle = wire.Wire._settle

    def spy(self: Any, expected: Any, result: Any) -> None:
        settle(self, expected, result)
        if isinstance(self._failure, wire.Forgotten) and not forgotten:
            forgotten.append(str(self._failure))

    monkeypatch.setattr(wire.Wire, "_settle", spy)
    return forgotten


async def test_statements_the_server_forgot_are_prepared_again(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer's statements are prepared once per connection; when the server forgot them
    (psycopg sends DEALLOCATE ALL after it saw a ROLLBACK), the batch that finds one missing
    is written again from the start and the run goes on."""
    forgotten = _count_forgotten(monkeypatch)
    store = _store(schema)
    async with _paused_run(store) as (run, gate, conn):
        await store.read(lambda tx: tx.execute("DEALLOCATE ALL"))
        gate.set()
        outcome = await asyncio.wait_for(run.result(), 10)
        rows = conn.execute(
            f'SELECT key, status FROM "{schema}".stead_operations WHERE run_id = %s '
            "ORDER BY position",
            (run.id,),
        ).fetchall()
    assert outcome.output == "done"
    assert forgotten and "does not exist" in forgotten[0], forgotten
    assert [status for _, status in rows] == ["completed"] * 3, rows


async def test_a_command_whose_statements_the_server_forgot_is_applied_again(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Commands send their statements prepared, as the writer does; on a connection of the
    pool whose statements the server forgot, the command is applied again from the start."""
    forgotten = _count_forgotten(monkeypatch)
    async with await _bank([]).open(_store(schema)):
        pass  # the schema and the agent's version
    store = _store(schema, min_size=1, max_size=1)  # one connection: the one that forgot
    async with stead.Client(store, command_timeout=10) as client:
        first = await client.submit("bank", session_id="s1", request_id="r", prompt="wire")
        await asyncio.to_thread(store.client_read, lambda tx: tx.execute("DEALLOCATE ALL"))
        second = await client.submit("bank", session_id="s2", request_id="r", prompt="wire")
        runs = {run.id for run in (await client.list_runs()).runs}
    assert forgotten and "does not exist" in forgotten[0], forgotten
    assert {first.id, second.id} <= runs


@contextlib.asynccontextmanager
async def _one_run_done(store: Any) -> AsyncIterator[Any]:
    """A runtime on ``store`` that finished one run (yielded), its writer idle: the
    scheduler's look for more work is over, and the writer knows the event counter."""
    model = ScriptedModel(["done"])
    app = stead.App(agents=[stead.Agent(id="a", version="1", model=model)])
    async with await app.open(store) as runtime:
        run = await runtime.submit("a", session_id="s", request_id="r", prompt="go")
        assert (await run.result(timeout=10)).output == "done"
        await asyncio.sleep(0.2)
        yield run


async def test_a_batch_begun_on_the_loop_that_would_wait_is_written_on_the_thread(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run's steps are written from the event loop, which never waits for the server; a
    job of such a batch that reads an answer has the batch written on the writer's thread,
    from the start, and its answer is what it read."""
    from stead.store.postgres import writer

    moved: list[int] = []
    again = writer.PostgresWriter._again_on_thread

    def spy(self: Any, batch: list[Any]) -> None:
        moved.append(len(batch))
        again(self, batch)

    monkeypatch.setattr(writer.PostgresWriter, "_again_on_thread", spy)
    store = _store(schema)
    async with _one_run_done(store):
        assert not moved  # the run's own steps never read on the loop
        answer = await store._open_writer().submit(
            lambda tx: tx.execute("SELECT count(*) FROM stead_runs").fetchone()[0],
            checked=False,
        )
    assert answer == 1
    assert moved == [1]


async def test_a_read_queued_behind_steps_leaves_them_on_the_loop(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read waits for an answer, so it is written on the thread; the steps queued before it
    are written from the loop without it, and the read, in the next batch, sees them."""
    from stead.store.postgres import writer

    on_loop: list[int] = []
    on_thread: list[int] = []
    loop_batch, thread_batch = writer.PostgresWriter._write_on_loop, writer.PostgresWriter._run

    def spy_loop(self: Any, batch: list[Any]) -> None:
        on_loop.append(len(batch))
        loop_batch(self, batch)

    def spy_thread(self: Any, batch: list[Any], begun: bool = False) -> None:
        on_thread.append(len(batch))
        thread_batch(self, batch, begun)

    store = _store(schema)
    async with _one_run_done(store) as run:
        monkeypatch.setattr(writer.PostgresWriter, "_write_on_loop", spy_loop)
        monkeypatch.setattr(writer.PostgresWriter, "_run", spy_thread)
        submit = store._open_writer().submit
        stamp = "2031-01-01T00:00:00.000+00:00"
        steps = [
            submit(
                lambda tx, n=n: tx.execute(
                    "UPDATE stead_runs SET updated_at = ? WHERE id = ?", (stamp, run.id)
                ),
                checked=False,
                lazy=True,
            )
            for n in range(2)
        ]
        read = submit(
            lambda tx: tx.execute(
                "SELECT updated_at FROM stead_runs WHERE id = ?", (run.id,)
            ).fetchone()[0],
            read_only=True,
        )
        await asyncio.gather(*steps)
        assert await read == stamp
    assert on_loop[:1] == [2] and on_thread[:1] == [1], (on_loop, on_thread)


async def test_a_barrier_commits_with_synchronous_commit_on_and_the_rest_with_it_off(
    schema: str,
) -> None:
    """Durability maps onto ``synchronous_commit``: on for a batch holding a barrier (the
    server flushed its WAL before the commit returns), off for any other."""
    store = _store(schema)
    model = ScriptedModel(["done"])
    app = stead.App(agents=[stead.Agent(id="a", version="1", model=model)])

    def setting(tx: Any) -> str:
        return str(tx.execute("SELECT current_setting('synchronous_commit')").fetchone()[0])

    async with await app.open(store) as runtime:
        run = await runtime.submit("a", session_id="s", request_id="r", prompt="go")
        assert (await run.result(timeout=10)).output == "done"
        writer = store._open_writer()
        found = {}
        for barrier in (True, False):
            for checked in (True, False):
                await asyncio.sleep(0.1)  # a batch of its own
                found[barrier, checked] = await writer.submit(
                    setting, barrier=barrier, checked=checked
                )
    assert found == {
        (True, True): "on",
        (True, False): "on",
        (False, True): "off",
        (False, False): "off",
    }


async def test_a_step_larger_than_the_sockets_buffers_is_written_whole(schema: str) -> None:
    """A batch the server cannot take in one read (a 3.5 MB tool result): the writer sends it
    while it reads the server's answers, and the result is stored as it was."""
    big = "x" * (3_500_000)

    @stead.tool(recovery="safe")
    def produce() -> str:
        """Produce a large result."""
        return big

    model = ScriptedModel([[stead.ToolCall(name="produce", id="p")], "done"])
    app = stead.App(agents=[stead.Agent(id="a", version="1", model=model, tools=[produce])])
    store = _store(schema)
    async with await app.open(store) as runtime:
        run = await runtime.submit("a", session_id="s", request_id="r", prompt="go")
        outcome = await asyncio.wait_for(run.result(), 30)
    conn = store.connect()
    try:
        (result,) = conn.execute(
            f'SELECT result FROM "{schema}".stead_operations WHERE run_id = %s AND kind = %s',
            (run.id, "tool"),
        ).fetchone()
    finally:
        conn.close()
    assert outcome.output == "done"
    assert json.loads(result)["output"] == big


def _count_refusals(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The messages of the batches the server refused because what the writer assumed (the
    claims, the sequence counter) no longer held."""
    from stead.store.postgres import writer

    refused: list[str] = []
    count = writer.PostgresWriter._refused

    def spy(self: Any, failure: BaseException) -> None:
        refused.append(str(failure))
        count(self, failure)

    monkeypatch.setattr(writer.PostgresWriter, "_refused", spy)
    return refused


@contextlib.asynccontextmanager
async def _paused_run(store: Any) -> AsyncIterator[tuple[Any, asyncio.Event, Any]]:
    """A run of :func:`paused_app` held inside its tool, the writer idle (the next batch is
    the one after what the test does), and a connection of the test's own: ``(run, gate,
    conn)``; set ``gate`` to let the run go on."""
    entered, gate = asyncio.Event(), asyncio.Event()
    async with await paused_app(entered, gate).open(store) as runtime:
        run = await runtime.submit("a", session_id="s", request_id="r", prompt="go")
        await asyncio.wait_for(entered.wait(), 10)
        await until_tool_intent_written(run)  # its commit comes a while after the tool starts
        await asyncio.sleep(0.1)
        conn = store.connect()
        try:
            yield run, gate, conn
        finally:
            conn.close()


async def _go_on_until_refused(gate: asyncio.Event, refused: list[str]) -> None:
    gate.set()
    for _ in range(100):
        if refused:
            return
        await asyncio.sleep(0.02)


async def test_a_batch_that_assumed_the_counter_is_refused_and_written_again(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run's steps commit in one round trip each, assuming the event counter is where the
    writer's last commit left it. Another writer moves it meanwhile: the server refuses the
    batch, it is written again the checked way, and no number is given twice or out of order."""
    refused = _count_refusals(monkeypatch)
    store = _store(schema)
    async with _paused_run(store) as (run, gate, conn):
        (gap,) = conn.execute(
            f'UPDATE "{schema}".stead_meta SET next_sequence = next_sequence + 5 '
            "RETURNING next_sequence - 5"
        ).fetchone()
        await _go_on_until_refused(gate, refused)
        assert (await run.result(timeout=10)).output == "done"
        numbers = await store.read(
            lambda tx: [
                row[0]
                for row in tx.execute(
                    "SELECT sequence FROM stead_events UNION ALL SELECT started_seq FROM "
                    "stead_operations WHERE started_seq IS NOT NULL UNION ALL SELECT "
                    "completed_seq FROM stead_operations WHERE completed_seq IS NOT NULL"
                )
            ]
        )
    assert len(numbers) == len(set(numbers))
    assert not [n for n in numbers if gap <= n < gap + 5], (gap, sorted(numbers))
    assert max(numbers) >= gap + 5
    assert refused and "assumed the sequence counter" in refused[0], refused


async def test_a_batch_that_assumed_a_lost_claim_writes_nothing(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another worker took the run over (a new claim epoch) while this one ran a tool: the
    step that assumed the claim still held is refused by the server, and the checked write
    after it finds the claim lost, so nothing more of this worker's lands."""
    refused = _count_refusals(monkeypatch)
    operations = (
        f'SELECT key, status FROM "{schema}".stead_operations WHERE run_id = %s ORDER BY position'
    )
    async with _paused_run(_store(schema)) as (run, gate, conn):
        conn.execute(
            f'UPDATE "{schema}".stead_runs SET claim_epoch = claim_epoch + 1 WHERE id = %s',
            (run.id,),
        )
        before = conn.execute(operations, (run.id,)).fetchall()
        await _go_on_until_refused(gate, refused)
        await asyncio.sleep(0.2)
        after = conn.execute(operations, (run.id,)).fetchall()
    assert after == before
    assert refused and "assumed the claim on run" in refused[0], refused


async def test_a_batch_rolled_back_to_break_a_deadlock_is_written_again(schema: str) -> None:
    """The writer holds the sequence counter while it writes to a run; a command holding that
    run waits for the counter. The server breaks the deadlock by rolling the writer's batch
    back (it waited first): the batch is written again, and the store goes on."""

    store = _store(schema)
    loop = asyncio.get_running_loop()
    await asyncio.to_thread(store.acquire, loop, lambda events: None, lambda error: None)
    command, watcher = store.connect(), store.connect()
    try:
        await store.transact(submission())
        command.execute("SET deadlock_timeout = '30s'")  # the writer's check comes first
        command.execute("BEGIN")
        command.execute("SELECT id FROM stead_runs WHERE id = 'run-1' FOR UPDATE")
        attempts: list[int] = []

        def touch(tx: Any) -> int:
            attempts.append(len(attempts) + 1)
            counter = tx.next_sequence  # locks the counter
            tx.execute("UPDATE stead_runs SET updated_at = ? WHERE id = ?", (TOUCHED, "run-1"))
            return int(counter)

        written = store.transact(touch)
        for _ in range(500):
            (waiting,) = watcher.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            ).fetchone()
            if waiting:
                break
            await asyncio.sleep(0.01)
        # The command asks for the counter the writer holds: a deadlock, which the server
        # breaks after the writer's deadlock_timeout (1 s) by rolling the writer's batch back.
        await asyncio.to_thread(
            command.execute, "SELECT next_sequence FROM stead_meta WHERE singleton = 1 FOR UPDATE"
        )
        command.execute("COMMIT")
        assert await asyncio.wait_for(written, 30) >= 1
        # Rolled back at least once and written again until it went through: on a busy
        # machine the writer's second attempt can take the counter before the command does,
        # and the server breaks that deadlock too.
        assert len(attempts) >= 2 and attempts == list(range(1, len(attempts) + 1))
        (stamp,) = watcher.execute(
            "SELECT updated_at FROM stead_runs WHERE id = 'run-1'"
        ).fetchone()
        assert stamp == TOUCHED
        assert await store.read(lambda tx: tx.get_run("run-1")) is not None  # not poisoned
    finally:
        command.close()
        watcher.close()
        await store.aclose()


async def test_a_worker_is_not_woken_by_its_own_notifications(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker's notifications (a run it ended, a submission it applied) wake the others; it
    woke itself when it wrote them, so its listener skips them — one claim fewer a run."""
    from stead.store.postgres import store as pg

    handed: list[str] = []
    hand = pg._Listener._hand

    def spy(self: Any, payload: str) -> None:
        handed.append(payload)
        hand(self, payload)

    monkeypatch.setattr(pg._Listener, "_hand", spy)
    monkeypatch.setattr(pg._Listener, "fallback", 3600.0)  # no timed wake-ups
    model = ScriptedModel(["done"])
    app = stead.App(agents=[stead.Agent(id="a", version="1", model=model)])
    store = _store(schema)
    async with await app.open(store) as runtime:
        run = await runtime.submit("a", session_id="s", request_id="r", prompt="go")
        assert (await run.result(timeout=10)).output == "done"
        conn = store.connect()
        try:
            conn.execute("SELECT pg_notify(%s, %s)", (store.channel, "another-worker"))
        finally:
            conn.close()
        for _ in range(500):
            if handed:
                break
            await asyncio.sleep(0.01)
    assert handed == ["another-worker"]


def _count_claimed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The runs the workers' schedulers claimed (not the ones claimed with a submission)."""
    from stead.store.postgres import store as pg

    claimed: list[str] = []
    claim = pg.PostgresStore._claim

    def spy(self: Any, tx: Any, **options: Any) -> Any:
        claims, wakeup = claim(self, tx, **options)
        claimed.extend(found.run_id for found in claims)
        return claims, wakeup

    monkeypatch.setattr(pg.PostgresStore, "_claim", spy)
    return claimed


async def test_a_run_a_worker_submits_is_claimed_with_its_submission(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker's own submission at its session's head claims the run in the same
    transaction and starts it there: no claim of the scheduler's, no notification; a run
    submitted while the worker has no room is claimed the usual way, once there is."""
    claimed = _count_claimed(monkeypatch)
    entered, gate = asyncio.Event(), asyncio.Event()
    store = _store(schema)
    async with await paused_app(entered, gate).open(store, max_concurrent_runs=1) as runtime:
        first = await runtime.submit("a", session_id="s1", request_id="r", prompt="go")
        conn = store.connect()
        try:
            owner = conn.execute(
                f'SELECT claimed_by FROM "{schema}".stead_runs WHERE id = %s', (first.id,)
            ).fetchone()
        finally:
            conn.close()
        await asyncio.wait_for(entered.wait(), 10)
        second = await runtime.submit("a", session_id="s2", request_id="r", prompt="go")
        gate.set()
        assert (await first.result(timeout=10)).output == "done"
        assert (await second.result(timeout=10)).output == "done"
    assert owner == (store.worker,)
    assert first.id not in claimed
    assert second.id in claimed


async def test_a_run_a_worker_submits_begins_in_its_submissions_transaction(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The submission claims the run and begins its execution in one transaction, and the
    executions' writer learns where that left the event counter: its next batch, which
    assumes the counter, is not refused (each run's first step would be written twice)."""
    from stead.journal import transitions

    begun: list[tuple[str, bool]] = []
    begin = transitions.begin

    def spy(tx: Any, run_id: str, **options: Any) -> Any:
        begun.append((run_id, tx.lock_runs))  # a command's transaction locks what it reads
        return begin(tx, run_id, **options)

    monkeypatch.setattr(transitions, "begin", spy)
    refused = _count_refusals(monkeypatch)
    app = _bank([])
    async with await app.open(_store(schema)) as runtime:
        runs = []
        for n in range(3):
            run = await runtime.submit("bank", session_id=f"s{n}", request_id="r", prompt="go")
            await _until(run, stead.RunStatus.WAITING)  # the approval of a wire over 100
            runs.append(run)
    assert begun == [(run.id, True) for run in runs]
    assert refused == []


async def test_a_submission_asks_for_the_event_counter_with_what_it_decides_on(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker's submission locks the event counter in the same flight as its questions (the
    request, the run id, the session's unfinished run), so one answer of the server brings
    both, and its event does not wait for the server again."""
    import threading

    from stead.store.postgres import client, wire

    sent: dict[int, list[str]] = {}
    execute, ask, apply = wire.Wire.execute, wire.Wire._ask, client.PostgresClient._apply

    def recorded_execute(self: Any, sql: str, params: Any = ()) -> Any:
        sent.get(threading.get_ident(), []).append(sql)
        return execute(self, sql, params)

    def recorded_ask(self: Any) -> None:
        if self._unasked:
            sent.get(threading.get_ident(), []).append("(the server is asked to answer)")
        ask(self)

    def recorded_apply(self: Any, *args: Any) -> Any:
        sent[threading.get_ident()] = []
        try:
            return apply(self, *args)
        finally:
            flights.append(sent.pop(threading.get_ident()))

    flights: list[list[str]] = []
    monkeypatch.setattr(wire.Wire, "execute", recorded_execute)
    monkeypatch.setattr(wire.Wire, "_ask", recorded_ask)
    monkeypatch.setattr(client.PostgresClient, "_apply", recorded_apply)
    app = stead.App(agents=[stead.Agent(id="a", version="1", model=ScriptedModel(["done"] * 3))])
    async with await app.open(_store(schema)) as runtime:
        for n in range(3):
            run = await runtime.submit("a", session_id=f"s{n}", request_id="r", prompt="go")
            assert (await run.result()).output == "done"
    assert len(flights) == 3
    for flight in flights:
        first_answer = flight.index("(the server is asked to answer)")
        counter = next(n for n, sql in enumerate(flight) if "FROM stead_meta" in sql)
        assert counter < first_answer, flight
        assert any("INSERT INTO stead_runs" in sql for sql in flight[first_answer:])


async def test_a_runtimes_own_command_runs_on_its_idle_writers_connection(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A runtime's own submission, while its writer has nothing in flight or queued, is applied
    on the writer's connection (open and warm, where a pool connection may be new), and its
    commit is flushed before it is acknowledged although that connection commits the runs'
    steps with ``synchronous_commit = off``. While the writer is busy, a submission goes to
    the pool and does not wait behind the writer."""
    import threading

    from stead.store.postgres import client, wire

    used: list[tuple[Any, list[str]]] = []
    apply, execute = client.PostgresClient._apply, wire.Wire.execute
    statements: dict[int, list[str]] = {}

    def recorded_apply(self: Any, conn: Any, *args: Any) -> Any:
        statements[threading.get_ident()] = sent = []
        try:
            return apply(self, conn, *args)
        finally:
            used.append((conn, sent))
            del statements[threading.get_ident()]

    def recorded_execute(self: Any, sql: str, params: Any = ()) -> Any:
        statements.get(threading.get_ident(), []).append(sql)
        return execute(self, sql, params)

    monkeypatch.setattr(client.PostgresClient, "_apply", recorded_apply)
    monkeypatch.setattr(wire.Wire, "execute", recorded_execute)
    app = stead.App(agents=[stead.Agent(id="a", version="1", model=ScriptedModel(["done"] * 2))])
    store = _store(schema)
    async with await app.open(store) as runtime:
        run = await runtime.submit("a", session_id="s1", request_id="r", prompt="go")
        assert (await run.result()).output == "done"
        ((conn, sent),) = used
        assert conn is store._writer._conn
        assert sent[:2] == ["BEGIN", "SET LOCAL synchronous_commit = on"], sent

        # The writer busy with a read that waits: the next submission is not held up by it.
        release = threading.Event()
        blocked = store.read(lambda tx: release.wait(30))
        try:
            second = await asyncio.wait_for(
                runtime.submit("a", session_id="s2", request_id="r", prompt="go"), 10
            )
            assert used[1][0] is not store._writer._conn
            assert not blocked.done()
        finally:
            release.set()
        await blocked
        assert (await second.result()).output == "done"
    async with stead.Client(_store(schema)) as reader:
        statuses = [(await reader.run_record(r.id)).status for r in (run, second)]
    assert statuses == [stead.RunStatus.COMPLETED] * 2


async def test_the_loop_looks_for_the_answer_to_a_waited_for_batch_only_while_alone(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While one run executes, a batch the run waits for (its model call's intent) has the
    server's answer looked for on the loop before the loop sleeps; while two execute, the
    loop has other work and no batch does."""
    from stead.store.postgres import wire
    from stead.store.postgres.writer import PostgresWriter

    spins: list[tuple[str, float]] = []
    finish_soon = wire.Wire.finish_soon
    phase = "one"

    def recorded(self: Any, loop: Any, done: Any, *, spin: float = 0.0) -> None:
        spins.append((phase, spin))
        finish_soon(self, loop, done, spin=spin)

    monkeypatch.setattr(wire.Wire, "finish_soon", recorded)
    entered, gate = asyncio.Event(), asyncio.Event()

    @stead.tool(recovery="safe", blocking=False)
    async def hold() -> str:
        """Wait for the test."""
        entered.set()
        await gate.wait()
        return "held"

    def answer(request: stead.ModelRequest) -> object:
        if request.messages[-1].kind == "user" and request.messages[-1].content == "hold":
            return [stead.ToolCall(name="hold", arguments={}, id="c1")]
        return "done"

    agent = stead.Agent(id="a", version="1", model=FunctionModel(answer), tools=[hold])
    async with await stead.App(agents=[agent]).open(_store(schema)) as runtime:
        first = await runtime.submit("a", session_id="s1", request_id="r", prompt="go")
        assert (await first.result()).output == "done"
        held = await runtime.submit("a", session_id="s2", request_id="r", prompt="hold")
        await entered.wait()
        phase = "two"
        second = await runtime.submit("a", session_id="s3", request_id="r", prompt="go")
        assert (await second.result()).output == "done"
        phase = "after"
        gate.set()
        assert (await held.result()).output == "done"
    assert any(spin == PostgresWriter.spin > 0 for seen, spin in spins if seen == "one"), spins
    beside = [spin for seen, spin in spins if seen == "two"]
    assert beside != [] and set(beside) == {0.0}, spins


async def test_a_runs_end_and_the_claim_it_calls_for_share_one_transaction(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The next run of a session becomes runnable when the one before it ends: the scheduler
    queues its claim right behind the transaction that ends the run, so the worker looks
    again without another round trip, and starts the next run from that claim's answer."""
    from stead.journal import transitions
    from stead.store.postgres import store as pg

    claims: list[tuple[int, list[str]]] = []
    ends: list[tuple[int, str]] = []
    claim, complete = pg.PostgresStore._claim, transitions.complete

    def spy_claim(self: Any, tx: Any, **options: Any) -> Any:
        found, wakeup = claim(self, tx, **options)
        claims.append((id(tx), [c.run_id for c in found]))
        return found, wakeup

    def spy_complete(tx: Any, run_id: str, **options: Any) -> bool:
        ends.append((id(tx), run_id))
        return complete(tx, run_id, **options)

    monkeypatch.setattr(pg.PostgresStore, "_claim", spy_claim)
    monkeypatch.setattr(transitions, "complete", spy_complete)
    entered, gate = asyncio.Event(), asyncio.Event()
    store = _store(schema)
    async with await paused_app(entered, gate).open(store, max_concurrent_runs=1) as runtime:
        first = await runtime.submit("a", session_id="s", request_id="r1", prompt="go")
        await asyncio.wait_for(entered.wait(), 10)
        # The tool's intent commits INTENT_HOLD after it started, and the look its commit
        # wakes could otherwise share a batch with the run's end.
        await until_tool_intent_written(first)
        second = await runtime.submit(
            "a", session_id="s", request_id="r2", prompt="go", enqueue=True
        )
        assert await second.status() is stead.RunStatus.QUEUED
        gate.set()
        assert (await first.result(timeout=10)).output == "done"
        assert (await second.result(timeout=10)).output == "done"
    ended = next(tx for tx, run_id in ends if run_id == first.id)
    assert [found for tx, found in claims if tx == ended] == [[second.id]], (claims, ends)
    # the claim was the only one that found it
    assert sum(found.count(second.id) for _, found in claims) == 1


async def test_a_claim_taken_with_a_submission_and_no_room_is_given_back() -> None:
    """The room a runtime had when it submitted may be gone when the claim comes back: the
    scheduler gives the claim back for any worker to take."""
    from stead.journal.records import Claim
    from stead.runtime.scheduler import Scheduler

    released: list[Claim] = []

    class Store:
        async def release_claims(self, claims: list[Claim]) -> None:
            released.extend(claims)

    async def execute(claim: Claim, begun: object) -> bool:
        raise AssertionError("nothing runs without room")

    scheduler = Scheduler(Store(), execute, max_concurrent_runs=1)  # type: ignore[arg-type]
    scheduler.adopt(Claim("run_1", 3))  # never started: no room
    for _ in range(100):
        if released:
            break
        await asyncio.sleep(0.01)
    assert released == [Claim("run_1", 3)]
    assert not scheduler.active


async def test_with_no_runtime_a_client_applies_the_command_and_the_next_runtime_goes_on(
    schema: str,
) -> None:
    wired: list[str] = []
    app = _bank(wired)
    async with await app.open(_store(schema)) as runtime:
        run = await runtime.submit("bank", session_id="s", request_id="r", prompt="wire")
        await _until(run, stead.RunStatus.WAITING)
    async with stead.Client(_store(schema)) as client:
        (pending,) = await client.list_interactions(status="pending")
        await client.respond(pending.interaction_id, stead.Approve())
        assert (await client.get_run(run.id).status()) is stead.RunStatus.PENDING
    async with await app.open(_store(schema)) as runtime:
        assert (await runtime.get_run(run.id).result(timeout=10)).output == "Wired 500."
    assert wired == [f"{run.id}/tool:1:w"]


async def test_a_killed_workers_run_continues_on_another_worker_within_its_lease_and_a_second(
    schema: str,
) -> None:
    from tests._pg_child import LEASE, build_app

    # The other worker is up before the kill, but takes no run until then.
    async with await build_app().open(_store(schema, lease_seconds=LEASE), resume=False) as other:
        child = subprocess.Popen(
            [sys.executable, str(CHILD), str(POSTGRES_URL), schema],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=Path(__file__).parent.parent,
        )
        try:
            assert child.stdout is not None
            line = await asyncio.wait_for(asyncio.to_thread(child.stdout.readline), 30)
            assert json.loads(line) == {"started": "tool:1:w"}, child.stderr
        finally:
            child.send_signal(signal.SIGKILL)
            child.communicate()  # waits, and closes the pipes
        killed = time.monotonic()
        assert other.health()["worker"] == other.store.worker  # host:pid:random
        assert other.health()["worker"].split(":")[1] == str(os.getpid())
        await other.resume()
        (run,) = (await other.list_runs()).runs
        handle = other.get_run(run.id)
        await _until(handle, stead.RunStatus.NEEDS_ATTENTION)
        assert time.monotonic() - killed <= LEASE + 1.0
        assert (await handle.run()).attention_key == "tool:1:w"
        await handle.resolve("tool:1:w", output="wired 500 (checked by hand)")
        assert (await handle.result(timeout=10)).output == "Wired."


async def test_a_waiter_on_a_worker_that_lost_the_lease_hears_the_end_the_other_committed(
    schema: str,
) -> None:
    """result() of a run executing here waits for its end without reading the journal. If this
    worker's heartbeat stalls past the lease and another worker finishes the run while the
    execution here hangs, unaware, the waiter here still hears of the end: after a lease's
    time without one, it reads the journal. The next heartbeat that gets through stops the
    execution here."""
    calls: list[int] = []

    @stead.tool(recovery="safe", blocking=False)
    async def look() -> str:
        """Look."""
        calls.append(1)
        if len(calls) == 1:
            await asyncio.Event().wait()  # the first execution hangs here
        return "seen"

    model = ScriptedModel([[stead.ToolCall(name="look", arguments={}, id="c")], "Done."])
    app = stead.App(agents=[stead.Agent(id="a", version="1", model=model, tools=[look])])
    lease = 1.0
    stalling = _store(schema, lease_seconds=lease)
    stalled = True
    extend = stalling.extend_leases

    async def heartbeat(claims: Any) -> set[str]:
        if stalled:  # its round trips never arrive: nothing extended, nothing heard
            return set()
        return await extend(claims)

    stalling.extend_leases = heartbeat
    async with await app.open(stalling) as here:
        run = await here.submit("a", session_id="s", request_id="r", prompt="go")
        waiter = asyncio.create_task(run.result())
        while not calls:
            await asyncio.sleep(0.01)
        async with await app.open(_store(schema, lease_seconds=lease)) as other:
            finished = await other.get_run(run.id).result(timeout=10 * lease)
            assert finished.output == "Done." and len(calls) == 2
            heard = await asyncio.wait_for(waiter, 3 * lease)
            assert heard.output == "Done." and heard.run_id == run.id
            # The heartbeat that gets through hears that another worker took the run over
            # (and let it go since): the hung execution stops, and its slot is free again.
            stalled = False
            for _ in range(int(30 * lease)):
                if run.id not in here._scheduler.active:
                    break
                await asyncio.sleep(0.1)
            assert run.id not in here._scheduler.active


async def test_a_waiter_for_a_run_elsewhere_reads_when_a_notification_says_so(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """result() of a run that does not execute here (parked for an approval, then finished by
    another worker) reads the journal when the schema's notifications say a run was let go,
    not at every poll: without news it reads once."""
    import stead.runtime.events as events_module
    import stead.runtime.runtime as runtime_module
    from stead.store.postgres import store as pg

    monkeypatch.setattr(pg._Listener, "fallback", 3600.0)  # no timed wake-ups
    reads = counted_outcome_reads(monkeypatch, runtime_module)
    wired: list[str] = []
    app = _bank(wired)
    async with await app.open(_store(schema)) as worker:
        run = await worker.submit("bank", session_id="s", request_id="r", prompt="wire")
        await _until(run, stead.RunStatus.WAITING)
        async with await app.open(_store(schema), resume=False) as here:  # executes nothing
            waiter = asyncio.create_task(here.get_run(run.id).result())
            await asyncio.sleep(events_module.REMOTE_POLL * 5)
            assert reads == [run.id] and not waiter.done()
            async with stead.Client(_store(schema)) as client:
                (pending,) = await client.list_interactions(status="pending")
                await client.respond(pending.interaction_id, stead.Approve())
            outcome = await asyncio.wait_for(waiter, 10)
            assert outcome.output == "Wired 500." and wired == [f"{run.id}/tool:1:w"]
            # The approval and the run's end woke it; each look read once at most.
            assert 2 <= len(reads) <= 3


async def test_a_clients_wait_for_a_run_reads_when_a_notification_says_so(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client's result() on PostgreSQL reads the journal when the schema's notifications say
    a run was let go (here: answered, then ended by the worker), not every poll."""
    import stead.client as client_module
    from stead.store.postgres import store as pg

    monkeypatch.setattr(pg._Listener, "fallback", 3600.0)  # no timed wake-ups
    reads = counted_outcome_reads(monkeypatch, client_module)
    wired: list[str] = []
    async with await _bank(wired).open(_store(schema)) as worker:
        run = await worker.submit("bank", session_id="s", request_id="r", prompt="wire")
        await _until(run, stead.RunStatus.WAITING)
        async with stead.Client(_store(schema)) as waiting:
            waiter = asyncio.create_task(waiting.result(run.id, timeout=10))
            await asyncio.sleep(client_module.POLL_INTERVAL * 10)
            assert reads == [run.id] and not waiter.done()
            async with stead.Client(_store(schema)) as client:
                (pending,) = await client.list_interactions(status="pending")
                await client.respond(pending.interaction_id, stead.Approve())
            outcome = await waiter
            assert outcome.output == "Wired 500." and wired == [f"{run.id}/tool:1:w"]
            assert 2 <= len(reads) <= 3  # the answer and the run's end woke it


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "stead", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
        check=False,
    )


async def test_the_stead_command_takes_a_postgresql_url_and_a_schema(schema: str) -> None:
    wired: list[str] = []
    app = _bank(wired)
    async with await app.open(_store(schema)) as runtime:
        run = await runtime.submit("bank", session_id="s", request_id="r", prompt="wire")
        await _until(run, stead.RunStatus.WAITING)
    where = ["--db", str(POSTGRES_URL), "--schema", schema]
    listed = await asyncio.to_thread(_cli, "interactions", "list", *where, "--json")
    assert listed.returncode == 0, listed.stderr
    (pending,) = json.loads(listed.stdout)["interactions"]
    assert pending["key"] == "approval:1:w"
    # the URL and the schema from the environment, as a deployment sets them
    env = {"STEAD_DB": str(POSTGRES_URL), "STEAD_SCHEMA": schema}
    approved = await asyncio.to_thread(_cli, "approve", pending["interaction_id"], env=env)
    assert approved.returncode == 0, approved.stderr
    shown = await asyncio.to_thread(_cli, "runs", "show", run.id, *where, "--json")
    assert json.loads(shown.stdout)["run"]["status"] == "pending"
    async with await app.open(_store(schema)) as runtime:
        assert (await runtime.get_run(run.id).result(timeout=10)).output == "Wired 500."


def test_the_stead_command_never_prints_a_password() -> None:
    done = _cli("runs", "list", "--db", "postgresql://ana:hunter2-secret@127.0.0.1:1/orders")
    assert done.returncode == 1
    assert "hunter2-secret" not in done.stderr + done.stdout
    assert "127.0.0.1:1, database 'orders'" in done.stderr


def _shop(calls: list[str], fail_first: bool = False) -> stead.App:
    """Runs that end up in every status: completed, waiting, failed, cancelled, queued."""

    @stead.tool(recovery="idempotent", approval=lambda args: args["amount"] > 100)
    async def refund(order: str, amount: int, ctx: stead.ToolContext) -> str:
        """Refund an order."""
        calls.append(ctx.operation_id)
        return f"refunded {amount} on {order}"

    def answer(request: stead.ModelRequest) -> Any:
        # this run's prompt: the last user message (a session's history comes before it)
        users = [m for m in request.messages if isinstance(m, stead.UserMessage)]
        prompt = users[-1].content
        last = request.messages[-1]
        if prompt == "broken" and fail_first:
            raise stead.ModelError("bad request", retryable=False)
        if isinstance(last, stead.ToolResultMessage):
            return f"done: {last.content}"
        if prompt.startswith("refund"):
            _, order, amount = prompt.split()
            return [
                stead.ToolCall(name="refund", arguments={"order": order, "amount": int(amount)})
            ]
        return f"echo {prompt}"

    from stead.testing import FunctionModel

    agent = stead.Agent(id="shop", version="1", model=FunctionModel(answer), tools=[refund])
    return stead.App(agents=[agent])


async def test_migrate_store_copies_every_status_and_the_workers_finish_the_rest(
    schema: str, tmp_path: Path
) -> None:
    from tests._journal import journal_events

    db = tmp_path / "shop.db"
    calls: list[str] = []
    async with await _shop(calls, fail_first=True).open(stead.SqliteStore(db)) as runtime:
        done = await runtime.submit("shop", session_id="a", request_id="1", prompt="refund o1 20")
        await done.result(timeout=10)
        waiting = await runtime.submit(
            "shop", session_id="b", request_id="1", prompt="refund o2 500"
        )
        await _until(waiting, stead.RunStatus.WAITING)
        queued = await runtime.submit(
            "shop", session_id="b", request_id="2", prompt="hello", enqueue=True
        )
        failed = await runtime.submit("shop", session_id="c", request_id="1", prompt="broken")
        with pytest.raises(stead.RunFailed):
            await failed.result(timeout=10)
        cancelled = await runtime.submit(
            "shop", session_id="d", request_id="1", prompt="refund o3 900"
        )
        await _until(cancelled, stead.RunStatus.WAITING)
        await cancelled.cancel("customer withdrew")
    before = journal_events(db)
    source = db.read_bytes()

    url = str(POSTGRES_URL)
    moved = await asyncio.to_thread(
        _cli, "migrate-store", str(db), url, "--schema", schema, "--json"
    )
    assert moved.returncode == 0, moved.stderr
    report = json.loads(moved.stdout)
    assert report["verified"] and report["rows"]["stead_runs"] == 5
    assert db.read_bytes() == source  # the source is only read
    again = await asyncio.to_thread(_cli, "migrate-store", str(db), url, "--schema", schema)
    assert again.returncode == 1 and "is not empty (5 rows in stead_runs)" in again.stderr
    import psycopg

    # The planner has statistics for the copy at once (without, it reads a session's runs
    # through the status index).
    with psycopg.connect(url) as conn:
        analyzed = conn.execute(
            "SELECT count(*) FROM pg_stats WHERE schemaname = %s AND tablename = 'stead_runs'",
            (schema,),
        ).fetchone()
    assert analyzed is not None and analyzed[0] > 0

    async with stead.Client(_store(schema)) as client:
        statuses = {r.id: r.status for r in (await client.list_runs()).runs}
        copied = await client.run_record(done.id)
        events = [e async for e in client.events(done.id)]
    assert statuses == {
        done.id: stead.RunStatus.COMPLETED,
        waiting.id: stead.RunStatus.WAITING,
        queued.id: stead.RunStatus.QUEUED,
        failed.id: stead.RunStatus.FAILED,
        cancelled.id: stead.RunStatus.CANCELLED,
    }
    assert copied.number == 1
    assert [(e.sequence, e.kind, e.data) for e in events] == [
        (e.sequence, e.kind, e.data) for e in before if e.run_id == done.id
    ]

    async with await _shop(calls).open(_store(schema)) as runtime:
        (pending,) = await runtime.list_interactions(status="pending")
        await runtime.get_run(waiting.id).respond(pending.interaction_id, stead.Approve())
        assert (await runtime.get_run(waiting.id).result(timeout=10)).output.startswith("done")
        assert (await runtime.get_run(queued.id).result(timeout=10)).output == "echo hello"
        await runtime.get_run(failed.id).retry()
        assert (await runtime.get_run(failed.id).result(timeout=10)).output == "echo broken"
        every = await runtime.store.read(lambda tx: tx.events_after(None, 0, 1 << 40))
    # sequences go on where SQLite left them: none reused, none skipped
    assert [e.sequence for e in every] == list(range(1, len(every) + 1))
    assert len(every) > len(before)
    assert calls == [f"{done.id}/tool:1:call_1_1", f"{waiting.id}/tool:1:call_1_1"]


async def test_migrate_store_refuses_a_file_a_runtime_owns(schema: str, tmp_path: Path) -> None:
    db = tmp_path / "live.db"
    async with await _shop([]).open(stead.SqliteStore(db)):
        moved = await asyncio.to_thread(
            _cli, "migrate-store", str(db), str(POSTGRES_URL), "--schema", schema
        )
    assert moved.returncode == 1
    assert "a runtime owns" in moved.stderr and "stop it first" in moved.stderr
