"""A run rehearsed on the writer's connection when a runtime opens the store, and rolled back.

A new connection's backend starts with empty caches: the first statement to touch a table loads
its catalog entries and its indexes', a foreign key's first check plans its query, a function's
first call looks it up, and each statement is parsed and planned once. A runtime's first run
paid all of that between its submission and its end (in the server's log, 7.7 ms of the
server's time against 3.2 for the same run warm). So when a runtime opens the store its writer
runs, before anything else, the statements a run makes: the submission that claims and begins
it, a model call's intent with its context and its result with the run's usage, a ``safe``
tool written with its result, a progress event, the run's end — one transaction, then rolled
back. The statements stay prepared on the connection (the rollback goes through the wire:
psycopg, seeing a ``ROLLBACK``, would have the server forget them); nothing of the run is kept,
its notifications are never sent, and the event counter is where it was (the identity that
numbers runs skips one, as after any insert rolled back). The run's id,
session and agent are the rehearsal's own, so no other transaction waits for its locks but on
the counter (as for any write), for a few milliseconds.

A rehearsal that fails (the server went away, a deadlock with another worker's write) costs only
the warmth: the connection is rolled back, the failure logged at debug, and the store opens as
it would have without it.
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING, Any

from ..._ids import new_token
from ..._json import canonical, digest, dumps
from ...journal import transitions
from ...journal.commands import Submit
from ...journal.events import Custom
from ...journal.records import Claim, Writes
from .tx import PostgresTx

if TYPE_CHECKING:
    from .client import PostgresClient
    from .wire import Wire

__all__ = ["rehearse"]

log = logging.getLogger("stead.store.postgres")

#: The rehearsal's agent and version: no registry holds them, and nothing of them is kept.
AGENT = "stead-rehearsal"
VERSION = "0"
USAGE = {"requests": 1, "input_tokens": 1, "output_tokens": 1}


def rehearse(client: PostgresClient, conn: Any, wire: Wire, make_tx: Any, worker: str) -> bool:
    """Rehearse a run on ``conn`` (the writer's, with its ``wire``) and roll it back; the
    execution's writes go through ``make_tx(conn, False)``, the writer's transactions, under
    the claim taken for ``worker``. Returns whether it went through (blocking)."""
    run_id = f"rehearsal-{new_token()}"
    command = Submit(
        run_id=run_id,
        agent_id=AGENT,
        session_id=run_id,
        request_id="rehearsal",
        prompt="rehearsal",
        version=VERSION,
    )
    try:
        client.run_on(
            conn,
            wire,
            command,
            claim_for=worker,
            begin=lambda tx, run_id, fresh: transitions.begin(
                tx, run_id, lambda run: True, fresh=fresh
            ),
            rehearsal=functools.partial(_execute, make_tx(conn, False)),
        )
    except Exception as exc:  # nothing was kept, and the store works without the warmth
        log.debug("the rehearsal of a run on a new connection failed: %r", exc)
        return False
    return True


def _execute(tx: PostgresTx, submitted: PostgresTx, claim: Claim) -> None:
    """The execution's writes, as the writer's batches make them, after the submission
    (``submitted``, whose transaction this continues), then the rollback."""
    tx.pipeline = submitted.pipeline
    tx.assume(fences=[claim], next_sequence=submitted.sequence_written)
    run_id = claim.run_id
    context = canonical({"instructions": "rehearsal", "tools": []})
    model_input = {"model": "rehearsal", "context": digest(context), "turn": 1}
    transitions.start_operation(
        tx,
        run_id=run_id,
        key="model:1",
        position=0,
        kind="model",
        recovery="safe",
        input_hash=digest(model_input),
        input=model_input,
        writes=Writes(blobs=(context,)),
        input_text=canonical(model_input),
    )
    answer = {"message": {"role": "assistant", "content": "rehearsed"}}
    transitions.finish_operation(
        tx,
        run_id=run_id,
        key="model:1",
        kind="model",
        input=model_input,
        result=answer,
        writes=Writes(usage=USAGE),
        result_text=dumps(answer),
    )
    tool_input = {"name": "rehearsal", "arguments": {}}
    transitions.record_operation(
        tx,
        after=None,
        run_id=run_id,
        key="tool:1",
        position=1,
        kind="tool",
        recovery="safe",
        input_hash=digest(tool_input),
        input=tool_input,
        writes=None,
        input_text=canonical(tool_input),
        result="done",
        result_text=dumps("done"),
    )
    transitions.emit(tx, run_id, Custom(name="rehearsal", value=None))
    transitions.complete(tx, run_id, {"output": "rehearsed", "usage": USAGE}, Writes())
    tx.write_events()
    tx.write_sequence()
    tx.execute("ROLLBACK")
