"""Limits checked inside the writing transaction, and identifier validation."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ValidationError

__all__ = ["Limits", "require_id"]

_ID_MAX = 512


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds checked inside the writing transaction. ``None`` means unbounded."""

    max_pending_runs: int | None = None
    max_payload_bytes: int = 4 * 1024 * 1024
    max_operations_per_run: int | None = None

    def __post_init__(self) -> None:
        for name in ("max_pending_runs", "max_payload_bytes", "max_operations_per_run"):
            value = getattr(self, name)
            if value is None and name != "max_payload_bytes":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValidationError(f"Limits.{name} must be a positive integer, got {value!r}")


def require_id(name: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValidationError(f"{name} must be a non-blank string, got {value!r}")
    if len(value) > _ID_MAX:
        raise ValidationError(f"{name} is {len(value)} characters long; the limit is {_ID_MAX}")
    if any(ord(ch) < 32 for ch in value):
        raise ValidationError(f"{name} {value!r} contains control characters")
    return value
