"""Commands: requests to change a run from outside it, as serializable data.

The same object whether it comes from Python, the CLI, HTTP or an inbox row (DESIGN §2): a
process that does not own the store posts it, the owner applies it with the same transition it
uses in-process (:func:`stead.journal.transitions.apply`), and the answer travels back as JSON.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

from .. import errors
from .._json import JSON, NotJSONError, check, check_text
from ..errors import SteadError, ValidationError, shown

__all__ = [
    "Cancel",
    "Command",
    "Fork",
    "Resolve",
    "Respond",
    "Retry",
    "Signal",
    "Submit",
    "SubmitGraph",
    "SubmitTask",
    "answer_of",
    "command_from_json",
    "command_to_json",
    "describe",
    "error_answer",
]


@dataclass(frozen=True, slots=True)
class Submit:
    """Start a run of an agent (``version`` ``None``: the latest the owner registered)."""

    run_id: str
    agent_id: str
    session_id: str
    request_id: str
    prompt: str
    version: str | None = None
    enqueue: bool = False
    name: Literal["submit"] = "submit"


@dataclass(frozen=True, slots=True)
class SubmitTask:
    """Start a run of a task with a JSON ``input`` (``version`` ``None``: the latest the owner
    registered)."""

    run_id: str
    task: str
    session_id: str
    request_id: str
    input: JSON
    version: str | None = None
    enqueue: bool = False
    name: Literal["submit_task"] = "submit_task"


@dataclass(frozen=True, slots=True)
class SubmitGraph:
    """Start a graph run: ``nodes`` as JSON, validated and in a dependency order."""

    run_id: str
    session_id: str
    request_id: str
    nodes: list[dict[str, JSON]]
    enqueue: bool = False
    name: Literal["submit_graph"] = "submit_graph"


@dataclass(frozen=True, slots=True)
class Signal:
    """Deliver a signal to a task run: journaled on arrival, consumed by its waits in order,
    deduplicated by ``request_id``."""

    run_id: str
    signal: str
    value: JSON
    request_id: str
    name: Literal["signal"] = "signal"


@dataclass(frozen=True, slots=True)
class Respond:
    """Answer an interaction: ``response`` is the JSON of an Approve, Deny or Answer."""

    interaction_id: str
    response: dict[str, JSON]
    name: Literal["respond"] = "respond"


@dataclass(frozen=True, slots=True)
class Resolve:
    """Supply the result of the operation a needs_attention run names."""

    run_id: str
    key: str
    output: JSON
    name: Literal["resolve"] = "resolve"


@dataclass(frozen=True, slots=True)
class Retry:
    """Continue a failed or needs_attention run (an interrupted operation runs again)."""

    run_id: str
    name: Literal["retry"] = "retry"


@dataclass(frozen=True, slots=True)
class Cancel:
    run_id: str
    reason: str | None = None
    name: Literal["cancel"] = "cancel"


@dataclass(frozen=True, slots=True)
class Fork:
    """Start a run reusing ``run_id``'s journal before operation ``before``."""

    run_id: str
    before: str
    new_run_id: str
    session_id: str
    request_id: str
    version: str | None = None
    name: Literal["fork"] = "fork"


Command = Submit | SubmitTask | SubmitGraph | Signal | Respond | Resolve | Retry | Cancel | Fork

_BY_NAME: dict[str, type[Any]] = {
    "submit": Submit,
    "submit_task": SubmitTask,
    "submit_graph": SubmitGraph,
    "signal": Signal,
    "respond": Respond,
    "resolve": Resolve,
    "retry": Retry,
    "cancel": Cancel,
    "fork": Fork,
}


def command_to_json(command: Command) -> dict[str, JSON]:
    return asdict(command)


#: The type of every field of every command, checked before a posted command is applied:
#: whoever can write the file can post anything to its inbox.
_FIELDS: dict[str, dict[str, str]] = {
    "submit": {
        "run_id": "str",
        "agent_id": "str",
        "session_id": "str",
        "request_id": "str",
        "prompt": "str",
        "version": "str?",
        "enqueue": "bool",
    },
    "submit_task": {
        "run_id": "str",
        "task": "str",
        "session_id": "str",
        "request_id": "str",
        "input": "json",
        "version": "str?",
        "enqueue": "bool",
    },
    "submit_graph": {
        "run_id": "str",
        "session_id": "str",
        "request_id": "str",
        "nodes": "list",
        "enqueue": "bool",
    },
    "signal": {"run_id": "str", "signal": "str", "value": "json", "request_id": "str"},
    "respond": {"interaction_id": "str", "response": "object"},
    "resolve": {"run_id": "str", "key": "str", "output": "json"},
    "retry": {"run_id": "str"},
    "cancel": {"run_id": "str", "reason": "str?"},
    "fork": {
        "run_id": "str",
        "before": "str",
        "new_run_id": "str",
        "session_id": "str",
        "request_id": "str",
        "version": "str?",
    },
}


def _valid(kind: str, value: JSON) -> bool:
    if kind.endswith("?"):
        return value is None or _valid(kind[:-1], value)
    if kind == "str":
        return isinstance(value, str) and check_text(value) is None
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "list":
        return isinstance(value, list) and all(_valid("object", v) for v in value)
    try:
        check(value)
    except NotJSONError:
        return False
    return kind == "json" or isinstance(value, dict)


def command_from_json(data: JSON) -> Command:
    """The command an inbox row holds; :class:`ValidationError` for anything else."""
    if not isinstance(data, dict) or data.get("name") not in _BY_NAME:
        raise ValidationError(f"not a stead command: {shown(data)}")
    name = data["name"]
    fields = _FIELDS[name]
    unknown = sorted(set(data) - set(fields) - {"name"})
    wrong = sorted(k for k, kind in fields.items() if k in data and not _valid(kind, data[k]))
    if unknown or wrong:
        raise ValidationError(
            f"malformed {name} command: "
            + "; ".join(
                ([f"unknown fields {', '.join(unknown)}"] if unknown else [])
                + ([f"fields of the wrong type: {', '.join(wrong)}"] if wrong else [])
            )
        )
    try:
        command: Command = _BY_NAME[name](**data)
    except TypeError as exc:
        raise ValidationError(f"malformed {name} command ({exc}): {shown(data)}") from None
    return command


def describe(command: Command) -> str:
    """A short human name for a command, for messages: ``respond(int_…)``."""
    if isinstance(command, Respond):
        return f"respond({command.interaction_id})"
    if isinstance(command, Resolve):
        return f"resolve({command.run_id}, {command.key})"
    if isinstance(command, Fork):
        return f"fork({command.run_id}, before={command.before})"
    if isinstance(command, Submit):
        return f"submit({command.agent_id}, {command.session_id}/{command.request_id})"
    if isinstance(command, SubmitTask):
        return f"submit_task({command.task}, {command.session_id}/{command.request_id})"
    if isinstance(command, SubmitGraph):
        return f"submit_graph({command.session_id}/{command.request_id})"
    if isinstance(command, Signal):
        return f"signal({command.run_id}, {command.signal}, {command.request_id})"
    return f"{command.name}({command.run_id})"


def error_answer(exc: SteadError) -> dict[str, JSON]:
    """The stored answer of a command that failed: the error's class and message."""
    return {"error": {"type": type(exc).__name__, "message": str(exc)}}


def answer_of(answer: JSON) -> JSON:
    """The value of a stored answer, or raise the error it holds as the same class."""
    if isinstance(answer, dict) and "error" in answer:
        error = answer["error"]
        cls = getattr(errors, str(error.get("type")), None)
        if not (isinstance(cls, type) and issubclass(cls, SteadError)):
            cls = SteadError
        try:
            raise cls(error.get("message", "the command failed"))
        except TypeError:  # an error class with a richer constructor
            raise SteadError(error.get("message", "the command failed")) from None
    return answer.get("value") if isinstance(answer, dict) else None
