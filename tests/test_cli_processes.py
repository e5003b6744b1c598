"""The ``stead`` command against a runtime that owns the database in another process: the
command goes to the owner's inbox, the owner applies it, the run moves on — and a command
posted to an owner that dies before applying it is applied by the next owner, exactly once."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import stead

from ._processes import JsonLinesChild

OWNER = Path(__file__).with_name("_cli_owner.py")

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")


class Owner(JsonLinesChild):
    """A child process running ``tests/_cli_owner.py``; its JSON lines arrive on a queue."""

    def __init__(self, mode: str, db: Path, ledger: Path) -> None:
        super().__init__([sys.executable, str(OWNER), mode, str(db), str(ledger)])

    def expect(self, key: str, timeout: float = 15) -> dict[str, Any]:
        return super().expect(key, timeout)


@pytest.fixture
def owners() -> Iterator[list[Owner]]:
    started: list[Owner] = []
    yield started
    for owner in started:
        owner.stop()


@pytest.fixture
def paths(tmp_path: Path) -> tuple[Path, Path]:
    return tmp_path / "stead.db", tmp_path / "ledger.txt"


def stead_cli(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "stead", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "COLUMNS": "200"},
        check=False,
    )


def ok(*args: str) -> str:
    done = stead_cli(*args)
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done.stdout


def status(db: Path, run_id: str) -> stead.RunStatus:
    async def read() -> stead.RunStatus:
        async with stead.Client(stead.SqliteStore(db)) as client:
            return (await client.run_record(run_id)).status

    return asyncio.run(read())


def wait_status(db: Path, run_id: str, wanted: stead.RunStatus, within: float) -> float:
    """Seconds until the run has status ``wanted`` (fails past ``within``)."""
    start = time.monotonic()
    while (seen := status(db, run_id)) is not wanted:
        assert time.monotonic() - start < within, f"run is {seen}, not {wanted}, after {within}s"
        time.sleep(0.02)
    return time.monotonic() - start


def test_approve_reaches_a_live_owner_and_the_run_completes(
    owners: list[Owner], paths: tuple[Path, Path]
) -> None:
    db, ledger = paths
    owner = Owner("approval", db, ledger)
    owners.append(owner)
    ready = owner.expect("ready")
    queue_doc = json.loads(ok("interactions", "list", "--json", "--db", str(db)))
    (item,) = queue_doc["interactions"]
    assert item["interaction_id"] == ready["interaction_id"]
    assert (item["tool"], item["arguments"], item["status"]) == (
        "refund",
        {"order_id": "1", "amount": 10},
        "pending",
    )

    out = ok("approve", ready["interaction_id"], "--reviewer", "ana", "--db", str(db))
    # The owner hears of the approval at once (the inbox wakes it), not at a slow poll; timed
    # from the command's exit, so a slow machine's start of the command does not count.
    waited = wait_status(db, ready["run_id"], stead.RunStatus.COMPLETED, within=5)
    assert waited < 1.5, f"the run completed {waited:.2f}s after the approval was applied"
    assert "approved" in out
    assert owner.expect("done") == {"done": "completed"}
    assert ledger.read_text().splitlines() == [f"{ready['run_id']}/tool:1:c1"]
    shown = json.loads(ok("runs", "show", ready["run_id"], "--json", "--db", str(db)))
    assert shown["run"]["status"] == "completed"
    assert shown["interactions"][0]["response"]["reviewer"] == "ana"
    owner.process.wait(10)
    assert owner.process.returncode == 0


def test_resolve_reaches_a_live_owner(owners: list[Owner], paths: tuple[Path, Path]) -> None:
    db, ledger = paths
    owner = Owner("attention", db, ledger)
    owners.append(owner)
    ready = owner.expect("ready")
    run_id, key = ready["run_id"], ready["attention_key"]
    assert key == "tool:1:s1"
    shown = json.loads(ok("runs", "show", run_id, "--json", "--db", str(db)))
    assert shown["run"]["status"] == "needs_attention"
    commands = [step["command"] for step in shown["next"]]
    assert f"stead resolve {run_id} {key} --output '<json>' --db {db}" in commands

    ok("resolve", run_id, key, "--output", '"shipped by hand"', "--db", str(db))
    wait_status(db, run_id, stead.RunStatus.COMPLETED, within=5)
    assert owner.expect("done") == {"done": "completed"}
    shown = json.loads(ok("runs", "show", run_id, "--json", "--db", str(db)))
    ship = next(op for op in shown["operations"] if op["key"] == key)
    assert ship["result"]["output"] == "shipped by hand"
    assert ship["attempts"] == 1  # resolved, not run again


def test_cancel_reaches_a_live_owner(owners: list[Owner], paths: tuple[Path, Path]) -> None:
    db, ledger = paths
    owner = Owner("approval", db, ledger)
    owners.append(owner)
    ready = owner.expect("ready")
    out = ok("cancel", ready["run_id"], "--reason", "customer withdrew", "--db", str(db))
    assert "cancelled" in out
    assert status(db, ready["run_id"]) is stead.RunStatus.CANCELLED
    assert owner.expect("done") == {"done": "cancelled"}
    pending = json.loads(ok("interactions", "list", "--json", "--db", str(db)))
    assert pending["interactions"] == []
    assert not ledger.exists()


def test_follow_streams_live_events_and_ends_with_the_run(
    owners: list[Owner], paths: tuple[Path, Path]
) -> None:
    db, ledger = paths
    owner = Owner("approval", db, ledger)
    owners.append(owner)
    ready = owner.expect("ready")
    with subprocess.Popen(
        [sys.executable, "-m", "stead", "runs", "events", ready["run_id"], "--follow", "--json"],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "STEAD_DB": str(db)},
    ) as follow:
        seen: list[dict[str, Any]] = []
        try:
            assert follow.stdout is not None
            for raw in follow.stdout:  # the events so far, up to the wait
                seen.append(json.loads(raw))
                if seen[-1]["kind"] == "status" and seen[-1]["data"]["status"] == "waiting":
                    break
            assert [e["kind"] for e in seen][:2] == ["submitted", "status"]
            assert follow.poll() is None  # still following: the run goes on
            ok("approve", ready["interaction_id"], "--db", str(db))
            for raw in follow.stdout:  # written after the approval, by the owner
                seen.append(json.loads(raw))
            assert follow.wait(10) == 0
        finally:
            if follow.poll() is None:
                follow.kill()
    kinds = [e["kind"] for e in seen]
    assert "interaction_responded" in kinds and "tool_completed" in kinds
    assert seen[-1]["kind"] == "status" and seen[-1]["data"]["status"] == "completed"
    sequences = [e["sequence"] for e in seen]
    assert sequences == sorted(set(sequences))
    assert owner.expect("done") == {"done": "completed"}


def test_a_command_posted_to_an_owner_that_dies_is_applied_once_by_the_next(
    owners: list[Owner], paths: tuple[Path, Path]
) -> None:
    db, ledger = paths
    first = Owner("approval", db, ledger)
    owners.append(first)
    ready = first.expect("ready")
    os.kill(first.process.pid, signal.SIGSTOP)  # alive (it holds the lock) but not draining
    posted = stead_cli("approve", ready["interaction_id"], "--timeout", "1", "--db", str(db))
    assert posted.returncode == 1
    error = posted.stderr.strip()
    assert len(error.splitlines()) == 1 and "Traceback" not in error
    assert f"respond({ready['interaction_id']})" in error and "inbox" in error
    os.kill(first.process.pid, signal.SIGKILL)
    first.process.wait(10)
    assert status(db, ready["run_id"]) is stead.RunStatus.WAITING  # not applied yet

    second = Owner("resume", db, ledger)
    owners.append(second)
    assert second.expect("ready")["run_id"] == ready["run_id"]
    assert second.expect("done") == {"done": "completed"}

    every = json.loads(
        ok(
            "interactions",
            "list",
            "--status",
            "all",
            "--run",
            ready["run_id"],
            "--json",
            "--db",
            str(db),
        )
    )["interactions"]
    assert [(i["interaction_id"], i["status"]) for i in every] == [
        (ready["interaction_id"], "responded")
    ]
    events = json.loads(ok("runs", "events", ready["run_id"], "--json", "--db", str(db)))["events"]
    assert [e["kind"] for e in events].count("interaction_responded") == 1
    assert ledger.read_text().splitlines() == [f"{ready['run_id']}/tool:1:c1"]
    # the same decision again is a no-op; it changes nothing
    again = json.loads(ok("approve", ready["interaction_id"], "--json", "--db", str(db)))
    assert again["changed"] is False
