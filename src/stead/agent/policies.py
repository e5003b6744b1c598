"""Per-agent policies: model retries with back-off, and budgets."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from .._ids import jitter
from ..errors import ValidationError, shown

__all__ = ["Budget", "RetryPolicy"]


def _positive(
    owner: str, name: str, value: object, *, integer: bool = False, optional: bool = False
) -> None:
    if value is None and optional:
        return
    kinds = (int,) if integer else (int, float)
    if (
        isinstance(value, bool)
        or not isinstance(value, kinds)
        or not 0 < value < math.inf  # NaN and infinity are refused too
    ):
        kind = "integer" if integer else "finite number"
        raise ValidationError(f"{owner}.{name} must be a positive {kind}, got {shown(value)}")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How a failing model call is retried: up to ``max_attempts`` calls in all, waiting an
    exponentially growing, jittered delay (seconds) between them, or the provider's
    ``Retry-After`` when it gives one (capped at ``max_delay``). Only retryable failures are
    retried: rate limits, overload, network errors (``ModelError.retryable``); others fail the
    run at once.

    Attempts are persisted before each call, so a crash uses one up, and the wait survives a
    restart (the run is ``retry_wait`` with ``next_attempt_at``)."""

    max_attempts: int = 3
    initial_delay: float = 1.0
    max_delay: float = 60.0

    def __post_init__(self) -> None:
        _positive("RetryPolicy", "max_attempts", self.max_attempts, integer=True)
        _positive("RetryPolicy", "initial_delay", self.initial_delay)
        _positive("RetryPolicy", "max_delay", self.max_delay)
        if self.max_delay < self.initial_delay:
            raise ValidationError(
                "RetryPolicy.max_delay must be at least RetryPolicy.initial_delay"
            )

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based): the provider's
        ``retry_after`` when it gave a usable one, never more than ``max_delay``."""
        if retry_after is not None and retry_after >= 0:  # NaN fails this test
            return min(float(retry_after), self.max_delay)
        ceiling = min(self.max_delay, self.initial_delay * 2 ** (attempt - 1))
        return jitter(ceiling / 2, ceiling)  # "equal jitter": never less than half the step


@dataclass(frozen=True, slots=True)
class Budget:
    """Limits on a run, enforced from committed totals before each model call (so they hold
    across restarts). On a breach the run fails (``on_breach="fail"``) or a person is asked
    whether to go on for one more turn (``on_breach="approve"``)."""

    max_turns: int | None = None
    max_tokens: int | None = None
    max_cost_usd: float | None = None
    on_breach: Literal["fail", "approve"] = "fail"

    def __post_init__(self) -> None:
        _positive("Budget", "max_turns", self.max_turns, integer=True, optional=True)
        _positive("Budget", "max_tokens", self.max_tokens, integer=True, optional=True)
        _positive("Budget", "max_cost_usd", self.max_cost_usd, optional=True)
        if self.on_breach not in ("fail", "approve"):
            raise ValidationError(
                f"Budget.on_breach must be 'fail' or 'approve', not {self.on_breach!r}"
            )
