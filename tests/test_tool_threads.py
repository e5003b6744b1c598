"""Where a tool's function runs: async ones on the loop, sync ones in a worker thread unless
declared ``blocking=False``."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import stead
from stead.testing import ScriptedModel


async def _threads_of(tmp_path: Path, **options: bool) -> tuple[int, int]:
    seen: list[int] = []

    @stead.tool(recovery="safe", **options)
    def where() -> str:
        """Say where."""
        seen.append(threading.get_ident())
        return "here"

    script = ScriptedModel([[stead.ToolCall(name="where", id="w")], "done"])
    agent = stead.Agent(id="a", version="1", model=script, tools=[where])
    async with await stead.App(agents=[agent]).open(stead.SqliteStore(tmp_path / "s.db")) as rt:
        run = await rt.submit("a", session_id="s", request_id="r", prompt="go")
        assert (await run.result()).output == "done"
    return seen[0], threading.get_ident()


async def test_a_sync_tool_runs_in_a_worker_thread(tmp_path: Path) -> None:
    tool_thread, loop_thread = await _threads_of(tmp_path)
    assert tool_thread != loop_thread


async def test_a_sync_tool_declared_non_blocking_runs_on_the_loop(tmp_path: Path) -> None:
    tool_thread, loop_thread = await _threads_of(tmp_path, blocking=False)
    assert tool_thread == loop_thread


def test_blocking_must_be_a_bool() -> None:
    with pytest.raises(stead.ValidationError, match="blocking must be True or False"):
        stead.tool(blocking="no")(lambda: None)  # type: ignore[call-overload]


# -- the worker threads themselves (stead._threads) ------------------------------------------


async def test_a_worker_thread_returns_the_result_raises_the_error_and_sees_the_context() -> None:
    import contextvars

    from stead._threads import run_in_thread

    current = contextvars.ContextVar("current", default="unset")
    current.set("caller")

    def boom() -> None:
        raise KeyError("missing")

    assert await run_in_thread(lambda a, b=0: a + b, 2, b=3) == 5
    assert await run_in_thread(current.get) == "caller"
    with pytest.raises(KeyError, match="missing"):
        await run_in_thread(boom)


async def test_a_loop_waiting_for_a_call_itself_hears_through_the_pipe_only_when_it_waits_there(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A loop with nothing else to do waits for a call's outcome itself. An outcome that is
    there when the loop looks (the thread, woken on the loop's CPU, mostly runs the call within
    the write that wakes it) is taken as it is, with no byte through the thread's answer pipe;
    a loop that waits on the pipe gets a byte there; an outcome that outlasts the wait comes
    through the mailbox. Every call gets its own answer, and no pipe is left with a byte."""
    import asyncio
    import os
    import select
    import time

    from stead import _threads

    pool = _threads._pool
    answered: list[int] = []  # answer pipes written to

    class _CountingOs:
        def __getattr__(self, name: str) -> Any:
            return getattr(os, name)

        def write(self, fd: int, data: bytes) -> int:
            if any(fd == worker.answer[1] for worker in pool.workers):
                answered.append(fd)
            return os.write(fd, data)

    monkeypatch.setattr(_threads, "os", _CountingOs())
    ready_first = True
    hand = _threads._Worker.hand

    def hand_and_let_it_run(worker: _threads._Worker) -> None:
        """Wake the thread; with ``ready_first``, return once it has run the call (as the
        thread woken on the loop's CPU mostly has before the loop looks)."""
        call = worker.calls[-1]
        hand(worker)
        deadline = time.monotonic() + 5
        while ready_first and call.outcome is None and time.monotonic() < deadline:
            time.sleep(0.0005)

    monkeypatch.setattr(_threads._Worker, "hand", hand_and_let_it_run)

    def slow(value: int, seconds: float) -> int:
        time.sleep(seconds)
        return value

    withdraw = _threads.wait_here_when(asyncio.get_running_loop(), lambda: True)
    try:
        await _threads.run_in_thread(int)  # a thread to wake
        answered.clear()
        assert [await _threads.run_in_thread(slow, n, 0) for n in range(5)] == list(range(5))
        assert answered == []  # taken as they were: no byte written, none to read

        ready_first = False
        monkeypatch.setattr(_threads, "HERE", 5.0)  # the loop waits on the pipe until answered
        assert [await _threads.run_in_thread(slow, n, 0.02) for n in range(3)] == [0, 1, 2]
        assert len(answered) == 3  # a byte for each wait on the pipe

        monkeypatch.setattr(_threads, "HERE", 0.001)  # each outlasts the loop's wait
        assert [await _threads.run_in_thread(slow, n, 0.05) for n in range(3)] == [0, 1, 2]
        assert len(answered) == 3  # came through the mailbox

        ready_first = True
        assert await _threads.run_in_thread(slow, 7, 0) == 7
        assert len(answered) == 3
    finally:
        withdraw()
    for worker in pool.workers:
        readable, _, _ = select.select([worker.answer[0]], [], [], 0)
        assert readable == [], "a byte was left in a thread's answer pipe"


async def test_the_warmest_idle_thread_takes_the_next_call() -> None:
    """Calls one after another reuse one thread (its stack and caches are warm)."""
    from stead._threads import run_in_thread

    idents = {await run_in_thread(threading.get_ident) for _ in range(20)}
    assert len(idents) == 1
    assert threading.get_ident() not in idents


async def test_calls_beyond_the_thread_limit_wait_for_a_free_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past MAX_THREADS a call waits in the backlog; every call still runs, once, and no more
    threads start than the limit."""
    import asyncio

    from stead import _threads

    monkeypatch.setattr(_threads, "_pool", _threads._Pool())
    monkeypatch.setattr(_threads, "MAX_THREADS", 3)
    release = threading.Event()
    ran: list[int] = []

    def work(n: int) -> int:
        release.wait(10)
        ran.append(n)
        return n

    calls = [_threads.run_in_thread(work, n) for n in range(10)]
    await asyncio.sleep(0.05)
    assert _threads._pool.threads == 3
    assert len(_threads._pool.backlog) == 7
    release.set()
    assert await asyncio.gather(*calls) == list(range(10))
    assert sorted(ran) == list(range(10))
    assert _threads._pool.threads == 3


async def test_calls_made_at_once_run_one_after_another_on_the_thread_just_woken(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Many runs call their tools in the same instant: a call that arrives while a thread has
    just started another waits for that thread instead of waking one more."""
    import asyncio

    from stead import _threads

    monkeypatch.setattr(_threads, "_pool", _threads._Pool())
    monkeypatch.setattr(_threads, "PATIENCE", 30.0)  # the thread is never given up on here
    idents = await asyncio.gather(*(_threads.run_in_thread(threading.get_ident) for _ in range(20)))
    assert len(set(idents)) == 1
    assert _threads._pool.threads == 1
    assert _threads._pool.busy == 0 and not _threads._pool.backlog


def _count_wakes(monkeypatch: pytest.MonkeyPatch, loop: Any) -> list[object]:
    """The callbacks other threads hand ``loop`` (each a wake-up of it), as they come."""
    wakes: list[object] = []
    plain = loop.call_soon_threadsafe

    def counted(callback: Any, *args: Any, **kwargs: Any) -> Any:
        wakes.append(callback)
        return plain(callback, *args, **kwargs)

    monkeypatch.setattr(loop, "call_soon_threadsafe", counted)
    return wakes


async def test_calls_finishing_while_the_loop_is_busy_wake_it_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Outcomes that arrive before the loop gets round to them share one wake-up of the loop
    (each wake-up is a hand-off between CPUs), and every caller still gets its own answer."""
    import asyncio
    import time

    from stead import _threads

    monkeypatch.setattr(_threads, "_pool", _threads._Pool())
    monkeypatch.setattr(_threads, "PATIENCE", 30.0)  # all ten run on one thread, in turn
    loop = asyncio.get_running_loop()
    wakes = _count_wakes(monkeypatch, loop)
    go = threading.Event()

    def square(n: int) -> int:
        go.wait(10)
        if n == 3:
            raise ValueError("three")
        return n * n

    calls = [_threads.run_in_thread(square, n) for n in range(10)]
    await asyncio.sleep(0)  # the loop turns: it hands the calls over
    go.set()
    mailbox = _threads._mailbox(loop)
    deadline = time.monotonic() + 10
    while len(mailbox.outcomes) < 10 and time.monotonic() < deadline:
        time.sleep(0.001)  # the loop is busy: it settles nothing meanwhile
    answers = await asyncio.gather(*calls, return_exceptions=True)
    assert len(wakes) == 1
    assert [a if isinstance(a, int) else str(a) for a in answers] == [
        0, 1, 4, "three", 16, 25, 36, 49, 64, 81,
    ]  # fmt: skip
    assert await _threads.run_in_thread(square, 5) == 25  # and the next one wakes it again
    assert len(wakes) == 2


async def test_calls_that_block_still_wait_side_by_side(monkeypatch: pytest.MonkeyPatch) -> None:
    """A call still waiting behind a busy thread after PATIENCE gets a thread of its own: four
    calls that can only finish together (a barrier) all finish, each exactly once."""
    import asyncio

    from stead import _threads

    monkeypatch.setattr(_threads, "_pool", _threads._Pool())
    barrier = threading.Barrier(4)
    ran: list[int] = []

    def meet(n: int) -> int:
        barrier.wait(10)
        ran.append(n)
        return n

    assert await asyncio.gather(*(_threads.run_in_thread(meet, n) for n in range(4))) == [
        0,
        1,
        2,
        3,
    ]
    assert sorted(ran) == [0, 1, 2, 3]
    assert _threads._pool.threads == 4
    assert _threads._pool.busy == 0 and not _threads._pool.backlog


async def test_calls_waiting_behind_a_blocked_thread_share_one_timer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Calls made at once wait behind the thread just woken; when it blocks, each gets a thread
    of its own after PATIENCE, from one look a loop (not one timer a call, which many runs
    calling tools at once would pay at every call)."""
    import asyncio

    from stead import _threads

    monkeypatch.setattr(_threads, "_pool", _threads._Pool())
    monkeypatch.setattr(_threads, "PATIENCE", 0.05)  # the ten calls are made within it
    loop = asyncio.get_running_loop()
    timers: list[object] = []
    plain = loop.call_later

    def counted(delay: float, callback: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(callback, "__name__", "") == "rescue":
            timers.append(callback)
        return plain(delay, callback, *args, **kwargs)

    monkeypatch.setattr(loop, "call_later", counted)
    go = threading.Event()

    def wait(n: int) -> int:
        go.wait(10)
        return n

    calls = [_threads.run_in_thread(wait, n) for n in range(10)]
    for _ in range(1000):
        if _threads._pool.threads == 10:
            break
        await asyncio.sleep(0.002)
    go.set()
    assert await asyncio.gather(*calls) == list(range(10))
    assert _threads._pool.threads == 10  # each blocked call got a thread of its own
    assert 1 <= len(timers) <= 3  # one look, and one more for calls made a moment later
    assert _threads._pool.busy == 0 and not _threads._pool.backlog


def _count_hands(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The worker threads woken for a call (a hand-off each), as they are woken."""
    from stead import _threads

    woken: list[object] = []
    plain = _threads._Worker.hand

    def counted(worker: Any) -> None:
        woken.append(worker)
        plain(worker)

    monkeypatch.setattr(_threads._Worker, "hand", counted)
    return woken


async def test_calls_made_before_the_loop_turns_wake_one_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Runs executing side by side call their tools between journal work that lets the
    interpreter's lock go (a thread woken for the first call would finish it and idle before
    the next): the calls made before the loop turns are handed over together, one wake-up."""
    import asyncio
    import time

    from stead import _threads

    monkeypatch.setattr(_threads, "_pool", _threads._Pool())
    woken = _count_hands(monkeypatch)
    calls = []
    for n in range(5):
        calls.append(_threads.run_in_thread(lambda n=n: n * n))
        time.sleep(0.002)  # the interpreter's lock is free: a woken thread would run now
    assert woken == []  # nothing handed over before the loop turns
    assert await asyncio.gather(*calls) == [0, 1, 4, 9, 16]
    assert len(woken) == 1
    assert _threads._pool.threads == 1
    assert _threads._pool.busy == 0 and not _threads._pool.backlog


async def test_a_thread_waiting_for_the_interpreter_lock_is_not_given_up_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The loop keeps the interpreter's lock longer than PATIENCE after handing calls over:
    the thread woken for them cannot begin, which is not blocking, so the calls behind it get
    no threads of their own (each would wait for the same lock)."""
    import asyncio
    import sys
    import time

    from stead import _threads

    monkeypatch.setattr(_threads, "_pool", _threads._Pool())
    calls = [_threads.run_in_thread(lambda n=n: n + 1) for n in range(10)]
    await asyncio.sleep(0)  # the loop turns: it hands the calls over
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1.0)  # the loop keeps the interpreter's lock while it computes
    try:
        end = time.monotonic() + 20 * _threads.PATIENCE
        while time.monotonic() < end:
            pass
    finally:
        sys.setswitchinterval(interval)
    assert await asyncio.gather(*calls) == list(range(1, 11))
    assert _threads._pool.threads == 1
    assert _threads._pool.busy == 0 and not _threads._pool.backlog


async def test_a_store_call_is_not_held_up_by_tools_blocked_on_every_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tools blocked on every thread the tools may have: a client's read still runs at once,
    on a thread of the stores' own pool (the tools' next call waits for one of theirs)."""
    import asyncio

    from stead import _threads

    monkeypatch.setattr(_threads, "_pool", _threads._Pool())
    monkeypatch.setattr(_threads, "_store_pool", _threads._Pool("stead-store"))
    monkeypatch.setattr(_threads, "MAX_THREADS", 2)
    release = threading.Event()
    tools = [_threads.run_in_thread(release.wait, 10) for _ in range(3)]
    readers: list[str] = []

    @stead.tool(recovery="safe")
    def noop() -> str:
        """Do nothing."""
        return "ok"

    agent = stead.Agent(id="a", version="1", model=ScriptedModel(["done"]), tools=[noop])
    path = tmp_path / "s.db"
    async with await stead.App(agents=[agent]).open(stead.SqliteStore(path)) as runtime:
        run = await runtime.submit("a", session_id="s", request_id="r", prompt="go")
        assert (await run.result()).output == "done"
    try:
        assert _threads._pool.threads == 2 and len(_threads._pool.backlog) == 1
        async with stead.Client(stead.SqliteStore(path)) as client:
            plain = client.store.client_read

            def read(fn: Any) -> Any:
                readers.append(threading.current_thread().name)
                return plain(fn)

            monkeypatch.setattr(client.store, "client_read", read)
            record = await asyncio.wait_for(client.run_record(run.id), 5)
        assert record.status == "completed"
        assert readers and all(name.startswith("stead-store-") for name in readers)
    finally:
        release.set()
    assert await asyncio.gather(*tools) == [True, True, True]


async def test_calls_blocked_in_two_pools_each_get_threads_of_their_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each pool looks after the calls waiting behind its own busy threads: with calls waiting
    in the tools' pool and in the stores' pool at once on one loop, both are given threads
    after PATIENCE (one pool's look must not stand in for the other's)."""
    import asyncio

    from stead import _threads

    monkeypatch.setattr(_threads, "_pool", _threads._Pool())
    monkeypatch.setattr(_threads, "_store_pool", _threads._Pool("stead-store"))
    monkeypatch.setattr(_threads, "PATIENCE", 0.02)
    tools, stores = threading.Barrier(2), threading.Barrier(2)
    calls = [
        _threads.run_in_thread(tools.wait, 10),
        _threads.run_in_thread(tools.wait, 10),  # waits behind the first, then gets a thread
        _threads.run_store_call(stores.wait, 10),
        _threads.run_store_call(stores.wait, 10),
    ]
    assert sorted(await asyncio.wait_for(asyncio.gather(*calls), 20)) == [0, 0, 1, 1]
    assert _threads._pool.threads == 2 and _threads._store_pool.threads == 2


linux_affinity = pytest.mark.skipif(
    not hasattr(__import__("os"), "sched_setaffinity"), reason="thread CPU affinity is Linux's"
)


class _Placing:
    """Every ``sched_setaffinity`` call recorded as (thread, CPUs), and the loop's thread kept
    on one CPU on request, so that where it runs cannot move between calls."""

    def __init__(self) -> None:
        import os

        self.everywhere = os.sched_getaffinity(0)
        self.pins: list[tuple[int, set[int]]] = []
        self.plain = os.sched_setaffinity

    def record(self, pid: int, cpus: Any) -> None:
        self.pins.append((pid, set(cpus)))
        self.plain(pid, cpus)

    def keep_loop_here(self) -> set[int]:
        """Keep the loop's thread on the CPU it runs on now (after the pool's threads exist:
        a thread starts with its creator's CPUs)."""
        from stead import _threads

        getcpu = _threads._cpu()
        assert getcpu is not None
        here = {getcpu()}
        self.plain(0, here)
        return here


@pytest.fixture
def placing(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Placing]:
    import os

    from stead import _threads

    monkeypatch.setattr(_threads, "_pool", _threads._Pool())
    placing = _Placing()
    monkeypatch.setattr(os, "sched_setaffinity", placing.record)
    try:
        yield placing
    finally:
        placing.plain(0, placing.everywhere)


def _where() -> tuple[int, set[int]]:
    import os

    return threading.get_native_id(), os.sched_getaffinity(0)


@linux_affinity
async def test_a_thread_wakes_on_the_loops_cpu_and_stays_there_between_quick_calls(
    placing: _Placing, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Waking a thread on an idle CPU costs tens of microseconds each way on a small virtual
    machine: the loop asks for the thread to be woken on its own CPU, once. The thread stays
    there between quick calls, so later hand-offs make no system call for it."""
    import os

    from stead import _threads

    # However slowly a loaded machine runs these calls, none counts as long.
    monkeypatch.setattr(_threads, "SHARE", 60.0)
    first, during_first = await _threads.run_in_thread(_where)  # starts the thread: no pin
    assert placing.pins == [] and during_first == placing.everywhere
    here = placing.keep_loop_here()
    for _ in range(5):
        again, during = await _threads.run_in_thread(_where)  # wakes the idle one
        assert again == first and during == here
    assert placing.pins == [(first, here)]  # pinned once, for all five
    assert os.sched_getaffinity(first) == here  # and there it waits for the next call


@linux_affinity
async def test_a_call_that_runs_long_is_let_run_on_any_cpu(
    placing: _Placing, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call must not keep the loop's CPU for long (a tool that computes without the
    interpreter lock would share one CPU with the loop while the other idles): after
    ``SHARE`` seconds its thread may run anywhere again."""
    import os
    import time

    from stead import _threads

    monkeypatch.setattr(_threads, "SHARE", 0.05)
    thread, _ = await _threads.run_in_thread(_where)  # starts the thread
    here = placing.keep_loop_here()

    def long() -> tuple[set[int], set[int]]:
        early = os.sched_getaffinity(0)
        time.sleep(0.5)
        return early, os.sched_getaffinity(0)

    early, late = await _threads.run_in_thread(long)
    assert early == here  # woken on the loop's CPU
    assert late == placing.everywhere  # then let go while it still ran
    assert placing.pins == [(thread, here), (thread, placing.everywhere)]


@linux_affinity
async def test_a_call_the_loop_waited_for_itself_is_let_run_on_any_cpu_when_it_runs_long(
    placing: _Placing, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call the loop waits for itself (a runtime executing one run) sets no timer while the
    loop waits; one that outlasts the wait is let run anywhere ``SHARE`` seconds after it
    started, as any other."""
    import asyncio
    import os
    import time

    from stead import _threads

    monkeypatch.setattr(_threads, "SHARE", 0.05)
    withdraw = _threads.wait_here_when(asyncio.get_running_loop(), lambda: True)
    try:
        thread, _ = await _threads.run_in_thread(_where)  # starts the thread
        here = placing.keep_loop_here()
        assert await _threads.run_in_thread(lambda: os.sched_getaffinity(0)) == here

        def long() -> tuple[set[int], set[int]]:
            early = os.sched_getaffinity(0)
            time.sleep(0.5)
            return early, os.sched_getaffinity(0)

        early, late = await _threads.run_in_thread(long)
    finally:
        withdraw()
    assert early == here  # woken on the loop's CPU
    assert late == placing.everywhere  # then let go while it still ran
    assert placing.pins == [(thread, here), (thread, placing.everywhere)]


@linux_affinity
async def test_calls_side_by_side_are_not_kept_on_the_loops_cpu(
    placing: _Placing, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Calls that run at once each get the whole machine: the one woken on the loop's CPU is
    let go when another starts, however short a time it has run."""
    import asyncio

    from stead import _threads

    monkeypatch.setattr(_threads, "SHARE", 60.0)
    meet = threading.Barrier(2)

    def both() -> set[int]:
        meet.wait(10)
        return _where()[1]

    two = (_threads.run_in_thread(both), _threads.run_in_thread(both))
    await asyncio.wait_for(asyncio.gather(*two), 20)  # starts two threads
    placing.keep_loop_here()
    two = (_threads.run_in_thread(both), _threads.run_in_thread(both))
    seen = await asyncio.wait_for(asyncio.gather(*two), 20)
    assert seen == [placing.everywhere, placing.everywhere]
    assert placing.pins  # the first was woken on the loop's CPU, then let go


@linux_affinity
async def test_threads_still_run_calls_where_the_kernel_refuses_to_pin_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A CPU set that forbids the pin (a container's cgroup, say) turns the placement off; the
    calls go on as before."""
    import os

    from stead import _threads

    monkeypatch.setattr(_threads, "_pool", _threads._Pool())
    # Both restored afterwards, so that later tests place threads again.
    monkeypatch.setattr(_threads, "_looked_up", False)
    monkeypatch.setattr(_threads, "_getcpu", None)
    refused: list[int] = []

    def refuse(pid: int, cpus: Any) -> None:
        refused.append(pid)
        raise OSError(22, "Invalid argument")

    monkeypatch.setattr(os, "sched_setaffinity", refuse)
    assert [await _threads.run_in_thread(lambda n=n: n) for n in range(5)] == list(range(5))
    assert len(refused) == 1  # tried once, then no more
    assert _threads._cpu() is None


@linux_affinity
async def test_a_thread_is_woken_anywhere_when_the_kernel_cannot_say_where_the_loop_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``sched_getcpu`` fails with -1: nothing is pinned, and the calls go on."""
    import os

    from stead import _threads

    monkeypatch.setattr(_threads, "_pool", _threads._Pool())
    monkeypatch.setattr(_threads, "_looked_up", True)
    monkeypatch.setattr(_threads, "_getcpu", lambda: -1)
    pins: list[int] = []
    plain = os.sched_setaffinity

    def recorded(pid: int, cpus: Any) -> None:
        pins.append(pid)
        plain(pid, cpus)

    monkeypatch.setattr(os, "sched_setaffinity", recorded)
    assert [await _threads.run_in_thread(lambda n=n: n) for n in range(3)] == [0, 1, 2]
    assert pins == []


async def test_a_cancelled_caller_stops_waiting_and_the_thread_stays_usable() -> None:
    import asyncio

    from stead._threads import run_in_thread

    started = threading.Event()
    release = threading.Event()

    def slow() -> str:
        started.set()
        release.wait(10)
        return "late"

    waiting = asyncio.ensure_future(run_in_thread(slow))
    await asyncio.to_thread(started.wait, 10)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    release.set()
    assert await run_in_thread(lambda: "next") == "next"


# -- a loop with nothing else to do waits for its call itself --------------------------------


@contextlib.contextmanager
def _quiet_loop(quiet: Callable[[], bool] = lambda: True) -> Iterator[None]:
    """The running loop told, as a runtime executing one run tells it, that nothing else on
    it would wait."""
    import asyncio

    from stead import _threads

    withdraw = _threads.wait_here_when(asyncio.get_running_loop(), quiet)
    try:
        yield
    finally:
        withdraw()


async def test_a_quiet_loop_takes_a_quick_calls_outcome_itself(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The future comes back settled: no turn of the loop, no wake-up through its selector;
    the result, the error and the caller's context are as through the mailbox."""
    import asyncio
    import contextvars

    from stead import _threads

    monkeypatch.setattr(_threads, "_pool", _threads._Pool())
    monkeypatch.setattr(_threads, "HERE", 10.0)  # however slow the machine, it waits here
    current = contextvars.ContextVar("current", default="unset")
    current.set("caller")

    def boom() -> None:
        raise KeyError("missing")

    loop = asyncio.get_running_loop()
    wakes = _count_wakes(monkeypatch, loop)
    with _quiet_loop():
        added = _threads.run_in_thread(lambda a, b=0: a + b, 2, b=3)
        assert added.done() and added.result() == 5
        seen = _threads.run_in_thread(current.get)
        assert seen.done() and seen.result() == "caller"
        failed = _threads.run_in_thread(boom)
        assert failed.done() and isinstance(failed.exception(), KeyError)
        assert await _threads.run_in_thread(threading.get_ident) != threading.get_ident()
    assert wakes == []  # nothing came through the mailbox
    assert _threads._pool.threads == 1 and _threads._pool.busy == 0
    assert _threads._pool.workers[0].poll.poll(0) == []  # no byte left behind


async def test_a_call_slower_than_the_wait_comes_through_the_mailbox(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The loop waits HERE at most, then goes back to its other work; the outcome arrives as
    any other, and the thread's answer pipe is left clean for the next call."""
    import time

    from stead import _threads

    monkeypatch.setattr(_threads, "_pool", _threads._Pool())
    release = threading.Event()
    with _quiet_loop():
        started = time.monotonic()
        slow = _threads.run_in_thread(lambda: release.wait(10) and "late")
        waited = time.monotonic() - started
        assert not slow.done()
        assert waited < 1.0  # HERE is a millisecond; far less than the call
        release.set()
        assert await slow == "late"
        quick = _threads.run_in_thread(lambda: "next")
        assert quick.done() and quick.result() == "next"
    assert _threads._pool.workers[0].poll.poll(0) == []


async def test_a_call_finishing_as_the_wait_runs_out_is_taken_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Whichever way the race between the thread's answer and the end of the loop's wait
    goes, the outcome is settled once and no byte is left in the answer pipe."""
    import asyncio

    from stead import _threads

    monkeypatch.setattr(_threads, "_pool", _threads._Pool())
    monkeypatch.setattr(_threads, "HERE", 0.0002)
    with _quiet_loop():
        for n in range(200):
            answer = _threads.run_in_thread(lambda n=n: sum(range(n * 20)))
            assert await answer == sum(range(n * 20))
    await asyncio.sleep(0.01)
    assert _threads._pool.workers[0].poll.poll(0) == []
    assert _threads._pool.busy == 0


async def test_a_loop_waits_for_a_call_itself_only_when_every_runtime_on_it_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from stead import _threads

    monkeypatch.setattr(_threads, "_pool", _threads._Pool())
    monkeypatch.setattr(_threads, "HERE", 10.0)
    busy = False
    with _quiet_loop(), _quiet_loop(lambda: not busy):
        assert _threads.run_in_thread(lambda: 1).done()
        busy = True
        waited = _threads.run_in_thread(lambda: 2)
        assert not waited.done()
        assert await waited == 2
    assert not _threads.run_in_thread(lambda: 3).done()  # withdrawn: no runtime says so


async def test_a_call_beside_another_is_not_waited_for_by_the_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Calls side by side (a turn's tool calls run concurrently) each go through the
    mailbox: the loop would hold up the others while it waited for one."""
    from stead import _threads

    monkeypatch.setattr(_threads, "_pool", _threads._Pool())
    monkeypatch.setattr(_threads, "HERE", 10.0)
    monkeypatch.setattr(_threads, "PATIENCE", 0.0)  # the second call gets a thread at once
    release = threading.Event()
    first = _threads.run_in_thread(release.wait, 10)  # busy until released
    with _quiet_loop():
        second = _threads.run_in_thread(lambda: "second")
        assert not first.done() and not second.done()
        assert await second == "second"
        release.set()
        assert await first is True


async def test_a_runtime_lets_its_loop_wait_for_tools_while_it_executes_one_run(
    tmp_path: Path,
) -> None:
    """Opened, a runtime has its say (at most one run executing); closed, it has none."""
    import asyncio

    from stead import _threads

    quiet = _threads._mailbox(asyncio.get_running_loop()).quiet
    before = len(quiet)
    tool_thread, loop_thread = await _threads_of(tmp_path)
    assert tool_thread != loop_thread
    assert len(quiet) == before
    app = stead.App(agents=[stead.Agent(id="a", version="1", model=ScriptedModel(["done"]))])
    async with await app.open(stead.SqliteStore(tmp_path / "t.db")) as runtime:
        assert len(quiet) == before + 1
        assert quiet[-1]() is True  # nothing executes
        run = await runtime.submit("a", session_id="s", request_id="r", prompt="go")
        assert (await run.result()).output == "done"
    assert len(quiet) == before


# Python 3.12+ warns about fork() in a process with threads; that risk is what this tests.
@pytest.mark.filterwarnings("ignore:This process .*is multi-threaded:DeprecationWarning")
def test_a_forked_child_starts_threads_of_its_own() -> None:
    """After fork the parent's threads do not exist in the child: a call there must start a new
    thread instead of waiting for ever on a parent's idle one (a server that forks workers
    after importing stead, say)."""
    import asyncio
    import os

    from stead._threads import run_in_thread

    async def twice() -> int:
        await run_in_thread(lambda: None)  # leaves an idle thread in the pool
        return await run_in_thread(threading.get_ident)

    asyncio.run(twice())
    from stead import _threads

    inherited = [fd for worker in _threads._pool.workers for fd in (*worker.wake, *worker.answer)]
    assert inherited
    pid = os.fork()
    if pid == 0:  # the child: exit 0 only if its calls complete
        code = 1
        try:
            for fd in inherited:  # the parent's threads' pipes are closed in the child
                try:
                    os.fstat(fd)
                except OSError:
                    continue
                os._exit(2)
            asyncio.run(asyncio.wait_for(twice(), 5))
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_a_loop_that_handed_calls_to_threads_is_let_go_once_it_is_done_with() -> None:
    """A program that runs ``asyncio.run`` once per request or command hands each new loop's
    calls to the same threads: the loops that ended must not be kept alive by their
    mailboxes (nor their runtimes, callbacks and futures with them)."""
    import asyncio
    import gc
    import weakref

    from stead import _threads
    from stead._threads import run_in_thread, run_store_call

    gone: list[weakref.ref[asyncio.AbstractEventLoop]] = []

    async def calls() -> None:
        gone.append(weakref.ref(asyncio.get_running_loop()))
        assert await run_in_thread(lambda: 1) == 1
        assert await run_store_call(lambda: 2) == 2

    for _ in range(3):
        asyncio.run(calls())
    gc.collect()
    assert [ref() for ref in gone] == [None, None, None]
    assert all(box.ref() is not None for box in _threads._mailboxes.values())
    asyncio.run(calls())  # and a loop after them is served as before
