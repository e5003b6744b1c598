"""A task: an ``async def`` registered under a name and a version, run as a durable run.

Its input and output are JSON values or anything pydantic can validate and dump (models,
dataclasses, typed dicts): the annotation of the input parameter validates a submission before
anything is written, and the return annotation turns the journaled output back into its type.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any, overload

from pydantic import TypeAdapter
from pydantic import ValidationError as PydanticValidationError

from .._checks import require_id
from .._json import JSON, NotJSONError, to_json
from ..errors import ValidationError, shown

__all__ = ["Task", "task"]

TaskFn = Callable[..., Awaitable[Any]]
#: ``migrate(version, input)``: the input, as this version takes it, of a run recorded under an
#: older ``version`` whose code is no longer registered.
Migrate = Callable[[str, JSON], Any]


class Task:
    """A registered task (made by :func:`stead.task`). Calling it is not how it runs: submit it
    with ``runtime.submit_task(name, input, ...)`` or start it from another task with
    ``ctx.run_task(name, input)``."""

    def __init__(
        self,
        fn: TaskFn,
        *,
        name: str | None = None,
        version: int | str = 1,
        migrate: Migrate | None = None,
    ) -> None:
        if not inspect.iscoroutinefunction(fn):
            raise ValidationError(
                f"@stead.task needs an async def function, got {shown(fn)}; write "
                "`async def my_task(ctx: stead.TaskContext, input): ...`"
            )
        self.fn = fn
        self.name = require_id("task name", name if name is not None else fn.__name__)
        if "/" in self.name or "#" in self.name:
            raise ValidationError(f"task name {self.name!r} may not contain '/' or '#'")
        self.version = _version(self.name, version)
        self.migrate = _migrate(self.name, migrate)
        params = list(inspect.signature(fn).parameters.values())
        positional = [
            p
            for p in params
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
        ]
        if not 1 <= len(positional) <= 2 or any(
            p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
            and p.default is p.empty
            and p not in positional
            for p in params
        ):
            raise ValidationError(
                f"task {self.name!r}: the function takes the task context and at most one "
                f"input, as in `async def {fn.__name__}(ctx, input)`; it takes "
                f"({', '.join(p.name for p in params)})"
            )
        self.takes_input = len(positional) == 2
        hints = _hints(fn)
        annotation = hints.get(positional[1].name, Any) if self.takes_input else None
        self._input = TypeAdapter(annotation) if annotation not in (None, Any) else None
        returned = hints.get("return", Any)
        self._output = TypeAdapter(returned) if returned not in (Any, None, type(None)) else None
        self.__doc__ = fn.__doc__
        self.__name__ = self.name

    def __repr__(self) -> str:
        return f"<stead Task {self.name!r} version {self.version}>"

    def input_json(self, value: Any) -> JSON:
        """A submission's input as the JSON the run keeps; :class:`ValidationError` if it is
        not valid for the task's input type or cannot be journaled."""
        if not self.takes_input:
            if value is not None:
                raise ValidationError(
                    f"task {self.name!r} takes no input, got {shown(value)}; submit it without one"
                )
            return None
        if self._input is not None:
            try:
                value = self._input.validate_python(value)
            except PydanticValidationError as exc:
                raise ValidationError(
                    f"the input of task {self.name!r} is not valid: "
                    f"{_first_errors(exc)}; nothing was submitted"
                ) from None
            try:
                return to_json(self._input.dump_python(value, mode="json"))
            except NotJSONError as exc:
                raise ValidationError(
                    f"the input of task {self.name!r} cannot be journaled: {exc}"
                ) from None
        try:
            return to_json(value)
        except NotJSONError as exc:
            raise ValidationError(
                f"the input of task {self.name!r} must be JSON or a pydantic model: {exc}; "
                "nothing was submitted"
            ) from None

    def migrated_input(self, version: str, stored: JSON) -> JSON:
        """The input of a run recorded under ``version`` (not registered any more), carried
        onto this version by its ``migrate``; :class:`ValidationError` saying why not."""
        if self.migrate is None:
            raise ValidationError(f"task {self.name!r} version {self.version} has no migrate")
        try:
            value = self.migrate(version, stored)
        except Exception as exc:
            raise ValidationError(
                f"migrate of task {self.name!r} version {self.version} refused a run of version "
                f"{version!r}: {type(exc).__name__}: {exc}"
            ) from exc
        try:
            return self.input_json(value)
        except ValidationError as exc:
            raise ValidationError(
                f"migrate of task {self.name!r} version {self.version} returned an input this "
                f"version does not take, for a run of version {version!r}: {exc}"
            ) from None

    def input_value(self, stored: JSON) -> Any:
        """The task's argument from the JSON its run keeps."""
        return self._input.validate_python(stored) if self._input is not None else stored

    def output_json(self, value: Any) -> JSON:
        """The task's return value as the JSON its outcome keeps."""
        if self._output is not None:
            value = self._output.dump_python(value, mode="json")
        return to_json(value)


def _version(name: str, version: object) -> str:
    if isinstance(version, bool) or not isinstance(version, int | str):
        raise ValidationError(
            f"task {name!r}: version must be a positive integer (or a version string), got "
            f"{shown(version)}"
        )
    if isinstance(version, int):
        if version < 1:
            raise ValidationError(f"task {name!r}: version must be >= 1, got {version}")
        return str(version)
    return require_id(f"task {name!r} version", version)


def _migrate(name: str, migrate: object) -> Migrate | None:
    if migrate is None:
        return None
    if not callable(migrate) or inspect.iscoroutinefunction(migrate):
        raise ValidationError(
            f"task {name!r}: migrate must be a plain function (version, input) -> input, got "
            f"{shown(migrate)}; it runs inside the transaction that starts the run, so it "
            "cannot be async"
        )
    try:
        inspect.signature(migrate).bind("1", None)
    except TypeError:
        raise ValidationError(
            f"task {name!r}: migrate must take two arguments, the run's recorded version and "
            f"its input, as in `def migrate(version, input): ...`; got {shown(migrate)}"
        ) from None
    except ValueError:  # a builtin without a signature: let a call tell
        pass
    return migrate


def _hints(fn: TaskFn) -> dict[str, Any]:
    try:
        import typing

        return typing.get_type_hints(fn)
    except Exception:  # an annotation that does not resolve: treat the values as plain JSON
        return {}


def _first_errors(exc: PydanticValidationError) -> str:
    parts = []
    for error in exc.errors()[:3]:
        where = ".".join(str(p) for p in error.get("loc", ())) or "input"
        parts.append(f"{where}: {error.get('msg')}")
    return "; ".join(parts)


@overload
def task(fn: TaskFn, /) -> Task: ...


@overload
def task(
    *, name: str | None = None, version: int | str = 1, migrate: Migrate | None = None
) -> Callable[[TaskFn], Task]: ...


def task(
    fn: TaskFn | None = None,
    /,
    *,
    name: str | None = None,
    version: int | str = 1,
    migrate: Migrate | None = None,
) -> Task | Callable[[TaskFn], Task]:
    """Register an ``async def`` as a durable task::

        @stead.task(name="triage", version=1)
        async def triage(ctx: stead.TaskContext, ticket: Ticket) -> Report: ...

    ``name`` defaults to the function's name. A run is pinned to the version it was submitted
    with; give a changed task a new version and keep the old one registered while its runs
    finish.

    ``migrate(version, input)`` lets this version take over unfinished runs of older versions
    that are no longer registered: when such a run is next started, and this is the latest
    registered version of the task, the run is re-pinned to this version with the input
    ``migrate`` returns (validated as a submission's), and replays its journal under this code —
    committed steps and effects whose keys and inputs still match are not run again; one that
    does not match stops the run in ``needs_attention``, as any changed definition does. An
    exception from ``migrate`` (or an input this version does not take) leaves the run as it
    was, in ``needs_attention`` with the reason. It runs inside the transaction that starts
    the run: keep it a plain, quick function of its arguments.
    """
    if fn is not None:
        return Task(fn, name=name, version=version, migrate=migrate)
    return lambda function: Task(function, name=name, version=version, migrate=migrate)
