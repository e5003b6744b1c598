"""Every error stead raises, rooted at :class:`SteadError`.

::

    SteadError
    ├── ValidationError        bad input to a public entry point; nothing was written
    ├── NotFoundError          an unknown run, agent, operation or interaction
    ├── ConflictError          a duplicate id with different content, a busy session, a wrong state
    ├── LimitError             a payload or count over a configured limit; nothing was written
    ├── OwnershipError         another live runtime owns the store
    ├── SchemaVersionError     the database was written by a newer stead
    ├── LeaseLostError         (inside a worker) another worker took the run over
    ├── StorageError           the store failed; the runtime is poisoned until reopened
    ├── RuntimeClosedError     the runtime was closed; open the store again
    ├── ModelError             a model provider failed (``retryable`` says whether to try again)
    ├── RunBlocked             a one-call run stopped to wait for a person
    ├── RunFailed              awaiting a run that ended ``failed``
    └── RunCancelled           awaiting a run that ended ``cancelled``

Every message says what happened, to what (run id, operation key, path) and what to do next.
"""

from __future__ import annotations

import reprlib
from collections.abc import Sequence

__all__ = [
    "ConflictError",
    "LeaseLostError",
    "LimitError",
    "ModelError",
    "NotFoundError",
    "OwnershipError",
    "RunBlocked",
    "RunCancelled",
    "RunFailed",
    "RuntimeClosedError",
    "SchemaVersionError",
    "SteadError",
    "StorageError",
    "ValidationError",
]


_REPR = reprlib.Repr()
_REPR.maxstring = 80
_REPR.maxother = 80


def shown(value: object) -> str:
    """A short, safe ``repr`` of a value for an error message: bounded in length and depth,
    and never raising (an int too long to print, a value whose ``repr`` fails)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 256:
        return f"<an integer of {value.bit_length()} bits>"
    try:
        return _REPR.repr(value)
    except Exception:
        return f"<a {type(value).__name__} that cannot be shown>"


def described(exc: BaseException) -> str:
    """``"Type: message"`` for an exception, never raising (whatever its arguments are)."""
    try:
        text = str(exc)
    except Exception:
        text = shown(exc.args)
    return f"{type(exc).__name__}: {text}"


class SteadError(Exception):
    """Base of every error stead raises."""


class ValidationError(SteadError, ValueError):
    """A public entry point was given input it cannot accept. Nothing was written.

    ``parameter`` names the argument at fault where one alone is (``"version"``, say), so that
    a caller with other names for its arguments (the CLI's options) can say it its own way;
    ``None`` otherwise."""

    def __init__(self, message: str = "", *, parameter: str | None = None) -> None:
        super().__init__(message)
        self.parameter = parameter


class NotFoundError(SteadError, LookupError):
    """The run, agent, operation or interaction named does not exist."""


class ConflictError(SteadError):
    """The request contradicts what the journal already holds."""


class LimitError(SteadError):
    """A payload or a count is over a configured limit. Nothing was written."""


class OwnershipError(SteadError):
    """Another live runtime owns the store."""


class SchemaVersionError(SteadError):
    """The database was written by a newer version of stead than this one."""


class LeaseLostError(SteadError):
    """This worker no longer holds the run's claim: its lease expired and another worker took
    the run over, or the run was cancelled. Nothing of the refused write was kept; the worker
    drops the run (raised inside a worker, never to a caller)."""


class StorageError(SteadError):
    """The store failed. The runtime refuses every later call until it is closed and reopened."""


class RuntimeClosedError(SteadError):
    """The runtime was closed (by :meth:`Runtime.close` or leaving its ``async with``); open
    the store again with ``App.open`` to go on."""


class ModelError(SteadError):
    """A model provider failed.

    ``retryable`` is true for rate limits, overload and transient network errors (the agent's
    ``model_retry`` applies, honouring ``retry_after`` seconds when the provider gave one); false
    for authentication, bad-request and context-length errors, which fail the run at once.
    """

    def __init__(
        self,
        message: str,
        *,
        provider: str | None = None,
        status_code: int | None = None,
        retryable: bool = False,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.provider = provider
        self.status_code = status_code
        self.retryable = retryable
        self.retry_after = retry_after


class RunFailed(SteadError):
    """The awaited run ended ``failed``; ``run_id`` and ``reason`` say which and why, and
    ``kind`` types the reason: ``model``, ``max_turns``, ``budget``, ``approval`` or ``error``
    for an agent run; ``task`` (the task's code raised) or ``graph`` (a node was cancelled)."""

    def __init__(self, run_id: str, reason: str, kind: str = "error") -> None:
        super().__init__(f"run {run_id} failed: {reason}")
        self.run_id = run_id
        self.reason = reason
        self.kind = kind


class RunBlocked(SteadError):
    """The run stopped to wait for a person (``waiting`` for a response, or
    ``needs_attention``): ``stead.run_agent`` raises it instead of waiting for ever. The run is
    kept; answer or resolve it (the message names the command), then call again to continue."""

    def __init__(
        self,
        run_id: str,
        status: str,
        reason: str,
        interactions: Sequence[object] = (),
        *,
        next_step: str = "",
    ) -> None:
        super().__init__(f"run {run_id} is {status}: {reason}{next_step}")
        self.run_id = run_id
        self.status = status
        self.reason = reason
        self.interactions = list(interactions)


class RunCancelled(SteadError):
    """The awaited run ended ``cancelled``."""

    def __init__(self, run_id: str, reason: str | None = None) -> None:
        detail = f": {reason}" if reason else ""
        super().__init__(f"run {run_id} was cancelled{detail}")
        self.run_id = run_id
        self.reason = reason


class SignalTimeout(SteadError, TimeoutError):
    """Raised inside a task by ``ctx.wait_for_signal(name, timeout=...)`` when no signal of
    ``name`` arrived in time (the timeout is journaled: a replay raises it again)."""

    def __init__(self, run_id: str, name: str, key: str) -> None:
        super().__init__(
            f"run {run_id}: no signal {name!r} arrived before the timeout of wait {key}"
        )
        self.run_id = run_id
        self.name = name
        self.key = key


class StepFailed(SteadError):
    """A task's step or effect raised an exception that cannot be raised again as its own type
    on replay (its class is gone or takes other arguments): ``error_type`` names it, the
    message is its own."""

    def __init__(self, key: str, error_type: str, message: str) -> None:
        super().__init__(f"{key} raised {error_type}: {message}")
        self.key = key
        self.error_type = error_type
        self.message = message
