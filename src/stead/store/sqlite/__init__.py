"""The SQLite store: one file, zero servers, one live owner (see :mod:`.store`)."""

from __future__ import annotations

from ..migrate import SCHEMA_VERSION
from .store import SqliteStore
from .tx import SqliteTx

__all__ = ["SCHEMA_VERSION", "SqliteStore", "SqliteTx"]
