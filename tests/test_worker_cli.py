"""``stead worker APP``, run as a person runs it: a real process, signals, a second worker."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import stead

from ._journal import PgJournal

ROOT = Path(__file__).resolve().parent.parent
POSTGRES_URL = os.environ.get("STEAD_TEST_POSTGRES_URL")
needs_postgres = pytest.mark.skipif(not POSTGRES_URL, reason="STEAD_TEST_POSTGRES_URL is not set")
APP = "tests._drain_app:app"


@pytest.fixture
def pg() -> Iterator[PgJournal]:
    journal = PgJournal(str(POSTGRES_URL), f"wcli_{secrets.token_hex(6)}")
    try:
        yield journal
    finally:
        journal.drop()


def _env(ledger: Path, seconds: float) -> dict[str, str]:
    return {
        **os.environ,
        "STEAD_TEST_LEDGER": str(ledger),
        "STEAD_TEST_STEP_SECONDS": str(seconds),
        "PYTHONUNBUFFERED": "1",
    }


def _worker(db: list[str], ledger: Path, seconds: float, *more: str) -> subprocess.Popen[str]:
    """A ``stead worker`` process, returned once it said it is ready."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "stead", "worker", APP, *db, "--lease", "1", *more],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=_env(ledger, seconds),
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert "stead worker" in line and "ready" in line, (line, proc.stderr and proc.stderr.read())
    return proc


def _ledger(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def _wait_for(predicate: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError("the condition did not hold in time")


async def _client_submit(store: Any) -> str:
    async with stead.Client(store) as client:
        run = await client.submit("stepper", session_id="s", request_id="r", prompt="go")
        return run.id


@needs_postgres
async def test_sigterm_drains_the_worker_which_hands_its_run_to_the_next(
    pg: PgJournal, tmp_path: Path
) -> None:
    db = ["--db", pg.url, "--schema", pg.schema]
    ledger = tmp_path / "ledger.jsonl"
    first = _worker(db, ledger, 1.5)
    try:
        run_id = await _client_submit(pg.store())
        _wait_for(lambda: any(e["phase"] == "start" for e in _ledger(ledger)))
        first.send_signal(signal.SIGTERM)
        # The step in progress finishes and is committed; then the worker exits 0.
        assert first.wait(timeout=20) == 0, first.stderr and first.stderr.read()
    finally:
        first.kill()
        first.communicate()
    (run,) = pg.query("SELECT status, claimed_by, lease_until FROM stead_runs WHERE id = ?", run_id)
    assert run == ("running", None, None)  # handed back: no lease to wait for
    (step1,) = pg.query(
        "SELECT status FROM stead_operations WHERE run_id = ? AND key = ?", run_id, "tool:1:s1"
    )
    assert step1 == ("completed",)
    assert [e["key"] for e in _ledger(ledger)] == ["tool:1:s1", "tool:1:s1"]
    second = _worker(db, ledger, 0.01)
    try:
        async with stead.Client(pg.store()) as client:
            outcome = await client.result(run_id, timeout=20)
        assert outcome.output == "both steps done"
    finally:
        second.send_signal(signal.SIGTERM)
        assert second.wait(timeout=20) == 0
        second.communicate()
    entries = _ledger(ledger)
    # Each step ran once: the first by the drained worker, the second by the next one.
    assert [(e["key"], e["phase"]) for e in entries] == [
        ("tool:1:s1", "start"),
        ("tool:1:s1", "done"),
        ("tool:2:s2", "start"),
        ("tool:2:s2", "done"),
    ]
    assert entries[0]["pid"] == first.pid and entries[2]["pid"] == second.pid


@needs_postgres
async def test_a_second_interrupt_exits_at_once(pg: PgJournal, tmp_path: Path) -> None:
    db = ["--db", pg.url, "--schema", pg.schema]
    ledger = tmp_path / "ledger.jsonl"
    proc = _worker(db, ledger, 30)
    try:
        await _client_submit(pg.store())
        _wait_for(lambda: any(e["phase"] == "start" for e in _ledger(ledger)))
        proc.send_signal(signal.SIGINT)  # drains: would wait for the 30 s step
        time.sleep(0.3)
        assert proc.poll() is None
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=5) == 130
    finally:
        proc.kill()
        proc.communicate()


def test_a_worker_runs_a_sqlite_file_too(tmp_path: Path) -> None:
    db = ["--db", str(tmp_path / "stead.db")]
    ledger = tmp_path / "ledger.jsonl"
    import asyncio

    async def prepare() -> None:  # the file exists once a runtime created it
        async with await stead.App().open(stead.SqliteStore(tmp_path / "stead.db"), resume=False):
            pass

    asyncio.run(prepare())
    proc = _worker(db, ledger, 0.01)
    try:

        async def submit_and_wait() -> str:
            async with stead.Client(stead.SqliteStore(tmp_path / "stead.db")) as client:
                run = await client.submit(
                    "stepper", session_id="s", request_id="r", prompt="go", version="1"
                )
                return (await run.result(timeout=20)).output

        assert asyncio.run(submit_and_wait()) == "both steps done"
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
        proc.communicate()


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("tests._drain_app", "APP is module:attribute"),
        ("tests.no_such_module:app", "cannot import 'tests.no_such_module'"),
        ("tests._drain_app:nope", "has no 'nope'"),
        ("tests._drain_app:step", "not a stead.App"),
    ],
)
def test_a_wrong_app_is_one_clear_line(spec: str, message: str, tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "stead", "worker", spec, "--db", str(tmp_path / "x.db")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=30,
    )
    assert proc.returncode == 1
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


@needs_postgres
async def test_a_worker_whose_connections_are_cut_reopens_and_finishes_its_run(
    pg: PgJournal, tmp_path: Path
) -> None:
    """What a worker sees of a server restart: every connection it has ends at once."""
    db = ["--db", pg.url, "--schema", pg.schema]
    ledger = tmp_path / "ledger.jsonl"
    proc = _worker(db, ledger, 1.0)
    try:
        run_id = await _client_submit(pg.store())
        _wait_for(lambda: any(e["phase"] == "start" for e in _ledger(ledger)))
        import psycopg

        with psycopg.connect(pg.url, autocommit=True) as admin:
            cut = admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = %s",
                (f"stead:{pg.schema}",),
            ).fetchall()
        assert len(cut) >= 2  # the worker's writer and listener at least
        async with stead.Client(pg.store()) as client:
            outcome = await client.result(run_id, timeout=30)
        assert outcome.output == "both steps done"
        assert proc.poll() is None  # it never exited
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=20)
        _, stderr = proc.communicate()
    assert code == 0, stderr
    assert "reopening it" in stderr
