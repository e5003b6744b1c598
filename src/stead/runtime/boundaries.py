"""Named points in the durable-operation protocol where tests can stop the process.

``stead.testing.crash_at`` installs a hook here; with no hook installed (always, in production)
each boundary costs one ``is None`` check.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["BOUNDARIES", "hook", "install"]

#: intent_committed — the operation's intent is committed; its work has not started.
#: effect_done — the work returned; its result is not yet written.
#: result_committed — the result is committed.
BOUNDARIES = ("intent_committed", "effect_done", "result_committed")

hook: Callable[[str, str], None] | None = None


def install(callback: Callable[[str, str], None] | None) -> None:
    """Call ``callback(boundary, operation_key)`` at every boundary (``None`` removes it)."""
    global hook
    hook = callback
