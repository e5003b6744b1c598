"""Limits checked inside the writing transaction, and identifier validation."""

from __future__ import annotations

from dataclasses import dataclass

from .._json import check_text
from ..errors import ValidationError, shown

__all__ = ["Limits", "require_id", "require_text"]

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
                raise ValidationError(
                    f"Limits.{name} must be a positive integer, got {shown(value)}"
                )


def require_id(name: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValidationError(f"{name} must be a non-blank string, got {shown(value)}")
    if len(value) > _ID_MAX:
        raise ValidationError(f"{name} is {len(value)} characters long; the limit is {_ID_MAX}")
    if any(ord(ch) < 32 or 0x7F <= ord(ch) < 0xA0 for ch in value):
        raise ValidationError(f"{name} {shown(value)} contains control characters")
    problem = check_text(value)
    if problem is not None:
        raise ValidationError(f"{name} {shown(value)} cannot be stored: its {problem}")
    return value


def require_text(name: str, value: object, *, blank: bool = False) -> str:
    """A string that can be stored as UTF-8 (``blank`` allows an empty or blank one)."""
    if not isinstance(value, str) or (not blank and not value.strip()):
        kind = "a string" if blank else "a non-blank string"
        raise ValidationError(f"{name} must be {kind}, got {shown(value)}")
    problem = check_text(value)
    if problem is not None:
        raise ValidationError(f"{name} cannot be stored: its {problem}")
    return value
