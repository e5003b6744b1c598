"""The PostgreSQL store (the ``postgres`` extra): the journal in a schema of a PostgreSQL
database (see :mod:`.store`)."""

from __future__ import annotations

from .store import SCHEMA_VERSION, PostgresStore
from .tx import PostgresTx

__all__ = ["SCHEMA_VERSION", "PostgresStore", "PostgresTx"]
