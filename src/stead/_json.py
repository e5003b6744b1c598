"""Canonical JSON: the only serialization the journal uses (never pickle).

Values are hashed and compared as sorted-key, compact JSON, so the same input always produces
the same digest regardless of dict order.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

from pydantic_core import PydanticSerializationError, to_jsonable_python

JSON = Any  # a value made of dict/list/str/int/float/bool/None

_encoder = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), sort_keys=True, allow_nan=False
)


class NotJSONError(TypeError):
    """A value cannot be represented as JSON."""


def canonical(value: JSON) -> str:
    """Sorted-key compact JSON of an already-JSON value."""
    return _encoder.encode(value)


def digest(value: JSON) -> str:
    """sha256 hex digest of the canonical JSON of ``value``."""
    return hashlib.sha256(canonical(value).encode()).hexdigest()


def digest_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def to_json(value: object) -> JSON:
    """Convert ``value`` (JSON values, pydantic models, dataclasses, dates, ...) to plain JSON.

    Raises :class:`NotJSONError` naming the offending type when it cannot be done; the check
    is strict (no NaN, string keys only) so what is stored reads back equal.
    """
    try:
        plain = to_jsonable_python(value)
    except PydanticSerializationError as exc:
        raise NotJSONError(f"a value of type {type(value).__name__} is not JSON: {exc}") from None
    _check(plain)
    return plain


def _check(value: JSON) -> None:
    if value is None or isinstance(value, bool | int | str):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise NotJSONError(f"{value!r} is not a JSON number")
        return
    if isinstance(value, list):
        for item in value:
            _check(item)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise NotJSONError(f"JSON object keys must be strings, not {type(key).__name__}")
            _check(item)
        return
    raise NotJSONError(f"a value of type {type(value).__name__} is not JSON")


def dumps(value: JSON) -> str:
    """Compact JSON for storage (key order kept; use :func:`canonical` to hash)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def loads(text: str) -> JSON:
    return json.loads(text)
