"""Canonical JSON: the only serialization the journal uses (never pickle).

Values are hashed and compared as sorted-key, compact JSON, so the same input always produces
the same digest regardless of dict order.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable
from typing import Any

from pydantic_core import PydanticSerializationError, to_jsonable_python

JSON = Any  # a value made of dict/list/str/int/float/bool/None


def _refuse(value: object) -> object:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _encoder(*, sort_keys: bool) -> Callable[[JSON], str]:
    """Compact JSON (no NaN, text kept as it is), the encoder built once: ``json.dumps``
    builds one per call, and ``JSONEncoder.encode`` builds its C encoder per call, a third
    of the time a journal value takes to encode. No check for reference cycles: every value
    encoded is JSON already (made by :func:`to_json` or by stead), and a cycle would still
    fail, by recursion."""
    make = json.encoder.c_make_encoder  # type: ignore[attr-defined]
    if make is None:  # pragma: no cover - an interpreter without the C accelerator
        return json.JSONEncoder(
            ensure_ascii=False, separators=(",", ":"), sort_keys=sort_keys, allow_nan=False
        ).encode
    encode = make(
        None, _refuse, json.encoder.encode_basestring, None, ":", ",", sort_keys, False, False
    )

    def encoded(value: JSON) -> str:
        return "".join(encode(value, 0))

    return encoded


#: Compact, key order kept (storage), and sorted keys (hashes and comparisons).
_dumps = _encoder(sort_keys=False)
_canonical = _encoder(sort_keys=True)


#: The JSON text of a string, exactly as both encoders write it (text kept as it is): for
#: canonical text built around a few strings without encoding a whole object.
text_json: Callable[[str], str] = json.encoder.encode_basestring


class NotJSONError(TypeError):
    """A value cannot be represented as JSON."""


def canonical(value: JSON) -> str:
    """Sorted-key compact JSON of an already-JSON value."""
    return _canonical(value)


def digest(value: JSON) -> str:
    """sha256 hex digest of the canonical JSON of ``value``."""
    return hashlib.sha256(canonical(value).encode()).hexdigest()


def digest_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def to_json(value: object) -> JSON:
    """Convert ``value`` (JSON values, pydantic models, dataclasses, dates, ...) to plain JSON.

    Raises :class:`NotJSONError` naming the offending type when it cannot be done; the check
    is strict (no NaN or infinity, string keys only, no lone surrogates) so what is stored
    reads back equal.
    """
    try:
        plain = to_jsonable_python(value)
    except RecursionError:
        raise NotJSONError("the value is nested too deeply (or refers to itself)") from None
    except (PydanticSerializationError, ValueError) as exc:
        raise NotJSONError(f"a value of type {type(value).__name__} is not JSON: {exc}") from None
    _check(plain)
    return plain


def check_text(text: str) -> str | None:
    """Why ``text`` cannot be stored as UTF-8 (a lone surrogate, say), or ``None`` if it can."""
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return (
            f"text holds {text[exc.start : exc.end]!r} at position {exc.start}, a lone "
            "surrogate that is not valid Unicode text"
        )
    return None


def storable_pairs(text: str) -> str:
    """``text`` with surrogate pairs joined into the characters they encode (lossless: a
    stream decoded piece by piece can split an emoji into two halves)."""
    if check_text(text) is None:
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def storable_text(text: str) -> str:
    """``text`` made storable for display: surrogate pairs joined, lone surrogates replaced by
    U+FFFD. For messages and progress text only; data is refused instead (:func:`to_json`)."""
    return _LONE_SURROGATE.sub("\ufffd", storable_pairs(text))


#: Deeper nesting than this is refused: it cannot be encoded or decoded without recursion errors.
MAX_DEPTH = 256
#: Integers beyond this many bits cannot be written as decimal text by Python's default limits.
_MAX_INT_BITS = 13_000


def check(value: JSON) -> None:
    """Raise :class:`NotJSONError` unless ``value`` is plain JSON that stores and reads back
    equal (the check :func:`to_json` ends with, for values that are plain already)."""
    _check(value)


def _text_problem(text: str) -> None:
    problem = check_text(text)
    if problem is not None:
        raise NotJSONError(problem)


def _check(value: JSON, depth: int = 0) -> None:
    # The exact types JSON values are made of first, and a dict's or a list's plain text and
    # scalars without a call each: most of a journal value is short ASCII text.
    kind = type(value)
    if kind is str:
        if not value.isascii():
            _text_problem(value)
        return
    if kind is dict or kind is list:
        if depth >= MAX_DEPTH:
            raise NotJSONError(f"the value is nested more than {MAX_DEPTH} levels deep")
        if kind is dict:
            for key, item in value.items():
                if type(key) is not str and not isinstance(key, str):
                    raise NotJSONError(
                        f"JSON object keys must be strings, not {type(key).__name__}"
                    )
                if not key.isascii():
                    _text_problem(key)
                inner = type(item)
                if inner is str:
                    if not item.isascii():
                        _text_problem(item)
                elif inner is int:
                    if item.bit_length() > _MAX_INT_BITS:
                        _check(item, depth + 1)  # refused there, with the reason
                elif item is not None and inner is not bool:
                    _check(item, depth + 1)
        else:
            for item in value:
                inner = type(item)
                if inner is str:
                    if not item.isascii():
                        _text_problem(item)
                elif inner is int:
                    if item.bit_length() > _MAX_INT_BITS:
                        _check(item, depth + 1)
                elif item is not None and inner is not bool:
                    _check(item, depth + 1)
        return
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, str):
        _text_problem(value)
        return
    if isinstance(value, int):
        if value.bit_length() > _MAX_INT_BITS:
            raise NotJSONError(f"an integer of {value.bit_length()} bits is too large for JSON")
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise NotJSONError(f"{value!r} is not a JSON number")
        return
    if depth >= MAX_DEPTH:
        raise NotJSONError(f"the value is nested more than {MAX_DEPTH} levels deep")
    if isinstance(value, list):
        for item in value:
            _check(item, depth + 1)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise NotJSONError(f"JSON object keys must be strings, not {type(key).__name__}")
            _text_problem(key)
            _check(item, depth + 1)
        return
    raise NotJSONError(f"a value of type {type(value).__name__} is not JSON")


def dumps(value: JSON) -> str:
    """Compact JSON for storage (key order kept; use :func:`canonical` to hash)."""
    return _dumps(value)


def loads(text: str) -> JSON:
    return json.loads(text)
