"""TaskContext: what a task's code uses to do durable work.

Each call is one journaled operation under a deterministic key — the name given (``fetch``),
numbered on repetition in its scope (``fetch#2``); each branch of :meth:`TaskContext.gather`
has a scope of its own (``gather/1/fetch``), so replay does not depend on which branch finished
first. On replay a journaled operation returns its result without doing the work again; a
different name, kind or input at a journaled key stops the run in ``needs_attention`` naming the
key. Waits (timers, signals, child runs) leave the run ``waiting`` without holding a slot or
anything in memory; the run continues from its journal when what it waits for comes.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import math
import sys
import traceback
import typing
import uuid as uuid_module
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol, TypeVar

from pydantic import TypeAdapter

from .._clock import iso
from .._ids import jitter, new_token
from .._json import JSON, NotJSONError, loads, to_json
from .._threads import run_in_thread
from ..agent.history import own_messages
from ..errors import (
    LeaseLostError,
    RunCancelled,
    RunFailed,
    SignalTimeout,
    StepFailed,
    StorageError,
    ValidationError,
    shown,
)
from ..journal import transitions
from ..journal.keys import child_run_id, numbered, scoped
from ..journal.protocol import Tx
from ..journal.records import RECOVERY_POLICIES, Recovery, RunStatus
from ..messages import Usage, message_from_json
from ..runtime.context import RunContext
from ..runtime.control import Stop, Waiting

__all__ = ["Definitions", "TaskContext"]

T = TypeVar("T")

#: The scope of the branch a task's code runs in ("" at the top; set by ``gather``).
_SCOPE: contextvars.ContextVar[str] = contextvars.ContextVar("stead_task_scope", default="")
_NAME_MAX = 200


class Definitions(Protocol):
    """What a task needs of the registry (an :class:`~stead.App`): the kinds and versions of
    the definitions it starts as children."""

    def version_of(self, name: str, version: str | None) -> str: ...
    def kind_of(self, name: str) -> str | None: ...
    def task_input(self, name: str, value: Any) -> JSON: ...


def _seconds(what: str, duration: object) -> float:
    if isinstance(duration, timedelta):
        seconds = duration.total_seconds()
    elif isinstance(duration, int | float) and not isinstance(duration, bool):
        seconds = float(duration)
    else:
        raise ValidationError(
            f"{what} must be a datetime.timedelta or a number of seconds, got {shown(duration)}"
        )
    if not math.isfinite(seconds) or seconds < 0:
        raise ValidationError(f"{what} must be a finite duration >= 0, got {shown(duration)}")
    return seconds


def _name(what: str, name: object) -> str:
    if not isinstance(name, str) or not name.strip() or len(name) > _NAME_MAX:
        raise ValidationError(
            f"{what} must be a non-blank string of at most {_NAME_MAX} characters, got "
            f"{shown(name)}"
        )
    if "/" in name or "#" in name:
        raise ValidationError(
            f"{what} {name!r} may not contain '/' or '#' (they mark branches and repetitions "
            "in operation keys)"
        )
    return name


def _type_name(exc: BaseException) -> str:
    cls = type(exc)
    return f"{cls.__module__}:{cls.__qualname__}"


def _rebuild(key: str, error: dict[str, Any]) -> Exception:
    """The exception a journaled failure holds, raised again as its own type where it can be
    (a class of a module this process has imported, that takes a message), else
    :class:`StepFailed`. Nothing is imported on the journal's word."""
    type_name, message = str(error.get("type", "")), str(error.get("message", ""))
    module_name, _, qualname = type_name.partition(":")
    try:
        found: Any = sys.modules[module_name]
        for part in qualname.split("."):
            found = getattr(found, part)
        if isinstance(found, type) and issubclass(found, Exception):
            rebuilt = found(message)
            if str(rebuilt) == message:
                return rebuilt
    except Exception:  # the class is gone or takes other arguments
        pass
    return StepFailed(key, type_name.replace(":", "."), message)


def _cached(compute: Callable[[Any], T]) -> Callable[[Any], T]:
    """``compute(fn)`` remembered per function (an unhashable callable is computed anew)."""
    remembered = functools.lru_cache(maxsize=512)(compute)

    def get(fn: Any) -> T:
        try:
            return remembered(fn)
        except TypeError:
            return compute(fn)

    return get


@_cached
def _takes_operation_id(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` names an ``operation_id`` parameter (``**kwargs`` does not count: the
    id is not slipped into arguments a function passes on)."""
    try:
        return "operation_id" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


@_cached
def _returns(fn: Callable[..., Any]) -> TypeAdapter[Any] | None:
    """What turns a step's journaled JSON back into the type its function declares."""
    try:
        hint = typing.get_type_hints(fn).get("return", Any)
    except Exception:  # an annotation that does not resolve: the JSON as it is
        return None
    if hint in (Any, None, type(None)):
        return None
    try:
        return TypeAdapter(hint)
    except Exception:
        return None


class TaskContext:
    """The door from a task's code to the journal (see the module docstring)."""

    def __init__(self, ctx: RunContext, definitions: Definitions) -> None:
        self._ctx = ctx
        self._definitions = definitions
        self._counts: dict[tuple[str, str], int] = {}
        #: How many signals of each name the run's waits have taken.
        self._taken: dict[str, int] = {}
        self._signal_locks: dict[str, asyncio.Lock] = {}

    # -- who ---------------------------------------------------------------------------------

    @property
    def run_id(self) -> str:
        return self._ctx.run.id

    @property
    def session_id(self) -> str:
        return self._ctx.run.session_id

    def operation_id(self, key: str) -> str:
        """``"<run_id>/<key>"``: the id an effect hands to an external service."""
        return self._ctx.operation_id(key)

    def _key(self, name: str) -> str:
        scope = _SCOPE.get()
        count = self._counts.get((scope, name), 0) + 1
        self._counts[(scope, name)] = count
        return scoped(scope, numbered(name, count))

    # -- steps and effects -------------------------------------------------------------------

    async def step(self, name: str, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """Run ``fn(*args, **kwargs)`` once and journal its result (``safe``: if the process
        stops while it runs, it runs again). Its result — JSON, or a value of its return
        annotation — is returned as journaled, the same on every replay; if it raises, the
        failure is journaled and raised again on replay as the same type and message."""
        return await self._effect("step", name, fn, args, kwargs, "safe")

    async def effect(
        self,
        name: str,
        fn: Callable[..., Any],
        /,
        *args: Any,
        recovery: Recovery = "manual",
        **kwargs: Any,
    ) -> Any:
        """Run an external action once, under a recovery policy (DESIGN §3): ``safe`` runs it
        again if interrupted; ``idempotent`` runs it again with the same ``operation_id``
        (passed as ``operation_id=`` when ``fn`` takes it — hand it to the service as its
        idempotency key); ``manual`` (the default) stops the run in ``needs_attention`` so a
        person can ``resolve`` or ``retry`` it. A committed result is never run again."""
        if recovery not in RECOVERY_POLICIES:
            raise ValidationError(
                f"effect {name!r}: recovery must be one of {', '.join(RECOVERY_POLICIES)}, got "
                f"{shown(recovery)}"
            )
        return await self._effect("effect", name, fn, args, kwargs, recovery)

    async def _effect(
        self,
        kind: str,
        name: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        recovery: Recovery,
    ) -> Any:
        _name(f"{kind} name", name)
        if not callable(fn):
            raise ValidationError(f"{kind} {name!r}: {shown(fn)} is not callable")
        key = self._key(name)
        try:
            arguments = to_json({"args": list(args), "kwargs": kwargs})
        except NotJSONError as exc:
            raise ValidationError(
                f"{kind} {key}: its arguments must be JSON or pydantic models, so that replay "
                f"can check them: {exc}"
            ) from None
        label = getattr(fn, "__qualname__", type(fn).__qualname__)
        input = {"name": name, "fn": label, "recovery": recovery, **arguments}
        operation_id = self.operation_id(key)
        raised: list[BaseException] = []

        async def execute(attempt: int) -> JSON:
            call_kwargs = dict(kwargs)
            if "operation_id" not in call_kwargs and _takes_operation_id(fn):
                call_kwargs["operation_id"] = operation_id
            try:
                if inspect.iscoroutinefunction(fn):
                    value = await fn(*args, **call_kwargs)
                else:
                    value = await run_in_thread(fn, *args, **call_kwargs)
                    if inspect.isawaitable(value):
                        value = await value
            except Exception as exc:
                raised.append(exc)
                return {
                    "output": None,
                    "failed": True,
                    "error": {"type": _type_name(exc), "message": str(exc)},
                    "traceback": "".join(traceback.format_exception(exc))[-4000:],
                }
            try:
                return {"output": to_json(value), "failed": False, "error": None}
            except NotJSONError as exc:
                failure = ValidationError(
                    f"{kind} {key} returned a value that cannot be journaled ({exc}); return "
                    "JSON or a pydantic model"
                )
                raised.append(failure)
                return {
                    "output": None,
                    "failed": True,
                    "error": {"type": _type_name(failure), "message": str(failure)},
                }

        result = await self._ctx.operation(
            key, kind, recovery, input, execute, describe=f" ({kind} {name!r})"
        )
        if not isinstance(result, dict):
            return result
        if result.get("failed"):
            if raised:
                raise raised[0]
            raise _rebuild(key, result.get("error") or {})
        output = result.get("output")
        adapter = _returns(fn)
        return adapter.validate_python(output) if adapter is not None else output

    # -- values ------------------------------------------------------------------------------

    def now(self) -> datetime:
        """The current time, journaled: the same on every replay."""
        key = self._key("now")
        value = self._ctx.record(key, "value", {"name": "now"}, lambda: iso(self._ctx.now()))
        return datetime.fromisoformat(str(value)).astimezone(UTC)

    def uuid(self) -> uuid_module.UUID:
        """A random UUID, journaled: the same on every replay."""
        key = self._key("uuid")
        value = self._ctx.record(
            key, "value", {"name": "uuid"}, lambda: str(uuid_module.UUID(new_token(), version=4))
        )
        return uuid_module.UUID(str(value))

    def random(self) -> float:
        """A random float in [0, 1), journaled: the same on every replay."""
        key = self._key("random")
        return float(self._ctx.record(key, "value", {"name": "random"}, lambda: jitter(0.0, 1.0)))

    def emit(self, name: str, value: Any = None) -> None:
        """Persist a custom progress event (kind ``custom``) with the run's next commit; a
        replay does not emit it again."""
        _name("event name", name)
        try:
            payload = to_json(value)
        except NotJSONError as exc:
            raise ValidationError(f"event {name!r}: its value must be JSON ({exc})") from None
        key = self._key(f"emit:{name}")
        self._ctx.record(key, "emit", {"name": name, "value": payload}, lambda: None)

    # -- waits -------------------------------------------------------------------------------

    async def sleep(self, duration: timedelta | float) -> None:
        """Wait ``duration`` (a timedelta or seconds) durably: the run is ``waiting`` meanwhile,
        holds no slot and nothing in memory, and wakes on time after a restart."""
        seconds = _seconds("sleep duration", duration)
        key = self._key("sleep")
        until = self._ctx.now() + timedelta(seconds=seconds)
        stored = {"seconds": seconds, "until": iso(until)}
        op = await self._ctx.open_wait(key, "timer", {"seconds": seconds}, stored=stored)
        if op is not None:
            if op.status == "completed":
                return
            stored = op.input
            until = datetime.fromisoformat(str(op.input["until"]))
        if self._ctx.now() >= until:
            await self._ctx.close_wait(key, "timer", stored, {"fired": True})
            return
        raise Waiting(
            f"timer {key} until {iso(until)}", operation=key, interactions=False, until=until
        )

    async def wait_for_signal(
        self, name: str, *, timeout: timedelta | float | None = None, key: str | None = None
    ) -> Any:
        """The value of the next signal ``name`` this run has not consumed yet — delivered with
        ``handle.signal(name, value, request_id=...)`` before or after this wait. With a
        ``timeout``, :class:`stead.SignalTimeout` is raised when none came in time."""
        _name("signal name", name)
        seconds = None if timeout is None else _seconds("timeout", timeout)
        op_key = self._key(_name("key", key) if key is not None else f"signal:{name}")
        until = None if seconds is None else self._ctx.now() + timedelta(seconds=seconds)
        input = {"signal": name, "timeout": seconds}
        stored = {**input, "until": iso(until) if until is not None else None}
        op = await self._ctx.open_wait(op_key, "signal", input, stored=stored)
        if op is not None:
            if op.status == "completed":
                return self._signal_result(op_key, name, op.result)
            stored = op.input
            until_text = op.input.get("until")
            until = datetime.fromisoformat(until_text) if until_text else None
        lock = self._signal_locks.setdefault(name, asyncio.Lock())
        async with lock:
            taken = await self._signals_taken(name)
            number = taken + 1
            found = await self._ctx.read(lambda tx: tx.signal_number(self.run_id, name, number))
            if found is not None:
                result = {"value": found.value, "request_id": found.request_id, "number": number}
                await self._ctx.close_wait(op_key, "signal", stored, result)
                self._taken[name] = number
                return self._signal_result(op_key, name, result)
        if until is not None and self._ctx.now() >= until:
            await self._ctx.close_wait(op_key, "signal", stored, {"timeout": True})
            return self._signal_result(op_key, name, {"timeout": True})
        raise Waiting(
            f"signal {name!r} at {op_key}",
            operation=op_key,
            interactions=False,
            until=until,
            signals={name: taken},
        )

    def _signal_result(self, key: str, name: str, result: JSON) -> Any:
        if isinstance(result, dict) and result.get("timeout"):
            raise SignalTimeout(self.run_id, name, key)
        return result.get("value") if isinstance(result, dict) else None

    async def _signals_taken(self, name: str) -> int:
        """How many signals of ``name`` the journaled waits consumed."""
        if name not in self._taken:
            numbers = [
                int(op.result["number"])
                for op in self._ctx.operations.values()
                if op.kind == "signal"
                and op.status == "completed"
                and isinstance(op.input, dict)
                and op.input.get("signal") == name
                and isinstance(op.result, dict)
                and "number" in op.result
            ]
            self._taken[name] = max(numbers, default=0)
        return self._taken[name]

    # -- children ----------------------------------------------------------------------------

    async def run_agent(
        self, agent_id: str, prompt: str, *, key: str | None = None, version: str | None = None
    ) -> Any:
        """Run an agent as an owned child run (its own session, in this run's tree) and return
        its :class:`~stead.RunOutcome` (``output``, the child's own ``messages`` from its prompt
        to its final answer, ``usage``); raises :class:`stead.RunFailed` or
        :class:`stead.RunCancelled` as the child ended. The run waits without holding a slot;
        cancelling it cancels the child."""
        if not isinstance(prompt, str) or not prompt.strip():
            raise ValidationError(f"run_agent({agent_id!r}): prompt must be non-blank text")
        return await self._child("agent", agent_id, {"prompt": prompt}, key, version)

    async def run_task(
        self,
        task: str,
        input: Any = None,
        *,
        key: str | None = None,
        version: str | int | None = None,
    ) -> Any:
        """Run a task as an owned child run and return its :class:`~stead.RunOutcome` (its
        ``output`` is the task's JSON output); raises as :meth:`run_agent` does."""
        value = self._definitions.task_input(task, input)
        return await self._child(
            "task", task, {"input": value}, key, None if version is None else str(version)
        )

    async def _child(
        self,
        kind: str,
        definition: str,
        child_input: JSON,
        key: str | None,
        version: str | None,
        *,
        settle: Sequence[str] = ("completed", "failed", "cancelled"),
    ) -> Any:
        _name(kind, definition)
        found_kind = self._definitions.kind_of(definition)
        if found_kind != kind:
            raise ValidationError(
                f"{definition!r} is not a registered {kind}"
                + (f" (it is a {found_kind})" if found_kind else "")
            )
        op_key = self._key(_name("key", key) if key is not None else f"{kind}:{definition}")
        child_id = child_run_id(self.run_id, op_key)
        input = {"kind": kind, "definition": definition, "input": child_input}
        op = self._ctx.operations.get(op_key)
        pinned = (
            str(op.input.get("version"))
            if op is not None and isinstance(op.input, dict)
            else self._definitions.version_of(definition, version)
        )
        stored = {**input, "run_id": child_id, "version": pinned}
        op = await self._ctx.open_wait(
            op_key,
            "child",
            input,
            stored=stored,
            start=functools.partial(
                transitions.start_child,
                child_id=child_id,
                kind=kind,
                definition=definition,
                version=pinned,
                input=child_input,
            ),
        )
        if op is not None and op.status == "completed":
            return await self._child_result(op.result)
        if op is not None:
            stored = op.input
            child_id = str(op.input.get("run_id", child_id))
        child = await self._ctx.read(lambda tx: tx.get_run(child_id))
        if child is not None and child.status.value in settle:
            result = {
                "run_id": child.id,
                "status": child.status.value,
                "output": (child.outcome or {}).get("output") if child.outcome else None,
                "usage": (child.outcome or {}).get("usage") if child.outcome else None,
                "reason": (child.error or {}).get("reason") if child.error else None,
                "error_kind": child.error_kind,
            }
            await self._ctx.close_wait(op_key, "child", stored, result)
            return await self._child_result(result)
        state = child.status.value if child is not None else "missing"
        raise Waiting(
            f"child run {child_id} ({kind} {definition!r}) at {op_key} is {state}",
            operation=op_key,
            interactions=False,
            children={child_id: tuple(settle)},
        )

    async def _child_result(self, result: JSON) -> Any:
        from ..handle import RunOutcome

        status = result.get("status")
        run_id = str(result.get("run_id"))
        if status == "failed":
            raise RunFailed(
                run_id,
                str(result.get("reason") or "unknown"),
                str(result.get("error_kind") or "error"),
            )
        if status == "cancelled":
            raise RunCancelled(run_id, result.get("reason"))
        # An agent child's own messages are in its journal, which a completed run no longer
        # changes: read the same ones on every replay.
        bodies = await self._ctx.read(lambda tx: _own_messages(tx, run_id))
        return RunOutcome(
            run_id=run_id,
            output=result.get("output"),
            messages=tuple(message_from_json(loads(body)) for body in bodies),
            usage=Usage.from_json(result.get("usage") or {}),
        )

    # -- branches ----------------------------------------------------------------------------

    async def gather(self, *awaitables: Awaitable[Any]) -> list[Any]:
        """Run branches concurrently and return their results in order. Each branch gets a
        scope of its own for its keys, so a replay does not depend on which finished first.
        Every branch runs until it ends or waits; then the first failure (by branch order) is
        raised, or the run waits for what the waiting branches wait for."""
        for aw in awaitables:
            if not inspect.isawaitable(aw):
                raise ValidationError(
                    f"gather() takes awaitables such as ctx.run_agent(...), got {shown(aw)}"
                )
        scope = self._key("gather")

        async def branch(index: int, aw: Awaitable[Any]) -> Any:
            _SCOPE.set(f"{scope}/{index}")
            return await aw

        tasks = [asyncio.ensure_future(branch(index, aw)) for index, aw in enumerate(awaitables, 1)]
        try:
            await asyncio.wait(tasks)
        finally:
            for pending in tasks:
                pending.cancel()
        results: list[Any] = []
        stops: list[BaseException] = []
        failures: list[BaseException] = []
        waits: list[Waiting] = []
        for done in tasks:
            if done.cancelled():
                stops.append(asyncio.CancelledError())
                continue
            exc = done.exception()
            if exc is None:
                results.append(done.result())
            elif isinstance(exc, Waiting):
                waits.append(exc)
            elif isinstance(exc, Stop | StorageError | LeaseLostError | asyncio.CancelledError):
                stops.append(exc)
            else:
                failures.append(exc)
        if stops:
            raise stops[0]
        if failures:
            raise failures[0]
        if waits:
            raise _merged(waits)
        return results


def _merged(waits: list[Waiting]) -> Waiting:
    """One wait for what every waiting branch waits for: the run goes on when any of it comes."""
    untils = [w.until for w in waits if w.until is not None]
    signals: dict[str, int] = {}
    for w in waits:
        for name, taken in w.signals.items():
            signals[name] = min(taken, signals.get(name, taken))
    children = {child: statuses for w in waits for child, statuses in w.children.items()}
    return Waiting(
        "; ".join(w.reason for w in waits),
        operation=waits[0].operation,
        interactions=any(w.interactions for w in waits),
        until=min(untils) if untils else None,
        signals=signals,
        children=children,
    )


def _own_messages(tx: Tx, run_id: str) -> list[str]:
    """The messages a completed agent run added (prompt through final answer), as canonical
    JSON; none for a task or graph."""
    run = tx.get_run(run_id)
    if run is None or run.kind != "agent" or run.status != RunStatus.COMPLETED:
        return []
    return own_messages(tx, run, tx.operations(run_id))
