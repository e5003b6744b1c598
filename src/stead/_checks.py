"""Validation of identifiers and texts that every public entry point shares."""

from __future__ import annotations

import re

from ._json import check_text
from .errors import ValidationError, shown

__all__ = ["require_id", "require_text"]

_ID_MAX = 512
#: The control characters an identifier may not hold: C0, DEL and C1.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def require_id(name: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValidationError(f"{name} must be a non-blank string, got {shown(value)}")
    if len(value) > _ID_MAX:
        raise ValidationError(f"{name} is {len(value)} characters long; the limit is {_ID_MAX}")
    if _CONTROL.search(value) is not None:
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
