"""What the executor runs: a definition (an agent; later a task or a graph) behind one protocol,
so the runtime dispatches on a run's kind without knowing what an agent is."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from .._json import JSON
from ..journal.records import Run, Writes
from ..messages import Message, Usage
from .context import RunContext

__all__ = ["Completion", "Definition", "Registry"]


@dataclass(frozen=True, slots=True)
class Completion:
    """How an execution ended with an outcome: the run's ``outcome`` record (which
    ``result()`` reads), the rows written with it, and — to answer ``result()`` in this process
    without reading them back — its ``output``, its own ``messages`` and its ``usage``."""

    outcome: JSON
    writes: Writes
    output: JSON
    messages: Sequence[Message]
    usage: Usage


class Definition(Protocol):
    """Registered code a run executes (an agent, a task...)."""

    async def execute(self, ctx: RunContext) -> Completion:
        """Run (or replay) the run from its start through ``ctx``; return its completion, or
        raise one of :mod:`stead.runtime.control`'s stops."""
        ...


class Registry(Protocol):
    """Where the runtime finds the definition of a run (an :class:`~stead.App`)."""

    def definition(self, run: Run) -> Definition | None: ...

    def migration(self, run: Run) -> tuple[str, JSON] | None:
        """For a run whose version is not registered: the version that takes it over and the
        run's input for it, or ``None``; raises :class:`~stead.ValidationError` saying why a
        migration refused it."""
        ...
