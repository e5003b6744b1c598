"""Crash helpers: stop this process with SIGKILL at a named boundary of the journal protocol."""

from __future__ import annotations

import fnmatch
import os
import signal

from ..errors import ValidationError
from ..runtime import boundaries

__all__ = ["crash_at", "kill_self"]


def kill_self() -> None:
    """SIGKILL this process: no cleanup, no flush, like a power cut for the process."""
    os.kill(os.getpid(), signal.SIGKILL)


def crash_at(boundary: str, key: str = "*") -> None:
    """SIGKILL this process when an operation whose key matches ``key`` (a glob, such as
    ``"tool:2:*"``) reaches ``boundary``: ``intent_committed``, ``effect_done`` or
    ``result_committed``."""
    if boundary not in boundaries.BOUNDARIES:
        raise ValidationError(
            f"unknown boundary {boundary!r}; boundaries are {', '.join(boundaries.BOUNDARIES)}"
        )

    def hook(reached: str, operation_key: str) -> None:
        if reached == boundary and fnmatch.fnmatchcase(operation_key, key):
            kill_self()

    boundaries.install(hook)
