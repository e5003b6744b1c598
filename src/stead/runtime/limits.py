"""Limits checked inside the writing transaction (and, from :mod:`stead._checks`, the
identifier validation every entry point uses)."""

from __future__ import annotations

from dataclasses import dataclass

from .._checks import require_id, require_text
from ..errors import ValidationError, shown

__all__ = ["Limits", "require_id", "require_text"]


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds checked inside the writing transaction. ``None`` means unbounded."""

    max_pending_runs: int | None = None
    max_payload_bytes: int = 4 * 1024 * 1024
    max_operations_per_run: int | None = None
    #: Executions of a run interrupted in a row (its process died, or it lost the run) with
    #: nothing new committed in between, after which the run goes to needs_attention instead of
    #: executing once more: what kills the process outside any operation's intent does not loop.
    max_interruptions: int = 3

    def __post_init__(self) -> None:
        for name in (
            "max_pending_runs",
            "max_payload_bytes",
            "max_operations_per_run",
            "max_interruptions",
        ):
            value = getattr(self, name)
            if value is None and name not in ("max_payload_bytes", "max_interruptions"):
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValidationError(
                    f"Limits.{name} must be a positive integer, got {shown(value)}"
                )
