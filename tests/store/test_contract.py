"""The store contract: the row operations and every transition, run against each backend.

Written only against the journal's protocols (``Store.transact``/``read`` and ``Tx``), so a new
backend (PostgreSQL next) joins by adding itself to ``BACKENDS`` and passing this file.
"""

from __future__ import annotations

import asyncio
import functools
import os
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import stead
from stead.journal import transitions
from stead.journal.commands import Cancel, Fork, Respond, Retry, command_to_json
from stead.journal.keys import history_node
from stead.journal.records import RunStatus, Writes
from stead.testing import FakeClock

from .._journal import submission

BACKENDS = ["sqlite", "postgres"]
POSTGRES_URL = os.environ.get("STEAD_TEST_POSTGRES_URL")


class Journal:
    """A backend opened as its owner, with the calls the tests make."""

    def __init__(self, store: Any, clock: FakeClock) -> None:
        self.store = store
        self.clock = clock

    async def do(self, fn: Callable[..., Any], **kwargs: Any) -> Any:
        return await self.store.transact(functools.partial(fn, **kwargs), durability="barrier")

    async def read(self, fn: Callable[[Any], Any]) -> Any:
        return await self.store.read(fn)

    async def number(self, run_id: str) -> int:
        """The run's ``number``, which an operation's intent names its run by."""
        return int(await self.read(lambda tx: tx.get_run(run_id).number))

    async def submit(self, run_id: str, session: str, request: str = "r", **extra: Any) -> Any:
        return await self.store.transact(
            submission(run_id, session, request, **extra), durability="barrier"
        )


@pytest.fixture(params=BACKENDS)
async def journal(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Journal]:
    clock = FakeClock()
    store: Any
    if request.param == "postgres":
        if not POSTGRES_URL:
            pytest.skip("STEAD_TEST_POSTGRES_URL is not set")
        from stead.store.postgres import PostgresStore

        schema = f"contract_{uuid.uuid4().hex[:12]}"
        store = PostgresStore(POSTGRES_URL, schema=schema, clock=clock)
    else:
        store = stead.SqliteStore(tmp_path / "contract.db", clock=clock)
    loop = asyncio.get_running_loop()
    await asyncio.to_thread(store.acquire, loop, lambda events: None, lambda error: None)
    try:
        yield Journal(store, clock)
    finally:
        await store.aclose()
        if request.param == "postgres":
            await asyncio.to_thread(_drop_schema, store)


def _drop_schema(store: Any) -> None:
    conn = store.connect()
    try:
        conn.execute(f'DROP SCHEMA "{store.schema}" CASCADE')
    finally:
        conn.close()


def _registered(run: Any) -> bool:
    return True


# -- runs ------------------------------------------------------------------------------------


async def test_submit_is_idempotent_per_request_and_orders_a_session(journal: Journal) -> None:
    assert await journal.submit("run-1", "s") == ("run-1", True)
    assert await journal.submit("run-x", "s") == ("run-1", False)  # the same request again
    with pytest.raises(stead.ConflictError, match="of session 's' already belongs to run run-1"):
        await journal.submit("run-y", "s", submission="other")
    with pytest.raises(stead.ConflictError, match=r"unfinished run run-1 \(pending\)"):
        await journal.submit("run-2", "s", request="r2")
    assert await journal.submit("run-2", "s", request="r2", enqueue=True) == ("run-2", False)
    with pytest.raises(
        stead.ConflictError, match="run id 'run-2' is taken by session 's' request 'r2'"
    ):
        await journal.submit("run-2", "t")
    with pytest.raises(stead.LimitError, match="max_pending_runs"):
        await journal.submit("run-3", "u", max_pending=2)
    runs = await journal.read(
        lambda tx: tx.list_runs(
            session_id="s", agent_id=None, statuses=None, before_number=None, limit=10
        )
    )
    assert [(r.id, r.status) for r in runs] == [
        ("run-2", RunStatus.QUEUED),
        ("run-1", RunStatus.PENDING),
    ]
    events = await journal.read(lambda tx: tx.events_after(None, 0, 100))
    assert [(e.run_id, e.kind, e.data["status"]) for e in events] == [
        ("run-1", "submitted", "pending"),
        ("run-2", "submitted", "queued"),
    ]


async def test_runnable_runs_are_session_heads_in_submission_order(journal: Journal) -> None:
    await journal.submit("a1", "a")
    await journal.submit("a2", "a", request="r2", enqueue=True)
    await journal.submit("b1", "b")
    assert await journal.read(lambda tx: tx.runnable(10, set())) == ["a1", "b1"]
    assert await journal.read(lambda tx: tx.runnable(10, {"a1"})) == ["b1"]
    await journal.do(transitions.cancel, run_id="a1", reason="no")
    assert await journal.read(lambda tx: tx.runnable(10, set())) == ["a2", "b1"]


async def test_begin_claims_a_runnable_run_once(journal: Journal) -> None:
    await journal.submit("run-1", "s")
    begun = await journal.do(transitions.begin, run_id="run-1", registered=_registered)
    assert begun is not None and begun.run.status is RunStatus.RUNNING
    assert begun.operations == [] and begun.run.history_length == 0
    assert begun.run.history_run is None
    await journal.do(transitions.cancel, run_id="run-1", reason=None)
    assert await journal.do(transitions.begin, run_id="run-1", registered=_registered) is None
    assert await journal.do(transitions.begin, run_id="nope", registered=_registered) is None


async def test_an_unregistered_definition_needs_attention(journal: Journal) -> None:
    await journal.submit("run-1", "s")
    assert await journal.do(transitions.begin, run_id="run-1", registered=lambda run: False) is None
    run = await journal.read(lambda tx: tx.get_run("run-1"))
    assert run.status is RunStatus.NEEDS_ATTENTION and "not registered" in run.error["reason"]


async def _interruptions(journal: Journal) -> tuple[int, int | None]:
    return await journal.read(lambda tx: tx.interruptions("run-1"))  # type: ignore[no-any-return]


async def test_executions_interrupted_in_a_row_with_nothing_committed_need_attention(
    journal: Journal,
) -> None:
    """A run begun again while ``running`` resumes an interrupted execution: counted, and at
    the limit sent to needs_attention. Anything the journal gained in between (an intent, a
    result) starts the count again, and so does a retry."""
    await journal.submit("run-1", "s")
    begin = functools.partial(journal.do, transitions.begin, run_id="run-1", registered=_registered)
    assert await begin() is not None  # the first execution: nothing to count
    assert await _interruptions(journal) == (0, None)
    resumed = await begin()  # it was interrupted
    assert resumed is not None and resumed.run.interruptions == 1  # as the journal has it
    assert (await _interruptions(journal))[0] == 1
    assert (await journal.read(lambda tx: tx.get_run("run-1"))).interruptions == 1
    await _started(journal, "tool:1:c1", recovery="safe")  # the second one wrote an intent
    assert await begin() is not None
    assert (await _interruptions(journal))[0] == 1  # counted afresh
    assert await begin() is not None  # nothing new since
    assert (await _interruptions(journal))[0] == 2
    events = await journal.read(lambda tx: tx.events_after("run-1", 0, 100))
    assert events[-1].data["resumed"] is True
    assert await begin() is None  # the third in a row: not executed again
    run = await journal.read(lambda tx: tx.get_run("run-1"))
    assert run.status is RunStatus.NEEDS_ATTENTION and run.error_kind == "interrupted"
    assert "interrupted 3 times in a row" in run.error["reason"]
    assert "max_interruptions" in run.error["reason"]
    assert run.attention_key is None and run.interruptions == 3

    await journal.do(transitions.retry, run_id="run-1")
    assert await _interruptions(journal) == (0, None)
    assert await begin() is not None  # after a retry the run executes again
    assert await begin() is not None
    assert await begin() is not None
    assert await begin() is None  # and has its three again
    bounded = functools.partial(begin, max_interruptions=10)
    await journal.do(transitions.retry, run_id="run-1")
    for _ in range(10):
        assert await bounded() is not None
    assert await bounded() is None


async def _approval_asked(journal: Journal, abandon: str | None = None) -> None:
    """run-1 asks for approval of a payment (giving up the intent ``abandon``, if any)."""
    await journal.do(
        transitions.request_interaction,
        run_id="run-1",
        interaction_id="int_1",
        key="approval:1:c1",
        kind="approval",
        tool="pay",
        arguments={"amount": 5},
        digest="d",
        payload=None,
        abandon=abandon,
    )


async def test_an_intent_given_up_for_an_approval_counts_as_progress(journal: Journal) -> None:
    """A tool that asks for approval first gives its intent up for the interaction in one
    transaction: the journal has one row fewer and one more, and an execution interrupted
    after that still wrote something new."""
    await journal.submit("run-1", "s")
    begin = functools.partial(journal.do, transitions.begin, run_id="run-1", registered=_registered)
    assert await begin() is not None
    await _started(journal, "tool:1:c1")
    assert await begin() is not None  # interrupted after writing an intent
    assert (await _interruptions(journal))[0] == 1
    await _approval_asked(journal, abandon="tool:1:c1")
    assert await begin() is not None  # interrupted again, after the approval was asked for
    assert (await _interruptions(journal))[0] == 1  # counted afresh: not 2


async def test_a_due_retry_wait_is_runnable_and_sets_the_next_wakeup(journal: Journal) -> None:
    await journal.submit("run-1", "s")
    await journal.do(transitions.begin, run_id="run-1", registered=_registered)
    due = journal.clock.now() + timedelta(seconds=30)
    await journal.do(
        transitions.stop,
        run_id="run-1",
        status=RunStatus.RETRY_WAIT,
        reason="busy",
        operation="model:1",
        kind="model_retry",
        next_attempt_at=due,
    )
    assert await journal.read(lambda tx: tx.next_wakeup()) == due
    assert await journal.read(lambda tx: tx.runnable(10, set())) == []
    journal.clock.advance(seconds=30)
    assert await journal.read(lambda tx: tx.runnable(10, set())) == ["run-1"]


# -- operations ------------------------------------------------------------------------------


async def _started(journal: Journal, key: str, recovery: str = "manual") -> None:
    await journal.do(
        transitions.start_operation,
        run_id="run-1",
        run_number=await journal.number("run-1"),
        key=key,
        position=1,
        kind="tool",
        recovery=recovery,
        input_hash="h",
        input={"tool": "pay", "call_id": "c1"},
        writes=None,
    )


async def test_an_operation_is_started_then_completed_once(journal: Journal) -> None:
    await journal.submit("run-1", "s")
    await _started(journal, "tool:1:c1")
    op = await journal.read(lambda tx: tx.get_operation("run-1", "tool:1:c1"))
    assert (op.status, op.recovery, op.attempts, op.result) == ("started", "manual", 1, None)
    await journal.do(
        transitions.restart_operation,
        run_id="run-1",
        run_number=await journal.number("run-1"),
        key="tool:1:c1",
        position=1,
        kind="tool",
        input={"tool": "pay", "call_id": "c1"},
        attempt=2,
        writes=None,
    )
    await journal.do(
        transitions.finish_operation,
        run_id="run-1",
        run_number=await journal.number("run-1"),
        key="tool:1:c1",
        position=1,
        kind="tool",
        input={"tool": "pay", "call_id": "c1"},
        result={"output": 1},
        writes=Writes(blobs=("{}",), usage={"requests": 1}),
    )
    op = await journal.read(lambda tx: tx.get_operation("run-1", "tool:1:c1"))
    assert (op.status, op.attempts, op.result) == ("completed", 2, {"output": 1})
    run = await journal.read(lambda tx: tx.get_run("run-1"))
    assert run.usage == {"requests": 1}


async def test_model_results_are_the_committed_responses_in_order(journal: Journal) -> None:
    await journal.submit("run-1", "s")
    for position, (key, kind, result) in enumerate(
        [
            ("model:1", "model", {"usage": {"input_tokens": 3}}),
            ("tool:1:c1", "tool", {"output": 1}),
            ("model:2", "model", {"usage": {"input_tokens": 5}}),
            ("model:3", "model", None),  # started, not committed
        ],
        start=1,
    ):
        await journal.do(
            transitions.start_operation,
            run_id="run-1",
            run_number=await journal.number("run-1"),
            key=key,
            position=position,
            kind=kind,
            recovery="safe",
            input_hash="h",
            input={"turn": position},
            writes=None,
        )
        if result is not None:
            await journal.do(
                transitions.finish_operation,
                run_id="run-1",
                run_number=await journal.number("run-1"),
                key=key,
                position=position,
                kind=kind,
                input={"turn": position},
                result=result,
                writes=None,
            )
    found = await journal.read(lambda tx: (tx.model_results("run-1"), tx.model_results("none")))
    assert found == ([{"usage": {"input_tokens": 3}}, {"usage": {"input_tokens": 5}}], [])


async def test_resolve_and_retry_continue_a_run_that_needs_attention(journal: Journal) -> None:
    await journal.submit("run-1", "s")
    await journal.do(transitions.begin, run_id="run-1", registered=_registered)
    await _started(journal, "tool:1:c1")
    await journal.do(
        transitions.stop,
        run_id="run-1",
        status=RunStatus.NEEDS_ATTENTION,
        reason="interrupted",
        operation="tool:1:c1",
        kind="needs_attention",
    )
    with pytest.raises(stead.NotFoundError, match="its operations: tool:1:c1"):
        await journal.do(transitions.resolve, run_id="run-1", key="tool:9:x", output=1)
    await journal.do(transitions.apply, command=Retry(run_id="run-1"), version_of=None)
    op = await journal.read(lambda tx: tx.get_operation("run-1", "tool:1:c1"))
    run = await journal.read(lambda tx: tx.get_run("run-1"))
    assert op.rerun and op.attempt_base == op.attempts and run.status is RunStatus.PENDING
    await journal.do(
        transitions.stop,
        run_id="run-1",
        status=RunStatus.NEEDS_ATTENTION,
        reason="again",
        operation="tool:1:c1",
        kind="needs_attention",
    )
    await journal.do(transitions.resolve, run_id="run-1", key="tool:1:c1", output={"ok": 1})
    await journal.do(transitions.resolve, run_id="run-1", key="tool:1:c1", output={"ok": 1})
    with pytest.raises(stead.ConflictError, match="never replaced"):
        await journal.do(transitions.resolve, run_id="run-1", key="tool:1:c1", output={"ok": 2})
    run = await journal.read(lambda tx: tx.get_run("run-1"))
    assert run.status is RunStatus.PENDING and run.attention_key is None


async def test_fork_copies_the_completed_operations_before_a_key(journal: Journal) -> None:
    await journal.submit("run-1", "s")
    await journal.do(transitions.begin, run_id="run-1", registered=_registered)
    for position, key in enumerate(("model:1", "tool:1:c1", "model:2"), start=1):
        await journal.do(
            transitions.start_operation,
            run_id="run-1",
            run_number=await journal.number("run-1"),
            key=key,
            position=position,
            kind="model",
            recovery="safe",
            input_hash="h",
            input={},
            writes=None,
        )
        await journal.do(
            transitions.finish_operation,
            run_id="run-1",
            run_number=await journal.number("run-1"),
            key=key,
            position=position,
            kind="model",
            input={},
            result={"n": position},
            writes=None,
        )
    command = Fork(
        run_id="run-1", before="model:2", new_run_id="run-2", session_id="f", request_id="f"
    )
    answer = await journal.do(transitions.apply, command=command, version_of=None)
    assert answer == {"run_id": "run-2", "ready": True}
    ops = await journal.read(lambda tx: tx.operations("run-2"))
    assert [(o.key, o.copied_from) for o in ops] == [
        ("model:1", "run-1"),
        ("tool:1:c1", "run-1"),
    ]
    again = await journal.do(transitions.apply, command=command, version_of=None)
    assert again == {"run_id": "run-2", "ready": False}


# -- interactions ----------------------------------------------------------------------------


async def test_a_response_is_recorded_once_and_frees_the_run(journal: Journal) -> None:
    await journal.submit("run-1", "s")
    await journal.do(transitions.begin, run_id="run-1", registered=_registered)
    await _approval_asked(journal)
    await journal.do(transitions.park, run_id="run-1", reason="approval requested")
    assert (await journal.read(lambda tx: tx.get_run("run-1"))).status is RunStatus.WAITING
    approve = {"kind": "approve", "reviewer": "ana", "note": None}
    with pytest.raises(stead.ValidationError, match=r"stead\.Approve or stead\.Deny"):
        await journal.do(transitions.respond, interaction_id="int_1", response={"kind": "answer"})
    await journal.do(transitions.apply, command=Respond("int_1", approve), version_of=None)
    await journal.do(transitions.respond, interaction_id="int_1", response=approve)
    with pytest.raises(stead.ConflictError, match="answered differently"):
        await journal.do(
            transitions.respond, interaction_id="int_1", response={"kind": "deny", "reason": "x"}
        )
    interaction = await journal.read(lambda tx: tx.get_interaction("int_1"))
    assert interaction.status == "responded" and interaction.response == approve
    assert (await journal.read(lambda tx: tx.get_run("run-1"))).status is RunStatus.PENDING
    with pytest.raises(stead.NotFoundError):
        await journal.do(transitions.respond, interaction_id="int_2", response=approve)


async def test_cancel_is_terminal_and_cancels_pending_interactions(journal: Journal) -> None:
    await journal.submit("run-1", "s")
    await _approval_asked(journal)
    assert await journal.do(transitions.apply, command=Cancel("run-1", "done"), version_of=None)
    assert not await journal.do(transitions.cancel, run_id="run-1", reason=None)
    interaction = await journal.read(lambda tx: tx.get_interaction("int_1"))
    assert interaction.status == "cancelled"
    with pytest.raises(stead.ConflictError, match="only failed and needs_attention"):
        await journal.do(transitions.retry, run_id="run-1")


# -- events, blobs, histories, the inbox -------------------------------------------------------


async def test_event_sequences_increase_without_gaps_and_page(journal: Journal) -> None:
    for i in range(5):
        await journal.submit(f"run-{i}", f"s{i}")
    events = await journal.read(lambda tx: tx.events_after(None, 0, 100))
    sequences = [e.sequence for e in events]
    assert sequences == list(range(sequences[0], sequences[0] + 5))
    page = await journal.read(lambda tx: tx.events_after(None, sequences[1], 2))
    assert [e.sequence for e in page] == sequences[2:4]
    assert await journal.read(lambda tx: tx.last_sequence("run-4")) == sequences[-1]


async def test_a_lazy_write_commits_on_its_own_after_a_commit_took_the_one_before(
    journal: Journal,
) -> None:
    """A lazy write waits for company, but not for ever: after a waited-for commit took the
    lazy write before it, the next one still commits on its own."""
    store = journal.store
    seen: list[str] = []

    def note(name: str, tx: Any) -> None:
        seen.append(name)

    first = store.transact(functools.partial(note, "lazy-1"), durability="lazy", isolated=False)
    await store.transact(functools.partial(note, "commit"), durability="commit", isolated=False)
    assert first.done() and seen == ["lazy-1", "commit"]
    # On SQLite the first one's timer is still set: it fires before the next one is due.
    await asyncio.sleep(0.001)
    second = store.transact(functools.partial(note, "lazy-2"), durability="lazy", isolated=False)
    await asyncio.wait_for(second, 5)
    assert seen == ["lazy-1", "commit", "lazy-2"]


async def test_a_queued_write_can_be_amended_until_its_commit_begins(journal: Journal) -> None:
    """``amend`` gives a write still waiting in the queue another function (a safe tool's
    result joining its intent, one row), among many queued writes; once its commit has begun,
    or ended, it refuses and the write stays as it was."""
    store = journal.store
    seen: list[str] = []

    def note(name: str, tx: Any) -> None:
        seen.append(name)

    queued = [
        store.transact(functools.partial(note, f"lazy-{n}"), durability="lazy", isolated=False)
        for n in range(50)
    ]
    assert store.amend(queued[10], functools.partial(note, "amended-10"))
    assert store.amend(queued[49], functools.partial(note, "amended-49"))
    await store.transact(functools.partial(note, "commit"), durability="commit", isolated=False)
    await asyncio.gather(*queued)
    expected = [f"lazy-{n}" for n in range(50)]
    expected[10], expected[49] = "amended-10", "amended-49"
    assert seen == [*expected, "commit"]
    assert not store.amend(queued[0], functools.partial(note, "too-late"))
    assert not store.amend(asyncio.get_running_loop().create_future(), lambda tx: None)
    later = store.transact(functools.partial(note, "lazy-50"), durability="lazy", isolated=False)
    assert store.amend(later, functools.partial(note, "amended-50"))
    await asyncio.wait_for(later, 5)
    assert seen[-1] == "amended-50" and "too-late" not in seen


async def test_a_history_chain_reads_back_verified(journal: Journal) -> None:
    from stead._json import digest_text

    bodies = ['{"m":1}', '{"m":2}', '{"m":3}']
    nodes, head = [], None
    for body in bodies:
        node = history_node(head, digest_text(body))
        nodes.append((node, head, digest_text(body)))
        head = node

    def write(tx: Any) -> None:
        for body in bodies:
            tx.put_blob(body)
        tx.put_history(nodes)
        tx.put_blob(bodies[0])  # stored once however often it is written

    await journal.do(write)
    assert await journal.read(lambda tx: tx.history(head, 3)) == bodies
    assert await journal.read(lambda tx: tx.history(nodes[1][0], 2)) == bodies[:2]
    assert await journal.read(lambda tx: tx.get_blob(digest_text(bodies[2]))) == bodies[2]
    with pytest.raises(LookupError):
        await journal.read(lambda tx: tx.history(head, 4))


async def test_the_inbox_keeps_order_and_answers_once(journal: Journal) -> None:
    first = await journal.do(lambda tx: tx.post_command(command_to_json(Retry("run-1"))))
    second = await journal.do(lambda tx: tx.post_command(command_to_json(Retry("run-2"))))
    posted = await journal.read(lambda tx: tx.posted_commands(10))
    assert [row[0] for row in posted] == [first, second]
    await journal.do(lambda tx: tx.answer_command(first, "applied", {"value": None}))
    await journal.do(lambda tx: tx.answer_command(first, "failed", {"value": 1}))  # once only
    assert await journal.read(lambda tx: tx.get_command(first)) == (
        first,
        {"name": "retry", "run_id": "run-1"},
        "applied",
        {"value": None},
    )
    assert [row[0] for row in await journal.read(lambda tx: tx.posted_commands(10))] == [second]
    journal.clock.advance(seconds=7200)
    deleted = await journal.do(lambda tx: tx.forget_answered(journal.clock.now()))
    assert deleted == 1
    assert await journal.read(lambda tx: tx.get_command(first)) is None
