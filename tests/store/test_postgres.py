"""What only the PostgreSQL store has: URLs and schemas, connection failures, migrations under
a lock, and event sequences shared by several processes' stores."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

import stead
from stead.journal import transitions
from stead.journal.events import StatusChanged

from .._journal import schema_at

POSTGRES_URL = os.environ.get("STEAD_TEST_POSTGRES_URL")
needs_postgres = pytest.mark.skipif(not POSTGRES_URL, reason="STEAD_TEST_POSTGRES_URL is not set")


def _store(url: str | None = None, **options: Any) -> Any:
    from stead.store.postgres import PostgresStore

    return PostgresStore(url or str(POSTGRES_URL), **options)


@pytest.fixture
def schema() -> Iterator[str]:
    name = f"pgtest_{uuid.uuid4().hex[:12]}"
    yield name
    if POSTGRES_URL:
        conn = _store(schema=name).connect()
        try:
            conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
        finally:
            conn.close()


async def _open(store: Any) -> Any:
    loop = asyncio.get_running_loop()
    await asyncio.to_thread(store.acquire, loop, lambda events: None, lambda error: None)
    return store


@pytest.fixture
async def opened(schema: str) -> AsyncIterator[list[Any]]:
    stores: list[Any] = []
    yield stores
    for store in stores:
        await store.aclose()


def test_a_url_that_is_not_postgresql_is_refused_before_anything_connects() -> None:
    pytest.importorskip("psycopg")
    with pytest.raises(stead.ValidationError, match=r"postgresql:// URL.*stead\.SqliteStore"):
        _store("sqlite:///tmp/x.db")
    with pytest.raises(stead.ValidationError, match="lowercase PostgreSQL identifier"):
        _store("postgresql://u@h/db", schema="Robert'); DROP TABLE x;--")


def test_the_password_never_shows() -> None:
    pytest.importorskip("psycopg")
    store = _store("postgresql://alice:s3cret-pw@db.example:5432/prod", schema="app")
    assert "s3cret-pw" not in repr(store) and "alice:***@db.example" in repr(store)


async def test_an_unreachable_server_is_one_clear_error_naming_host_and_database() -> None:
    pytest.importorskip("psycopg")
    store = _store("postgresql://alice:s3cret-pw@127.0.0.1:1/orders", schema="app")
    with pytest.raises(stead.StorageError) as caught:
        await _open(store)
    message = str(caught.value)
    assert "127.0.0.1:1" in message and "'orders'" in message and "s3cret-pw" not in message
    assert "check that the server is running" in message


@needs_postgres
async def test_a_missing_database_is_named(schema: str) -> None:
    url = urlsplit(str(POSTGRES_URL))._replace(path="/stead_no_such_database").geturl()
    with pytest.raises(stead.StorageError) as caught:
        await _open(_store(url, schema=schema))
    message = str(caught.value)
    assert "database 'stead_no_such_database'" in message and "does not exist" in message


@needs_postgres
async def test_a_schema_written_by_a_newer_stead_is_refused(schema: str, opened: list[Any]) -> None:
    from stead.store.postgres import SCHEMA_VERSION

    store = await _open(_store(schema=schema))
    await store.aclose()
    conn = store.connect()
    conn.execute("UPDATE stead_meta SET schema_version = %s", (SCHEMA_VERSION + 1,))
    conn.close()
    with pytest.raises(stead.SchemaVersionError, match=f"version {SCHEMA_VERSION + 1}, newer"):
        await _open(_store(schema=schema))


@needs_postgres
async def test_workers_opening_one_schema_at_once_migrate_it_once_and_all_run(
    schema: str, opened: list[Any]
) -> None:
    from stead.store.postgres.store import SCHEMA_VERSION

    stores = [_store(schema=schema) for _ in range(4)]
    opened.extend(await asyncio.gather(*(_open(s) for s in stores)))
    conn = stores[0].connect()
    rows = conn.execute("SELECT schema_version FROM stead_meta").fetchall()
    conn.close()
    assert rows == [(SCHEMA_VERSION,)]
    assert len({store.worker for store in stores}) == 4  # each worker has its own name


@needs_postgres
async def test_a_schema_of_version_4_is_migrated_and_its_runs_go_on(schema: str) -> None:
    """Version 5 drops the indexes of the sequences operation rows announce their events with
    (sequences come from the counter), version 6 adds a run's interruptions, version 7 keys
    operations by run and position: an older schema is migrated, and a run's events still read
    back in order, gap-free."""
    from stead.store.postgres.store import SCHEMA_VERSION
    from stead.testing import ScriptedModel

    old = _store(schema=schema)
    conn = old.connect()
    try:
        conn.execute(f'CREATE SCHEMA "{schema}"')
        schema_at(conn, 4, "postgres")
    finally:
        conn.close()

    @stead.tool(recovery="safe")
    def lookup(i: int) -> dict[str, int]:
        return {"i": i}

    model = ScriptedModel([[stead.ToolCall(name="lookup", arguments={"i": 1}, id="c")], "done"])
    app = stead.App(agents=[stead.Agent(id="a", version="1", model=model, tools=[lookup])])
    async with await app.open(_store(schema=schema)) as runtime:
        run = await runtime.submit("a", session_id="s", request_id="r", prompt="go")
        assert (await run.result()).output == "done"
        kinds = [event.kind async for event in run.events()]
    assert kinds[:1] == ["submitted"] and "tool_completed" in kinds
    conn = old.connect()
    try:
        version = conn.execute("SELECT schema_version FROM stead_meta").fetchone()[0]
        indexes = {
            row[0]
            for row in conn.execute(
                "SELECT indexname FROM pg_indexes WHERE schemaname = %s", (schema,)
            )
        }
        sequences = [
            row[0]
            for row in conn.execute(
                "SELECT sequence FROM stead_events UNION ALL SELECT started_seq FROM "
                "stead_operations WHERE started_seq IS NOT NULL UNION ALL SELECT completed_seq "
                "FROM stead_operations WHERE completed_seq IS NOT NULL ORDER BY 1"
            )
        ]
    finally:
        conn.close()
    # 6: a run's interruptions in a row, counted; 7: operations keyed by run and position
    assert version == SCHEMA_VERSION == 7
    assert not {"stead_operations_started_seq", "stead_operations_completed_seq"} & indexes
    assert sequences == list(range(1, len(sequences) + 1))


def test_pool_and_lease_options_are_checked() -> None:
    pytest.importorskip("psycopg")
    url = "postgresql://u@h/db"
    with pytest.raises(stead.ValidationError, match="min_size must be an integer >= 0"):
        _store(url, min_size=-1)
    with pytest.raises(stead.ValidationError, match="max_size must be an integer >= 1"):
        _store(url, max_size=0)
    with pytest.raises(stead.ValidationError, match=r"min_size \(5\) must not exceed max_size"):
        _store(url, min_size=5, max_size=2)
    for bad in (0, -1, float("nan"), "15", True, 10_000):
        with pytest.raises(stead.ValidationError, match="lease_seconds must be a number"):
            _store(url, lease_seconds=bad)


@needs_postgres
async def test_transactions_on_many_connections_hand_out_sequences_once_in_commit_order(
    schema: str, opened: list[Any]
) -> None:
    from stead.store.postgres import PostgresTx

    store = await _open(_store(schema=schema))
    opened.append(store)
    connections = [store.connect() for _ in range(4)]

    def emit(conn: Any, count: int) -> None:
        for _ in range(10):
            conn.execute("BEGIN")
            tx = PostgresTx(conn, store.clock)
            for _ in range(count):
                transitions.emit(tx, run_id="run-x", payload=StatusChanged(status="running"))
            tx.write_events()
            tx.write_sequence()
            conn.execute("COMMIT")

    try:
        await asyncio.gather(
            *(asyncio.to_thread(emit, conn, n) for n, conn in enumerate(connections, start=1))
        )
    finally:
        for conn in connections:
            conn.close()
    events = await store.read(lambda tx: tx.events_after(None, 0, 10_000))
    assert [e.sequence for e in events] == list(range(1, 1 + 10 * (1 + 2 + 3 + 4)))


@needs_postgres
async def test_a_closed_store_says_how_to_open_it(schema: str) -> None:
    store = _store(schema=schema)
    with pytest.raises(stead.StorageError, match="is not open"):
        await store.read(lambda tx: None)


def _pending_run(tx: Any, run_id: str, session: str = "s") -> None:
    tx.insert_run(
        run_id=run_id,
        session_id=session,
        request_id=run_id,
        kind="agent",
        agent_id="a",
        version="1",
        status=stead.RunStatus.PENDING,
        input={"prompt": "go"},
        submission_digest="d",
    )


@needs_postgres
async def test_a_write_fenced_by_a_lost_claim_lands_nothing_and_poisons_nothing(
    schema: str, opened: list[Any]
) -> None:
    from stead.journal.records import Claim

    first = await _open(_store(schema=schema, lease_seconds=0.3))
    second = await _open(_store(schema=schema, lease_seconds=0.3))
    opened.extend([first, second])
    await first.transact(lambda tx: _pending_run(tx, "run-1"))
    (mine,), _ = await first.claim_runs(4, [])
    assert mine == Claim("run-1", 1)
    assert (await second.claim_runs(4, []))[0] == []  # leased: nobody else takes it
    assert await first.extend_leases([mine]) == set()  # the heartbeat keeps it
    await asyncio.sleep(0.5)  # no heartbeat: the lease runs out
    (theirs,), _ = await second.claim_runs(4, [])
    assert theirs == Claim("run-1", 2)
    assert await first.extend_leases([mine]) == {"run-1"}  # the heartbeat learns it is lost

    def note(tx: Any) -> None:
        tx.append_event("run-1", StatusChanged(status="running"))

    with pytest.raises(stead.LeaseLostError, match="lost its claim on run run-1"):
        await first.transact(note, fence=mine)
    lazy = first.transact(note, durability="lazy", isolated=False, fence=mine)
    landed = second.transact(note, fence=theirs)
    with pytest.raises(stead.LeaseLostError):
        await lazy
    await landed
    # The old claim's writes left nothing and poisoned nothing: the store works on.
    events = await first.read(lambda tx: tx.events_after("run-1", 0, 100))
    assert len(events) == 1
    assert await first.read(lambda tx: tx.get_run("run-1")) is not None
    # A run that leaves running drops its claim: its own worker's next write is fenced off too.
    begun = await second.transact(
        lambda tx: transitions.begin(tx, run_id="run-1", registered=lambda run: True),
        fence=theirs,
    )
    assert begun is not None and begun.run.status is stead.RunStatus.RUNNING
    await second.transact(lambda tx: transitions.park(tx, run_id="run-1", reason="x"), fence=theirs)
    with pytest.raises(stead.LeaseLostError):
        await second.transact(note, fence=theirs)


@needs_postgres
async def test_claims_keep_session_order_and_a_released_run_is_claimed_at_once(
    schema: str, opened: list[Any]
) -> None:
    first = await _open(_store(schema=schema))
    second = await _open(_store(schema=schema))
    opened.extend([first, second])

    def runs(tx: Any) -> None:
        _pending_run(tx, "s1-a", "s1")
        _pending_run(tx, "s1-b", "s1")
        _pending_run(tx, "s2-a", "s2")

    await first.transact(runs)
    claimed, _ = await first.claim_runs(1, [])
    assert [c.run_id for c in claimed] == ["s1-a"]  # submission order
    claimed_b, _ = await second.claim_runs(4, [])
    assert [c.run_id for c in claimed_b] == ["s2-a"]  # s1-b waits for s1-a: its session's head
    await first.release_claims(claimed)  # handed back (a draining worker)
    again, _ = await second.claim_runs(4, ["s2-a"])
    assert [(c.run_id, c.epoch) for c in again] == [("s1-a", 2)]


@needs_postgres
async def test_a_command_that_finds_no_free_connection_times_out_naming_the_pool(
    schema: str, opened: list[Any]
) -> None:
    import threading

    opened.append(await _open(_store(schema=schema)))
    async with stead.Client(_store(schema=schema, max_size=1), command_timeout=0.3) as client:
        pool = client.store._client._pool
        taken, release = threading.Event(), threading.Event()

        def hold_the_only_connection() -> None:
            with pool.connection():
                taken.set()
                release.wait(10)

        holder = threading.Thread(target=hold_the_only_connection)
        holder.start()
        try:
            await asyncio.to_thread(taken.wait, 10)
            full = r"within 0.3s.*Raise the store's max_size \(1\)"
            with pytest.raises(TimeoutError, match=full):
                await client.submit("a", session_id="s", request_id="r", prompt="go", version="1")
        finally:
            release.set()
            await asyncio.to_thread(holder.join)
        # Nothing was kept; with the connection back, the same submission goes through.
        assert (await client.list_runs()).runs == []
        run = await client.submit("a", session_id="s", request_id="r", prompt="go", version="1")
        assert (await run.run()).status is stead.RunStatus.PENDING


@needs_postgres
async def test_a_run_that_ends_or_may_go_on_wakes_the_workers_and_one_that_waits_does_not(
    schema: str, opened: list[Any]
) -> None:
    """When a run ends, its session's next run is up: every worker hears of it (any of them
    may have room), not only the one that ran it. A run parked for people wakes nobody."""
    store = await _open(_store(schema=schema))
    opened.append(store)
    listener = store.connect()
    listener.execute(f"LISTEN {store.channel}")

    def heard() -> list[str]:
        return [n.payload for n in listener.notifies(timeout=0.3, stop_after=1)]

    try:
        for run_id in ("ends", "parks"):
            await store.transact(lambda tx, run_id=run_id: _pending_run(tx, run_id, run_id))
        claims, _ = await store.claim_runs(2, [])
        assert {c.run_id for c in claims} == {"ends", "parks"}
        fence = {c.run_id: c for c in claims}
        for claim in claims:
            await store.transact(
                lambda tx, run_id=claim.run_id: transitions.begin(
                    tx, run_id=run_id, registered=lambda run: True
                ),
                fence=claim,
            )
        await asyncio.to_thread(lambda: list(listener.notifies(timeout=0.2)))  # drain

        def wait_for_people(tx: Any) -> None:
            tx.insert_interaction(
                interaction_id="i-1",
                run_id="parks",
                key="approval:1",
                kind="approval",
                tool="t",
                arguments={},
                digest="d",
                payload=None,
            )
            transitions.park(tx, run_id="parks", reason="approval")

        await store.transact(wait_for_people, fence=fence["parks"])
        assert await asyncio.to_thread(heard) == []
        await store.transact(
            lambda tx: transitions.stop(
                tx, "ends", stead.RunStatus.FAILED, "it failed", None, kind="error"
            ),
            fence=fence["ends"],
        )
        assert await asyncio.to_thread(heard) == [store.worker]  # the sender: it skips its own
    finally:
        listener.close()


@needs_postgres
async def test_a_result_for_an_operation_not_in_progress_is_refused_by_the_server(
    schema: str, opened: list[Any]
) -> None:
    """In a pipelined batch the server checks that an operation was in progress when its
    result is written; if not, nothing of the batch lands and the store fails closed, naming
    the operation."""
    store = await _open(_store(schema=schema))
    opened.append(store)
    await store.transact(lambda tx: _pending_run(tx, "run-1"))
    (claim,), _ = await store.claim_runs(4, [])
    fenced = store.fenced(claim)

    def note(tx: Any) -> None:
        tx.append_event("run-1", StatusChanged(status="running"))

    def finish(tx: Any) -> None:
        number = tx.get_run("run-1").number
        tx.complete_operation("run-1", "tool:1:nope", {"output": 1}, run_number=number, position=1)

    first = fenced.transact(note, durability="lazy", isolated=False)
    second = fenced.transact(finish, durability="lazy", isolated=False)
    with pytest.raises(stead.StorageError, match="operation tool:1:nope of run run-1 was not in"):
        await second
    with pytest.raises(stead.StorageError):
        await first
    reader = await _open(_store(schema=schema))
    opened.append(reader)
    assert await reader.read(lambda tx: tx.events_after("run-1", 0, 100)) == []


@needs_postgres
async def test_a_parent_parking_while_its_child_ends_elsewhere_neither_waits_nor_deadlocks(
    schema: str, opened: list[Any]
) -> None:
    """A parent's park and its child's end run on different workers. Whichever commits second
    sees the other (the parent never waits for a child that ended), and neither waits for a
    lock the other holds: the park's batch holds the sequence counter while the child's batch
    holds the child's row and waits for the counter."""
    first = await _open(_store(schema=schema, lease_seconds=30.0))
    second = await _open(_store(schema=schema, lease_seconds=30.0))
    opened.extend([first, second])
    await first.transact(lambda tx: _pending_run(tx, "parent", session="p"))
    await first.transact(lambda tx: _pending_run(tx, "child", session="c"))
    (parent,), _ = await first.claim_runs(1, [])
    (child,), _ = await second.claim_runs(1, [])
    for store, claim in ((first, parent), (second, child)):
        await store.fenced(claim).transact(
            lambda tx, run_id=claim.run_id: transitions.begin(
                tx, run_id=run_id, registered=lambda run: True
            )
        )
    gate = threading.Event()

    def park(tx: Any) -> None:
        gate.wait(5)  # the batch is open: the parent's row and the sequence counter are held
        transitions.park(
            tx,
            run_id="parent",
            reason="child",
            interactions=False,
            children={"child": ["completed", "failed", "cancelled"]},
        )

    parking = asyncio.ensure_future(first.fenced(parent).transact(park, durability="barrier"))
    await asyncio.sleep(0.2)
    ending = asyncio.ensure_future(  # holds the child's row, waits for the counter
        second.fenced(child).transact(
            lambda tx: transitions.complete(
                tx, run_id="child", outcome={"output": "done", "usage": {}}, writes=None
            )
        )
    )
    await asyncio.sleep(0.2)
    gate.set()
    await asyncio.wait_for(parking, 10)
    assert await asyncio.wait_for(ending, 10) is True
    parent_run = await first.read(lambda tx: tx.get_run("parent"))
    # The park found the child's write in flight and did not wait: the parent goes on.
    assert parent_run.status is stead.RunStatus.PENDING


@needs_postgres
async def test_a_child_ending_after_its_parent_parked_wakes_it(
    schema: str, opened: list[Any]
) -> None:
    store = await _open(_store(schema=schema, lease_seconds=30.0))
    opened.append(store)
    await store.transact(lambda tx: _pending_run(tx, "parent", session="p"))
    await store.transact(lambda tx: _pending_run(tx, "child", session="c"))
    await store.transact(
        lambda tx: tx.execute("UPDATE stead_runs SET parent_id = 'parent' WHERE id = 'child'")
    )
    claims, _ = await store.claim_runs(4, [])
    by_id = {claim.run_id: claim for claim in claims}
    for claim in claims:
        await store.fenced(claim).transact(
            lambda tx, run_id=claim.run_id: transitions.begin(
                tx, run_id=run_id, registered=lambda run: True
            )
        )
    await store.fenced(by_id["parent"]).transact(
        lambda tx: transitions.park(
            tx,
            run_id="parent",
            reason="child",
            interactions=False,
            children={"child": ["completed", "failed", "cancelled"]},
        ),
        durability="barrier",
    )
    assert (await store.read(lambda tx: tx.get_run("parent"))).status is stead.RunStatus.WAITING
    await store.fenced(by_id["child"]).transact(
        lambda tx: transitions.complete(
            tx, run_id="child", outcome={"output": "done", "usage": {}}, writes=None
        )
    )
    assert (await store.read(lambda tx: tx.get_run("parent"))).status is stead.RunStatus.PENDING


@needs_postgres
async def test_a_late_heartbeat_does_not_stop_a_newer_execution_of_the_same_run(
    schema: str, opened: list[Any]
) -> None:
    """A heartbeat speaks for the claims it sent: if the run was handed back and claimed here
    again (a new epoch) before its statement ran, the new execution goes on."""
    from stead.journal.records import Claim
    from stead.runtime.scheduler import Scheduler

    lease = 0.6
    store = await _open(_store(schema=schema, lease_seconds=lease))
    opened.append(store)
    await store.transact(lambda tx: _pending_run(tx, "R"))
    real_extend = store.extend_leases
    late = asyncio.Event()

    async def extend_late(claims: Any) -> Any:
        await late.wait()  # the writer is busy: the heartbeat's statement runs later
        return await real_extend(claims)

    store.extend_leases = extend_late
    outcome: dict[str, str] = {}

    async def execute(claim: Claim, begun: object) -> bool:
        if claim.epoch == 1:  # runs while the heartbeat takes (R, 1), then hands R back
            await asyncio.sleep(lease / 3 + 0.05)
            return True
        try:
            await asyncio.sleep(1.0)
            outcome["second"] = "finished"
        except asyncio.CancelledError:
            outcome["second"] = "cancelled"
            raise
        return False

    scheduler = Scheduler(store, execute, max_concurrent_runs=4, lease_seconds=lease)
    beat = asyncio.create_task(scheduler._beat())
    try:
        (first,), _ = await store.claim_runs(1, [])
        scheduler.start(first)
        await scheduler.active["R"]
        await scheduler._release()
        (second,), _ = await store.claim_runs(1, [])
        assert second == Claim("R", 2)
        scheduler.start(second)
        late.set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(scheduler.active["R"], 5)
    finally:
        beat.cancel()
    assert outcome == {"second": "finished"}
