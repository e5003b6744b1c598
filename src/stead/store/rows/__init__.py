"""The journal's row operations in SQL both dialects speak, grouped by what they touch.

Every query lives here once; a :class:`Dialect` names what a dialect spells its own way, and a
backend's transaction class (``store.sqlite.tx.SqliteTx``) adds only its connection plumbing.
"""

from __future__ import annotations

from ._base import POSTGRES, SQLITE, Dialect, SqlBase
from .blobs import BlobRows
from .events import EventRows
from .inbox import InboxRows
from .interactions import InteractionRows
from .operations import OperationRows
from .runs import RunRows
from .signals import ScheduleRows, SignalRows

__all__ = ["POSTGRES", "SQLITE", "Dialect", "SqlTx"]


class SqlTx(
    RunRows,
    OperationRows,
    InteractionRows,
    EventRows,
    BlobRows,
    InboxRows,
    SignalRows,
    ScheduleRows,
    SqlBase,
):
    """Every row operation of the :class:`~stead.journal.protocol.Tx` protocol."""
