"""Shared helpers of the crash tests: launching the child, reading ledgers and the journal."""

from __future__ import annotations

import contextlib
import json
import signal
import sqlite3
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._journal import PgJournal, fresh_journals, journal_events, open_store

CHILD = Path(__file__).with_name("_child.py")
CHILD_TIMEOUT = 60.0


@dataclass
class World:
    """One journal (a SQLite file, or a PostgreSQL schema) plus its two ledgers (the outside
    world and the model's call log)."""

    db: Path | PgJournal
    ledger: Path
    models: Path

    @classmethod
    def create(cls, folder: Path, journal: PgJournal | None = None) -> World:
        db: Path | PgJournal = journal if journal is not None else folder / "stead.db"
        return cls(db, folder / "ledger.jsonl", folder / "models.jsonl")

    def argv(self, scenario: str, *options: str) -> list[str]:
        where = ["--schema", self.db.schema] if isinstance(self.db, PgJournal) else []
        return [
            sys.executable,
            str(CHILD),
            scenario,
            str(self.db),
            str(self.ledger),
            str(self.models),
            *where,
            *options,
        ]

    def store(self) -> Any:
        """A new store on this world's journal (not opened)."""
        return open_store(self.db)

    def effects(self) -> list[dict[str, Any]]:
        return read_jsonl(self.ledger)

    def model_turns(self) -> list[int]:
        return [line["turn"] for line in read_jsonl(self.models)]


@dataclass
class ChildResult:
    returncode: int
    stdout: str
    stderr: str
    outcome: dict[str, Any] | None = field(default=None)

    def describe(self) -> str:
        return (
            f"child exited {self.returncode}\n--- stdout ---\n{self.stdout}\n"
            f"--- stderr ---\n{self.stderr}"
        )


def parse_outcome(stdout: str) -> dict[str, Any] | None:
    for line in reversed(stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return None


def run_child(world: World, scenario: str, *options: str) -> ChildResult:
    """Run the child to its end (exit or death) and return what it printed."""
    proc = subprocess.run(
        world.argv(scenario, *options),
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT,
        check=False,
    )
    return ChildResult(proc.returncode, proc.stdout, proc.stderr, parse_outcome(proc.stdout))


def run_killed(world: World, scenario: str, *options: str) -> ChildResult:
    """Run a child that must die of SIGKILL (a crash point), and check that it did."""
    result = run_child(world, scenario, *options)
    assert result.returncode == -signal.SIGKILL, result.describe()
    assert result.outcome is None, result.describe()
    return result


def run_finished(world: World, scenario: str, *options: str) -> dict[str, Any]:
    """Run a child that must exit 0, and return its outcome line."""
    result = run_child(world, scenario, *options)
    assert result.returncode == 0, result.describe()
    assert result.outcome is not None, result.describe()
    return result.outcome


def start_child(world: World, scenario: str, *options: str) -> subprocess.Popen[str]:
    """Start the child and return once it printed ``ready`` (its store is open)."""
    proc = subprocess.Popen(
        world.argv(scenario, *options),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    watchdog = threading.Timer(CHILD_TIMEOUT, proc.kill)
    watchdog.start()
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
    finally:
        watchdog.cancel()
    if line.strip() != "ready":
        out, err = proc.communicate(timeout=CHILD_TIMEOUT)
        raise AssertionError(
            f"child did not get ready (exit {proc.returncode}): {line!r}{out}\n{err}"
        )
    return proc


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


@contextlib.contextmanager
def connect(db: Path) -> Iterator[sqlite3.Connection]:
    """A read-only connection to the journal (no runtime involved)."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        yield conn
    finally:
        conn.close()


def query(db: Path | PgJournal, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    """``sql`` (with ``?`` marks) on the journal, read-only."""
    if isinstance(db, PgJournal):
        return db.query(sql, *params)
    with connect(db) as conn:
        return conn.execute(sql, params).fetchall()


@dataclass(frozen=True)
class OpRow:
    run_id: str
    key: str
    kind: str
    status: str
    recovery: str
    attempts: int
    result: Any

    @property
    def operation_id(self) -> str:
        return f"{self.run_id}/{self.key}"


def operations(db: Path | PgJournal, run_id: str | None = None) -> dict[str, OpRow]:
    """Operations by operation id (``<run_id>/<key>``)."""
    sql = "SELECT run_id, key, kind, status, recovery, attempts, result FROM stead_operations"
    rows = query(db, sql + " WHERE run_id = ?", run_id) if run_id else query(db, sql)
    ops = [
        OpRow(r[0], r[1], r[2], r[3], r[4], r[5], json.loads(r[6]) if r[6] else None) for r in rows
    ]
    return {op.operation_id: op for op in ops}


def op_by_key(db: Path | PgJournal, run_id: str, key: str) -> OpRow:
    found = operations(db, run_id).get(f"{run_id}/{key}")
    assert found is not None, f"run {run_id} has no operation {key}"
    return found


def event_types(db: Path | PgJournal, run_id: str) -> list[tuple[str, dict[str, Any]]]:
    return [(e.kind, dict(e.data)) for e in journal_events(db, run_id)]


def run_row(db: Path | PgJournal, run_id: str) -> dict[str, Any]:
    rows = query(db, "SELECT status, attention_key, outcome FROM stead_runs WHERE id = ?", run_id)
    assert rows, f"no run {run_id}"
    status, blocked, outcome = rows[0]
    return {
        "status": status,
        "attention_key": blocked,
        "outcome": json.loads(outcome) if outcome else None,
    }


def check_store(db: Path | PgJournal) -> None:
    """What must hold in any journal at any moment: SQLite integrity, gap-free sequences,
    events in step with operations."""
    if not isinstance(db, PgJournal):
        with connect(db) as conn:
            integrity = conn.execute("PRAGMA integrity_check").fetchall()
            assert integrity == [("ok",)], integrity
    sequences = [e.sequence for e in journal_events(db)]
    assert sequences == list(range(1, len(sequences) + 1)), f"sequence gap: {sequences}"
    check_events_match_operations(db)


def check_events_match_operations(db: Path | PgJournal) -> None:
    """Each event commits with the state change it reports: an operation has one
    ``<kind>_started`` event per recorded attempt, and one ``<kind>_completed`` event if and
    only if it is completed."""
    started: Counter[str] = Counter()
    completed: Counter[str] = Counter()
    for event in journal_events(db):
        kind, _, what = event.kind.rpartition("_")
        if what in ("started", "completed") and kind in ("model", "tool"):
            key = event.data["key"]
            (started if what == "started" else completed)[f"{event.run_id}/{key}"] += 1
    ops = operations(db)
    for operation_id, op in ops.items():
        assert started[operation_id] == op.attempts, (
            f"{operation_id}: {started[operation_id]} started events, {op.attempts} attempts"
        )
        expected = 1 if op.status == "completed" else 0
        assert completed[operation_id] == expected, (
            f"{operation_id} is {op.status} with {completed[operation_id]} completed events"
        )
    orphans = (set(started) | set(completed)) - set(ops)
    assert not orphans, f"events of operations the journal does not have: {sorted(orphans)}"


def check_ledger_against_journal(db: Path | PgJournal, effects: list[dict[str, Any]]) -> None:
    """The outside world agrees with the journal.

    * every effect of an ``idempotent`` or ``manual`` tool belongs to an operation the journal
      knows, and ran at most once per recorded attempt (so twice only if the operation's
      ``attempts`` > 1): its intent is committed before it runs;
    * a ``safe`` tool's intent is held back to be written with its result (DESIGN §3: safe
      work may be done again), so a kill can land after its effect and before its intent
      commits: its effects are not bounded by its recorded attempts;
    * every completed tool operation that was not resolved by a person has its effect in the
      ledger.
    """
    ops = operations(db)
    counts = Counter(line["operation_id"] for line in effects)
    for operation_id, count in counts.items():
        op = ops.get(operation_id)
        attempts = [line["attempt"] for line in effects if line["operation_id"] == operation_id]
        if {line["recovery"] for line in effects if line["operation_id"] == operation_id} == {
            "safe"
        }:
            continue  # safe work may be done again after any crash; nothing to bound
        assert op is not None, f"effect of {operation_id} ran without an intent in the journal"
        assert count <= op.attempts, (
            f"{operation_id} ran {count} times ({attempts}) but the journal records "
            f"{op.attempts} attempt(s) [{op.recovery}, {op.status}]"
        )
        assert len(set(attempts)) == len(attempts), (
            f"{operation_id}: one attempt ran its effect twice: {attempts}"
        )
    for op in ops.values():
        if op.kind == "tool" and op.status == "completed" and not op.result.get("resolved"):
            assert counts[op.operation_id] >= 1, f"{op.operation_id} completed without its effect"


def worlds(backend: str, tmp_path: Path, prefix: str) -> Iterator[World]:
    """The body of a ``world`` fixture parametrized over ``sqlite`` and ``postgres`` (see
    ``tests._journal.fresh_journals``)."""
    for journal in fresh_journals(backend, tmp_path, prefix):
        yield World.create(tmp_path, journal if isinstance(journal, PgJournal) else None)
