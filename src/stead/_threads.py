"""Worker threads for the user's synchronous functions (blocking tools, task effects), and,
in a pool of their own, for the stores' blocking driver calls (a client's reads and commands, a
worker's submissions on PostgreSQL): tools blocked on every thread of theirs never hold those up.

Why not ``asyncio.to_thread``: the default executor hands each call through a locked queue to
whichever of its threads wakes first, which costs about 140 µs a call on a small virtual machine
— more than a whole durable step of the journal work. Here each idle thread waits on a pipe of
its own and the most recently busy one takes the next call (its stack and caches are warm).
Calls run in a copy of the caller's context, as with ``to_thread``.

A pipe, not a lock or a queue, because of how the kernel wakes its reader: as the writer's
hand-over (the writer is about to wait itself), so the woken thread does not preempt the writer
on their shared CPU; and neither holds the interpreter's lock while it waits or writes. Woken
through a lock, the thread preempted the loop that still held the interpreter's lock and at once
waited for it: six switches between the two threads for a call and its answer, where a pipe
takes two. In a round trip of an empty call on a 2-CPU virtual machine this took the hand-off
from 54 to 38 µs.

A loop that has nothing else to do saves its own wake-up too. When every runtime on it says so
(one run executing, :func:`wait_here_when`) and the call runs alone, the loop waits for the
outcome itself, on the thread's answer pipe, for up to :data:`HERE`, instead of going back to
its selector to be woken through the mailbox; a call that takes longer is waited for as any
other. The round trip of an empty call then took 17 µs, and the 100-turn benchmark's safe step
with a synchronous tool went from 3.8 to 3.3 times the Python floor. The thread, woken on the
loop's CPU, mostly runs the call within the write that wakes it, so the loop then finds the
answer there and reads it without polling first: on a later, faster machine that and a mailbox
found without a weak dictionary's lookup took the round trip from 6.6 to 5.6 µs. The thread
writes its answer pipe only for a loop that says it waits there (:attr:`_Call.polling`): an
outcome found ready costs neither a write nor a read of the pipe, which took the round trip
from 8.1 to 7.5 µs on a slower machine (medians of 16 alternating processes).

Waking a thread is the costly part of a hand-off, each way. Many runs going at once call their
tools within one turn of the loop, between journal work that lets the interpreter's lock go (a
thread woken for the first call would run it and idle again before the next call came): so a
loop that is not waiting for a call itself hands over the calls made during a turn together,
when the turn ends (:meth:`_Pool.defer`). The first wakes a thread; the others, and any call that
arrives while a thread has just started another, wait behind it (the thread takes them next,
without sleeping in between) for up to :data:`PATIENCE`. Back the other way, a thread that
finishes a call puts the outcome in its loop's mailbox and wakes the loop only if no wake-up is
on its way already: a burst of calls finishing together costs the loop one wake-up, not one
each, and the worker does not hand the interpreter lock to the loop at every delivery. A call
still waiting after :data:`PATIENCE` is behind one that blocks (a request, a sleep): it gets a
thread of its own, so tools that wait still wait side by side. A thread counts as blocked only
once it has run its call that long: one that has not begun it yet waits for the interpreter's
lock, and another thread would only wait for the same lock. With 100 runs going at once this
took the tools' hand-offs from about 800 wake-ups of a thread for 1,000 calls to 10, their
threads from six to one, and the process's context switches from about one a step to one in
twenty.

Where the thread wakes matters as much. A thread woken on an idle CPU waits for that CPU to
come out of its sleep, which on a small virtual machine costs tens of microseconds each way, and
the loop is woken there too when the call ends. On Linux the loop asks for the thread to be woken
on the CPU the loop itself runs on (it will sleep there, waiting for the outcome, and the hand-off
and the way back become switches on one CPU). In a 100-turn run this took a synchronous tool's
hand-off from about 180 to about 70 µs a call. The thread stays there between calls, so that
while the loop keeps to its CPU a hand-off makes no system call for it. A call that runs
:data:`SHARE` seconds, or beside another call, is let run on any CPU: a function that computes
without the interpreter's lock gets a CPU of its own, and calls side by side are not confined
to one. The writer's flush thread is woken the same way, and lifts the restriction itself before
it flushes (:class:`Placement`).

The threads are daemons: an interpreter that exits while a function still runs does not wait
for it, which is what a crash would do too — the journal decides what happens to that call when
the run resumes.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import operator
import os
import select
import sys
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

#: Threads at most; calls beyond that wait for one to come free.
MAX_THREADS = 32
#: Seconds a call waits behind a thread that has just started another call before a thread of
#: its own is woken for it.
PATIENCE = 0.001
#: Seconds a call may run on the loop's CPU (where its thread was woken) before its thread is
#: let run on any CPU.
SHARE = 0.001
#: Seconds a loop with nothing else to do waits for a call's outcome itself (see ``_call``)
#: before it goes back to its other work and lets the outcome come through its mailbox.
HERE = 0.001


class _Mailbox:
    """The outcomes of one loop's calls, delivered in batches: one wake-up of the loop settles
    every outcome that arrived before it ran. It refers to its loop weakly: a mailbox is kept
    for as long as its loop lives (:data:`_mailboxes`), and a loop that has closed and is no
    longer used is let go with it."""

    __slots__ = ("due", "outcomes", "quiet", "ref", "rescuing", "waking", "watching")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.ref = weakref.ref(loop)
        self.outcomes: collections.deque[tuple[asyncio.Future[Any], Any, BaseException | None]]
        self.outcomes = collections.deque()
        self.waking = False  # a wake-up of the loop is on its way (set and cleared under the GIL)
        #: The pools with a look scheduled at this loop's calls waiting behind a busy thread of
        #: theirs (on the loop).
        self.rescuing: set[_Pool] = set()
        #: The pools with a look scheduled at calls running on this loop's CPU (on the loop).
        self.watching: set[_Pool] = set()
        #: Whether nothing else on the loop would wait while the loop waits for a call's
        #: outcome itself: one answer from each runtime on the loop (:func:`wait_here_when`).
        self.quiet: list[Callable[[], bool]] = []
        #: The calls made on the loop since it last handed a batch to each pool (on the loop,
        #: :meth:`_Pool.defer`).
        self.due: dict[_Pool, list[_Call]] = {}

    def post(self, future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
        """On a worker thread: hand an outcome to the loop."""
        self.outcomes.append((future, result, error))  # before the check: see settle
        if not self.waking:
            self.waking = True
            loop = self.ref()  # alive while the outcome's future refers to it
            if loop is None:  # gone: nobody waits any more
                self.waking = False
                return
            try:
                loop.call_soon_threadsafe(self.settle)
            except RuntimeError:  # the loop closed: nobody waits any more
                self.waking = False

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The loop (asked on the loop itself, which is then alive)."""
        loop = self.ref()
        assert loop is not None
        return loop

    def settle(self) -> None:
        """On the loop: settle every outcome posted so far. ``waking`` is cleared first, so an
        outcome posted while this runs is either taken here or wakes the loop again."""
        self.waking = False
        outcomes = self.outcomes
        while outcomes:
            _settle(*outcomes.popleft())


_mailboxes: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Mailbox] = (
    weakref.WeakKeyDictionary()
)


#: The mailbox looked up last: a process mostly runs one loop, and a weak dictionary's lookup
#: costs a weak reference and two calls of Python.
_last: _Mailbox | None = None


def _mailbox(loop: asyncio.AbstractEventLoop) -> _Mailbox:
    """The loop's mailbox (on the loop's thread)."""
    global _last
    box = _last
    if box is not None and box.ref() is loop:
        return box
    box = _mailboxes.get(loop)
    if box is None:
        box = _mailboxes[loop] = _Mailbox(loop)
    _last = box
    return box


class _Call:
    __slots__ = (
        "args",
        "context",
        "fn",
        "future",
        "here",
        "kwargs",
        "mailbox",
        "outcome",
        "polling",
        "since",
        "worker",
    )

    def __init__(
        self,
        mailbox: _Mailbox,
        future: asyncio.Future[Any],
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> None:
        self.mailbox = mailbox  # and with it the caller's loop
        self.future = future
        self.context = contextvars.copy_context()
        self.fn = fn
        self.args = args
        self.kwargs = kwargs
        #: When it started to wait behind a thread that had just started another call.
        self.since: float | None = None
        #: Whether the loop waits for the outcome itself, on the answer pipe of the thread
        #: that runs the call (``worker``); set and cleared under the pool's lock.
        self.here = False
        self.worker: _Worker | None = None
        self.outcome: tuple[Any, BaseException | None] | None = None  # when taken here
        #: Whether the loop waits on the answer pipe for it (set under the pool's lock before
        #: the loop looks at the pipe, and only while ``outcome`` is not there yet): the thread
        #: writes a byte for the outcome then, and only then.
        self.polling = False

    def run(self) -> tuple[Any, BaseException | None]:
        try:
            return self.context.run(self.fn, *self.args, **self.kwargs), None
        except BaseException as exc:  # the caller's answer, whatever it is
            return None, exc
        finally:
            del self.fn, self.args, self.kwargs  # drop references before the thread idles

    def deliver(self, outcome: tuple[Any, BaseException | None]) -> None:
        self.mailbox.post(self.future, *outcome)


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():  # the caller was cancelled meanwhile
        return
    if error is None:
        future.set_result(result)
    else:
        future.set_exception(error)


def _cpu_finder() -> Callable[[], int] | None:
    """``sched_getcpu`` where both it and ``sched_setaffinity`` exist (Linux), else None."""
    if not sys.platform.startswith("linux") or not hasattr(os, "sched_setaffinity"):
        return None
    import ctypes  # here, not at import: a process that runs no thread never needs it

    try:
        getcpu = ctypes.CDLL(None).sched_getcpu
    except (AttributeError, OSError):
        return None
    getcpu.restype = ctypes.c_int
    getcpu.argtypes = []
    return getcpu


#: ``sched_getcpu``, once looked up (:func:`_cpu`); None where threads are not placed.
_getcpu: Callable[[], int] | None = None
_looked_up = False


def _cpu() -> Callable[[], int] | None:
    global _getcpu, _looked_up
    if not _looked_up:
        _looked_up, _getcpu = True, _cpu_finder()
    return _getcpu


class Placement:
    """Where one thread wakes. Before handing work to the thread (idle, waiting for it) and
    waiting for the answer, the handing thread asks for it to be woken on the CPU the handing
    thread runs on (:meth:`wake_here`); the restriction is lifted (:meth:`lift` on the thread,
    :meth:`free` from any thread) once the work could use a CPU of its own. See the module
    docstring for why. Where the kernel refuses (a CPU set that forbids it), no thread is
    placed any more."""

    __slots__ = ("allowed", "cpu", "tid")

    def __init__(self) -> None:
        self.tid = 0  # the thread's native id, once bound
        self.allowed: set[int] = set()  # the CPUs it may run on, once bound
        self.cpu = -1  # the one CPU it is restricted to, or -1

    def bind(self) -> None:
        """On the thread itself, before it first waits for work."""
        if _cpu() is not None:
            self.allowed = os.sched_getaffinity(0)
            self.tid = threading.get_native_id()

    def wake_here(self) -> bool:
        """On the thread about to hand work to the idle bound thread and wait for it: whether
        the thread is now restricted to this CPU (it may be already: no system call then)."""
        global _getcpu
        getcpu = _getcpu if _looked_up else _cpu()
        if not self.tid or getcpu is None:
            return False
        cpu = getcpu()
        if cpu < 0:  # the kernel could not say: wake it wherever
            return False
        if cpu == self.cpu:
            return True
        try:
            os.sched_setaffinity(self.tid, (cpu,))
        except (OSError, ValueError):
            _getcpu = None
            return False
        self.cpu = cpu
        return True

    def free(self) -> None:
        """From any thread: let the bound thread run on any of its CPUs again."""
        if self.cpu >= 0:
            self.cpu = -1
            # Refused only if the process's CPU set changed since: the kernel's choice stands.
            with contextlib.suppress(OSError):
                os.sched_setaffinity(self.tid, self.allowed)

    def lift(self) -> None:
        """On the bound thread, as it wakes with work: free to run on any of its CPUs."""
        if self.cpu >= 0:
            self.cpu = -1
            with contextlib.suppress(OSError):
                os.sched_setaffinity(0, self.allowed)

    def run(self, fn: Callable[..., T], /, *args: Any) -> T:
        """On the bound thread: :meth:`lift`, then ``fn(*args)`` (for an executor's
        ``submit``)."""
        self.lift()
        return fn(*args)


class _Worker:
    """One thread of the pool: the calls handed to it, the pipes it is woken and answers
    through, and where it wakes.

    Pipes, not locks or queues: a byte written to a pipe wakes its reader as the writer's
    hand-over (the writer is about to wait itself), so the reader does not preempt the writer
    on their shared CPU; and the interpreter's lock is free while either waits or writes. A
    hand-off and its answer are then two switches between the threads; through a lock or a
    queue they were six, the woken thread preempting the one still holding the interpreter's
    lock and at once waiting for it (three times slower in a round trip here)."""

    __slots__ = ("answer", "began", "calls", "placement", "poll", "since", "wake")

    def __init__(self) -> None:
        self.calls: collections.deque[_Call] = collections.deque()  # a byte on ``wake`` each
        self.wake = os.pipe()  # (read, write)
        #: A byte for each outcome a loop waits for itself (:attr:`_Call.here`).
        self.answer = os.pipe()
        self.poll = select.poll()  # the answer's, for the one loop waiting on it
        self.poll.register(self.answer[0], select.POLLIN)
        self.placement = Placement()
        self.since = 0.0  # when the call it runs on the loop's CPU started (monotonic)
        #: When the thread itself began the call it runs (monotonic), 0.0 before it has: a
        #: thread woken for a call may wait for the interpreter's lock first.
        self.began = 0.0

    def hand(self) -> None:
        """Wake the thread for the call put in :attr:`calls` (not under the pool's lock)."""
        os.write(self.wake[1], b"\0")

    def close(self) -> None:
        for fd in (*self.wake, *self.answer):
            with contextlib.suppress(OSError):
                os.close(fd)


class _Pool:
    def __init__(self, name: str = "stead-worker") -> None:
        self.name = name  # of its threads, numbered
        self.lock = threading.Lock()
        self.idle: list[_Worker] = []  # a stack: the warmest on top
        self.backlog: collections.deque[_Call] = collections.deque()
        self.threads = 0
        self.running: set[_Worker] = set()  # the threads running a call
        #: Until when the call a thread started last counts as just started (monotonic).
        self.fresh_until = 0.0
        #: The threads running a call on the CPU of the loop that handed it over.
        self.sharing: list[_Worker] = []
        self.workers: list[_Worker] = []  # every thread's, to close their pipes after a fork

    @property
    def busy(self) -> int:
        """How many threads run a call."""
        return len(self.running)

    def start(self, call: _Call, here: bool = False) -> None:
        """Hand ``call`` to a thread, or queue it. ``here``: the loop would wait for the
        outcome itself, which it does only for a call that runs alone (:attr:`_Call.here`)."""
        now = time.monotonic()
        with self.lock:
            # Set before the call is placed: a thread woken for a call the loop waits for
            # itself is not watched (see _hand) while the loop waits.
            call.here = here and not self.running
            worker, waits = self._place(call, now)
            if worker is not None and call.here:
                call.worker = worker
            else:
                call.here = False
        if worker is not None:
            worker.hand()
        elif waits:
            self._look_later(call.mailbox)

    def defer(self, call: _Call) -> None:
        """On the loop: hand ``call`` over with the other calls its loop makes before it turns
        (:meth:`start_due`): calls made side by side wake one thread, not one each."""
        box = call.mailbox
        due = box.due.get(self)
        if due is None:
            box.due[self] = [call]
            box.loop.call_soon(self.start_due, box)
        else:
            due.append(call)

    def start_due(self, box: _Mailbox) -> None:
        """On the loop: hand over the calls it deferred. The first wakes a thread (the warmest
        idle one); the others wait behind it, as calls made within :data:`PATIENCE` of it do."""
        calls = box.due.pop(self, ())
        now = time.monotonic()
        woken: list[_Worker] = []
        waits = False
        with self.lock:
            for call in calls:
                worker, behind = self._place(call, now)
                if worker is not None:
                    woken.append(worker)
                waits = waits or behind
        for worker in woken:
            worker.hand()
        if waits:
            self._look_later(box)

    def _place(self, call: _Call, now: float) -> tuple[_Worker | None, bool]:
        """Under the lock: give ``call`` to a thread (returned, for the caller to wake once
        the lock is let go) or queue it; and whether it waits behind a thread that has just
        started another call, which a look after :data:`PATIENCE` must follow (``rescue``)."""
        if self.running and now < self.fresh_until:
            # A thread has just started a call: this one goes next on that thread, unless the
            # thread is still busy when the patience runs out (see rescue).
            call.since = now
            self.backlog.append(call)
            return None, True
        worker = self._hand(call, now)
        if worker is None:
            self.backlog.append(call)  # every thread is busy: the first to finish takes it
        return worker, False

    def _look_later(self, box: _Mailbox) -> None:
        """On the loop: a look at its calls waiting behind a busy thread, :data:`PATIENCE`
        from now, unless one is due already (one timer a loop and pool, not one a call)."""
        if self not in box.rescuing:
            box.rescuing.add(self)
            box.loop.call_later(PATIENCE, self.rescue, box)

    def rescue(self, box: _Mailbox) -> None:
        """On a loop, :data:`PATIENCE` after one of its calls started to wait behind a busy
        thread: each of its calls that has waited that long, and that no thread has taken
        meanwhile, waits behind one that blocks; give it another thread. Look again when the
        next of its calls has waited that long.

        Unless a busy thread still moves: one that has not begun its call yet (it waits for
        the interpreter's lock, which the loop held meanwhile) or began it less than
        :data:`PATIENCE` ago takes the next waiting call soon. Another thread would wait for
        the same lock, so the calls wait on, and the look is made again once that thread has
        had :data:`PATIENCE` to finish its call."""
        box.rescuing.discard(self)
        now = time.monotonic()
        first: float | None = None  # when the earliest call still waiting began to
        woken: list[_Worker] = []
        with self.lock:
            moving = self._moving(now)
            if moving is not None:
                box.rescuing.add(self)
                box.loop.call_later(moving - now, self.rescue, box)
                return
            waiting: collections.deque[_Call] = collections.deque()
            for call in self.backlog:
                if call.mailbox is not box or call.since is None:
                    waiting.append(call)
                    continue
                worker = self._hand(call, now) if call.since + PATIENCE <= now else None
                if worker is not None:
                    woken.append(worker)
                    continue
                waiting.append(call)
                if first is None and call.since + PATIENCE > now:
                    first = call.since
            self.backlog = waiting
        for worker in woken:
            worker.hand()
        if first is not None:
            box.rescuing.add(self)
            box.loop.call_later(first + PATIENCE - now, self.rescue, box)

    def _moving(self, now: float) -> float | None:
        """Under the lock: if a busy thread is not blocked, when to look at it again (once it
        has run its call for :data:`PATIENCE`); else None."""
        later: float | None = None
        for worker in self.running:
            began = worker.began or now  # not begun yet: it may begin now
            if began + PATIENCE > now:
                later = began + PATIENCE if later is None else min(later, began + PATIENCE)
        return later

    def _hand(self, call: _Call, now: float) -> _Worker | None:
        """Under the lock: give ``call`` to the warmest idle thread or to a new one, which
        the caller then wakes (:meth:`_Worker.hand`, once the lock is let go); None if every
        thread there may be is busy.

        A call that runs alone is woken on the loop's CPU and stays there, as its thread does
        between calls (no system call at all while the loop stays on one CPU), until it has
        run :data:`SHARE` seconds (:meth:`watch`). Calls that run side by side each get the
        whole machine."""
        if self.idle:
            worker = self.idle.pop()
            if self.running:
                worker.placement.free()
                self._share_no_more()
            elif worker.placement.wake_here():
                worker.since = now
                self.sharing.append(worker)
                if not call.here:  # else the loop looks once it stops waiting (_call)
                    self.watch_later(call.mailbox, SHARE)
        elif self.threads < MAX_THREADS:
            self.threads += 1
            worker = _Worker()
            self.workers.append(worker)
            threading.Thread(
                target=self._work, args=(worker,), name=f"{self.name}-{self.threads}", daemon=True
            ).start()
            if self.running:
                self._share_no_more()
        else:
            return None
        self.running.add(worker)
        self.fresh_until = now + PATIENCE
        worker.calls.append(call)
        return worker

    def _share_no_more(self) -> None:
        """Under the lock: more than one call runs; none stays on the CPU it was woken on."""
        for worker in self.sharing:
            worker.placement.free()
        self.sharing.clear()

    def watch_later(self, box: _Mailbox, delay: float) -> None:
        """On the loop: a look at the calls running on its CPU ``delay`` seconds from now,
        unless one is due already (one timer a loop and pool, not one a call)."""
        if self not in box.watching:
            box.watching.add(self)
            box.loop.call_later(delay, self.watch, box)

    def watch(self, box: _Mailbox) -> None:
        """On a loop, :data:`SHARE` after a call started on its CPU: each call that has run
        that long may run on any CPU (a function that computes without the interpreter's
        lock would otherwise take the loop's CPU from it). Look again when the next call on
        the loop's CPU has run that long."""
        box.watching.discard(self)
        now = time.monotonic()
        with self.lock:
            sharing = []
            for worker in self.sharing:
                if worker.since + SHARE <= now:
                    worker.placement.free()
                else:
                    sharing.append(worker)
            self.sharing = sharing
            first = min((worker.since for worker in sharing), default=None)
        if first is not None:
            self.watch_later(box, first + SHARE - now)

    def _work(self, worker: _Worker) -> None:
        placement = worker.placement
        placement.bind()  # before the first call ends, so before the thread idles
        calls, wake, answer = worker.calls, worker.wake[0], worker.answer[1]
        call: _Call | None = None
        while True:  # a daemon: it ends with the interpreter
            if call is None:
                os.read(wake, 1)  # a byte for each call handed to this thread
                call = calls.popleft()
            worker.began = time.monotonic()
            outcome = call.run()
            # Idle (or on to the backlog) before the caller hears back, so that the call it
            # makes next finds this thread free instead of starting another.
            with self.lock:
                here = call.here  # the loop still waits for it itself
                tell = False  # the loop waits on the answer pipe: a byte for it
                if here:
                    call.outcome = outcome
                    tell = call.polling
                if placement.cpu >= 0 and worker in self.sharing:
                    self.sharing.remove(worker)
                following = self.backlog.popleft() if self.backlog else None
                worker.began = 0.0
                if following is None:
                    self.running.discard(worker)
                    self.idle.append(worker)
                else:
                    placement.free()  # calls queue up: they run side by side with others
                    self.fresh_until = time.monotonic() + PATIENCE
            if tell:
                os.write(answer, b"\0")
            elif not here:
                call.deliver(outcome)
            call = following


_pool = _Pool()
#: The stores' own calls to blocking drivers (a client's reads and commands, a worker's
#: submissions): a pool of their own, so that tools blocked on every thread of theirs never hold
#: up a submission or a read.
_store_pool = _Pool("stead-store")


def _forget_threads() -> None:
    """In a forked child the parent's threads do not exist: start afresh (their pipes
    closed)."""
    global _pool, _store_pool, _last
    for pool in (_pool, _store_pool):
        for worker in pool.workers:
            worker.close()
    _pool = _Pool()
    _store_pool = _Pool("stead-store")
    _mailboxes.clear()
    _last = None


os.register_at_fork(after_in_child=_forget_threads)


def _call(
    pool: _Pool,
    fn: Callable[..., T],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    here: bool = False,
) -> asyncio.Future[T]:
    """Hand a call to ``pool``. With ``here``, a loop that has nothing else to do (each
    runtime on it says so, :func:`wait_here_when`) and whose call runs alone waits for the
    outcome itself, for up to :data:`HERE`, instead of turning back to its selector: the
    outcome comes straight through the thread's answer pipe, not through the mailbox and the
    loop's own wake-up, and the future returned is already settled. A call that takes longer
    is waited for as any other. On any other loop a call with ``here`` is handed over with the
    others made before the loop turns (:meth:`_Pool.defer`); without it (a store's calls, which
    another thread may be waiting for), at once."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()
    box = _mailbox(loop)
    call = _Call(box, future, fn, args, kwargs)
    if here:
        quiet = box.quiet
        if box.due or not quiet or not all(map(operator.call, quiet)):
            pool.defer(call)  # other runs are going: their calls made meanwhile share a thread
            return future
        pool.start(call, here=True)
    else:
        pool.start(call)
    worker = call.worker
    if worker is not None:
        polled = False
        try:
            # The thread, woken on this CPU, has mostly run the call already, within the
            # write that woke it: then the outcome is taken as it is, and the thread wrote no
            # byte for it. Else the loop says it waits on the pipe, and the thread answers there.
            if call.outcome is None:
                with pool.lock:
                    polled = call.polling = call.outcome is None
                if polled:
                    worker.poll.poll(HERE * 1000)
        finally:
            with pool.lock:
                call.here = False  # from now on the thread posts the outcome to the mailbox
                outcome = call.outcome
            if outcome is not None and polled:
                os.read(worker.answer[0], 1)  # the thread's byte: written, or about to be
        if outcome is not None:
            _settle(future, *outcome)
        else:  # it has run HERE seconds on the loop's CPU (no timer was set while it waited)
            pool.watch_later(box, max(0.0, worker.since + SHARE - time.monotonic()))
    return future


def wait_here_when(
    loop: asyncio.AbstractEventLoop, quiet: Callable[[], bool]
) -> Callable[[], None]:
    """Let ``loop`` wait for a worker thread's outcome itself while ``quiet()`` (and that of
    every other runtime on the loop) says nothing else on it would wait meanwhile (a runtime
    that executes at most one run); returns the function that withdraws ``quiet``."""
    box = _mailbox(loop)
    box.quiet.append(quiet)

    def withdraw() -> None:
        with contextlib.suppress(ValueError):
            box.quiet.remove(quiet)

    return withdraw


def run_in_thread(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> asyncio.Future[T]:
    """Run ``fn(*args, **kwargs)`` on a worker thread; await the future for its result or its
    exception. Cancelling the future does not stop the function, only the waiting."""
    return _call(_pool, fn, args, kwargs, here=True)


def run_store_call(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> asyncio.Future[T]:
    """:func:`run_in_thread` for a store's blocking driver call, on the stores' own threads."""
    return _call(_store_pool, fn, args, kwargs)


__all__ = ["MAX_THREADS", "Placement", "run_in_thread", "run_store_call", "wait_here_when"]
