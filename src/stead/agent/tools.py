"""Tools: Python callables the model may call, with a recovery policy.

The schema the model sees and the validation of its arguments both come from the function's
type hints, through pydantic. A parameter annotated :class:`ToolContext` is filled by stead and
hidden from the model.
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar, overload

import pydantic

from .._threads import run_in_thread
from ..errors import ValidationError, shown
from ..journal.records import RECOVERY_POLICIES, Recovery
from ..messages import ToolSpec

__all__ = ["ModelRetry", "Tool", "ToolContext", "tool"]

P = ParamSpec("P")
R = TypeVar("R")


class ModelRetry(Exception):
    """Raised by a tool to hand ``message`` to the model as the tool's (failed) result, so it
    can correct its call."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What a tool may know about the call it serves.

    ``operation_id`` (``"<run_id>/<key>"``) is the same on every attempt of this call: pass it to
    external services as the idempotency key of an ``idempotent`` tool. ``approved`` is true when
    a person approved this call (a tool raising ``ApprovalRequired`` checks it).
    """

    run_id: str
    session_id: str
    operation_id: str
    key: str
    attempt: int
    approved: bool = False


class Tool:
    """A registered tool. Build one with :func:`tool`."""

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        recovery: Recovery = "manual",
        approval: bool | Callable[[dict[str, Any]], bool] = False,
        max_attempts: int = 3,
        blocking: bool = True,
    ) -> None:
        if not callable(fn):
            raise ValidationError(f"a tool must wrap a function, got {shown(fn)}")
        if recovery not in RECOVERY_POLICIES:
            raise ValidationError(
                f"tool {getattr(fn, '__name__', fn)!r}: recovery must be one of "
                f"{', '.join(RECOVERY_POLICIES)}, not {recovery!r}"
            )
        tool_name = name if name is not None else getattr(fn, "__name__", "")
        if not isinstance(tool_name, str) or not tool_name.strip():
            raise ValidationError(f"tool {fn!r} needs a name: pass name=...")
        self.fn = fn
        self.name = tool_name
        self.description = (
            description if description is not None else inspect.cleandoc(fn.__doc__ or "")
        ).strip()
        self.recovery: Recovery = recovery
        if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
            raise ValidationError(
                f"tool {tool_name!r}: max_attempts must be a positive integer, got "
                f"{shown(max_attempts)}"
            )
        self.max_attempts = max_attempts
        if not isinstance(approval, bool) and not callable(approval):
            raise ValidationError(
                f"tool {tool_name!r}: approval must be True, False or a predicate over the "
                f"validated arguments, not {approval!r}"
            )
        self.approval = approval
        if not isinstance(blocking, bool):
            raise ValidationError(
                f"tool {tool_name!r}: blocking must be True or False, not {shown(blocking)}"
            )
        self.blocking = blocking
        self.is_question = False
        self.is_async = inspect.iscoroutinefunction(fn)
        self._context_param, self._arguments = _arguments_model(fn, tool_name)
        #: The arguments model's validator, called directly: a call's fields are then the
        #: model's ``__dict__`` (no aliases, extra fields forbidden), in half the time of
        #: ``model_validate`` and reading each field back.
        self._validator = self._arguments.__pydantic_validator__
        schema = self._arguments.model_json_schema()
        schema.pop("title", None)
        self.parameters: Mapping[str, Any] = schema

    def __repr__(self) -> str:
        return f"<stead tool {self.name!r} recovery={self.recovery!r}>"

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(name=self.name, description=self.description, parameters=self.parameters)

    def needs_approval(self, arguments: dict[str, Any]) -> bool:
        """Whether this call waits for a person (``approval=True`` or the predicate says so)."""
        if isinstance(self.approval, bool):
            return self.approval
        return bool(self.approval(arguments))

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """Validated keyword arguments; raises ``pydantic.ValidationError``."""
        return dict(self._validator.validate_python(dict(arguments)).__dict__)

    @property
    def takes_context(self) -> bool:
        """Whether the function has a :class:`ToolContext` parameter."""
        return self._context_param is not None

    async def call(self, arguments: dict[str, Any], context: ToolContext | None) -> Any:
        """Run the tool: async functions on the loop, sync ones in a worker thread (or on the
        loop, when declared ``blocking=False``). ``context`` is passed to a function that
        takes one (:attr:`takes_context`); ``None`` will do for one that does not."""
        kwargs = dict(arguments)
        if self._context_param is not None:
            if context is None:
                raise TypeError(f"tool {self.name!r} takes a ToolContext and was given none")
            kwargs[self._context_param] = context
        if self.is_async:
            return await self.fn(**kwargs)
        if not self.blocking:
            return self.fn(**kwargs)
        return await run_in_thread(self.fn, **kwargs)

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the underlying function directly (outside any run; nothing is journaled)."""
        result = self.fn(*args, **kwargs)
        return await result if isinstance(result, Awaitable) else result


def _arguments_model(
    fn: Callable[..., Any], name: str
) -> tuple[str | None, type[pydantic.BaseModel]]:
    try:
        hints = typing.get_type_hints(fn)
    except Exception as exc:
        raise ValidationError(f"tool {name!r}: cannot read its type hints ({exc})") from exc
    context_param: str | None = None
    fields: dict[str, Any] = {}
    for param in inspect.signature(fn).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ValidationError(
                f"tool {name!r}: *args and **kwargs cannot be described to a "
                "model; list the parameters"
            )
        hint = hints.get(param.name)
        if hint is ToolContext or (
            typing.get_origin(hint) in (typing.Union, types.UnionType)
            and ToolContext in typing.get_args(hint)
        ):
            context_param = param.name
            continue
        if hint is None:
            raise ValidationError(
                f"tool {name!r}: parameter {param.name!r} needs a type hint "
                "(it becomes the JSON schema the model sees)"
            )
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[param.name] = (hint, default)
    model = pydantic.create_model(
        f"{name}_arguments", __config__=pydantic.ConfigDict(extra="forbid"), **fields
    )
    return context_param, model


@overload
def tool(fn: Callable[P, R], /) -> Tool: ...
@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    recovery: Recovery = "manual",
    approval: bool | Callable[[dict[str, Any]], bool] = False,
    max_attempts: int = 3,
    blocking: bool = True,
) -> Callable[[Callable[P, R]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    recovery: Recovery = "manual",
    approval: bool | Callable[[dict[str, Any]], bool] = False,
    max_attempts: int = 3,
    blocking: bool = True,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Register a function as a tool.

    ``recovery`` decides what happens when the process dies while the tool runs (DESIGN §3):
    ``"safe"`` runs it again, ``"idempotent"`` runs it again with the same
    ``ToolContext.operation_id``, ``"manual"`` (the default) stops the run in
    ``needs_attention`` until a person resolves or retries it.

    ``approval=True`` makes every call wait for a person; a predicate receives the validated
    arguments as a dict (``approval=lambda args: args["amount"] > 100``) and must be
    deterministic, since it is asked again when the run replays.

    ``max_attempts`` bounds how often a ``safe`` or ``idempotent`` call that was interrupted
    (the process died while it ran) is started again: once it was started that many times
    without finishing, the run goes to ``needs_attention`` instead of crashing once more.

    A synchronous function runs in a worker thread, so a tool that waits on the network never
    stalls other runs; handing it over costs tens of microseconds, and at most 32 such calls
    run at once in a process (more wait for a free thread). ``blocking=False`` declares
    that it never waits (pure computation, an in-memory lookup): it then runs on the event loop
    itself, without the hand-off. Async functions always run on the loop.
    """

    def wrap(function: Callable[..., Any]) -> Tool:
        return Tool(
            function,
            name=name,
            description=description,
            recovery=recovery,
            approval=approval,
            max_attempts=max_attempts,
            blocking=blocking,
        )

    if fn is not None:
        return wrap(fn)
    return wrap
