"""Every state change of a run, operation or interaction, written once against :class:`Tx`.

Each transition reads what the journal holds, validates against it, then writes — rows and the
event that reports them, in one transaction. A :class:`~stead.errors.SteadError` raised before
writing is the caller's answer and nothing of the transition is kept. The runtime applies these
in-process; a store with one owner applies the commands other processes post with the same
functions (:func:`apply`), so a decision means the same thing wherever it comes from.
"""

from __future__ import annotations

from ._shared import VersionOf
from .decisions import cancel, resolve, respond, retry, signal
from .execution import (
    Begun,
    apply_and_begin,
    begin,
    complete,
    emit,
    finish_operation,
    inserts_fresh,
    park,
    record_operation,
    request_interaction,
    restart_operation,
    start_child,
    start_operation,
    stop,
)
from .submission import apply, apply_posted, existing_submission, fork, submit

__all__ = [
    "Begun",
    "VersionOf",
    "apply",
    "apply_and_begin",
    "apply_posted",
    "begin",
    "cancel",
    "complete",
    "emit",
    "existing_submission",
    "finish_operation",
    "fork",
    "inserts_fresh",
    "park",
    "record_operation",
    "request_interaction",
    "resolve",
    "respond",
    "restart_operation",
    "retry",
    "signal",
    "start_child",
    "start_operation",
    "stop",
    "submit",
]
