"""stead.Client under hostile conditions: many clients at once, an owner SIGKILLed while commands
are posted, clients applying in place while a runtime opens, odd ids and values through the
Client and the CLI, followers of a busy stream, waits that never end, and files that are not
(or no longer) a stead database it can write.

Every test is bounded in time.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import stead
import stead.client
from stead.testing import FunctionModel

from ._hostile_owner import build_app
from ._processes import JsonLinesChild

HERE = Path(__file__).parent
CHILD = HERE / "_hostile_owner.py"
JOURNAL_V1 = HERE / "fixtures" / "journal-v1.sqlite"
READ = "SELECT count(*) FROM stead_runs"

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals and flock")


# -- processes ----------------------------------------------------------------------------------


class Owner(JsonLinesChild):
    """A runtime owning ``db`` in a child process (``tests/_hostile_owner.py owner``)."""

    def __init__(self, db: str | Path) -> None:
        super().__init__([sys.executable, str(CHILD), "owner", str(db)], stdin=True)

    def close(self) -> dict[str, Any]:
        """End it cleanly (stdin closes): its runtime's health as it closed."""
        assert self.process.stdin is not None
        self.process.stdin.close()
        health = self.expect("closed")["closed"]
        assert self.process.wait(10) == 0
        return health


@pytest.fixture
def owners() -> Iterator[list[Owner]]:
    started: list[Owner] = []
    yield started
    for owner in started:
        owner.stop()


def start_owner(db: str | Path, owners: list[Owner]) -> Owner:
    owner = Owner(db)
    owners.append(owner)
    return owner


def command_process(
    mode: str, db: str | Path, commands: list[list[Any]], timeout: float, *more: object
) -> subprocess.Popen[str]:
    """``clients`` (all at once) or ``hammer`` (lanes, over and over) in a child process."""
    return subprocess.Popen(
        [sys.executable, str(CHILD), mode, str(db), json.dumps(commands), str(timeout)]
        + [str(m) for m in more],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def results_of(process: subprocess.Popen[str]) -> list[dict[str, Any]]:
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    return json.loads(out.splitlines()[-1])["results"]


def stead_cli(*args: str | bytes, db: str | Path, timeout: float = 30) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "stead", *args, "--db", str(db)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "COLUMNS": "200"},
    )


def finished(cli: subprocess.Popen[bytes]) -> tuple[int, str, str]:
    out, err = cli.communicate(timeout=30)
    return cli.returncode, out.decode(errors="replace"), err.decode(errors="replace")


def assert_clean_failure(code: int, err: str, what: object) -> None:
    """Exit 1 with one ``Error:`` line, or 2 (usage); never a traceback."""
    assert code in (1, 2), (what, code, err)
    assert "Traceback" not in err, (what, err)
    assert err.strip(), what
    if code == 1:
        assert len(err.strip().splitlines()) == 1 and err.startswith("Error: "), (what, err)


# -- the journal, read behind stead's back -------------------------------------------------------


def journal(
    db: str | Path, sql: str, args: tuple[Any, ...] | dict[str, Any] = ()
) -> list[tuple[Any, ...]]:
    uri = f"{Path(db).resolve().as_uri()}?mode=ro"
    with contextlib.closing(sqlite3.connect(uri, uri=True)) as conn:
        return conn.execute(sql, args).fetchall()


def inbox(db: str | Path) -> list[tuple[int, dict[str, Any], str, Any]]:
    rows = journal(db, "SELECT id, command, status, answer FROM stead_inbox ORDER BY id")
    return [(i, json.loads(c), s, json.loads(a) if a else None) for i, c, s, a in rows]


#: (sequence, kind) of every event of a run, in SQL: the event rows, and the events of the first
#: start and the result of an operation, which its row announces (``started_seq``,
#: ``completed_seq``).
EVERY_EVENT = (
    "SELECT sequence, kind FROM stead_events WHERE run_id = :run "
    "UNION ALL SELECT started_seq, kind || '_started' FROM stead_operations "
    "WHERE run_id = :run AND started_seq IS NOT NULL "
    "UNION ALL SELECT completed_seq, kind || '_completed' FROM stead_operations "
    "WHERE run_id = :run AND completed_seq IS NOT NULL ORDER BY 1"
)


def every_event(db: str | Path, run_id: str) -> list[tuple[int, str]]:
    return [(s, k) for s, k in journal(db, EVERY_EVENT, {"run": run_id})]


def kinds(db: str | Path, run_id: str) -> list[str]:
    return [kind for _, kind in every_event(db, run_id)]


def statuses(db: str | Path, run_id: str) -> list[str]:
    rows = journal(
        db,
        "SELECT data FROM stead_events WHERE run_id = ? AND kind = 'status' ORDER BY sequence",
        (run_id,),
    )
    return [json.loads(data)["status"] for (data,) in rows]


def status_elsewhere(db: str | Path, run_id: str) -> str:
    """The run's status as another process reads it."""
    code = (
        "import sqlite3, sys; print(sqlite3.connect(sys.argv[1]).execute("
        "'SELECT status FROM stead_runs WHERE id = ?', (sys.argv[2],)).fetchone()[0])"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(db), run_id], capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- runs to act on ---------------------------------------------------------------------------


async def waiting_runs(db: str | Path, n: int, prefix: str = "r") -> dict[str, str]:
    """``n`` runs of the gated agent (``r0``, ``r1``, ...), each waiting for an approval, in a
    database nobody owns afterwards: run id -> interaction id."""
    async with await build_app().open(stead.SqliteStore(db)) as runtime:
        for i in range(n):
            await runtime.submit(
                "gated",
                session_id=f"{prefix}{i}",
                request_id="q",
                prompt="go",
                run_id=f"{prefix}{i}",
            )
        async with asyncio.timeout(20):
            while len(pending := await runtime.list_interactions(limit=1000)) < n:
                await asyncio.sleep(0.01)
    return {i.run_id: i.interaction_id for i in pending}


async def tried(action: Awaitable[Any]) -> str:
    """``ok`` or the class name of what ``action`` raised."""
    try:
        await action
    except (stead.SteadError, TimeoutError) as exc:
        return type(exc).__name__
    return "ok"


def flock_held(db: str | Path) -> bool:
    """Whether some process holds the owner's ``flock`` of ``db`` (on ``<db>-lock``; Linux:
    /proc/locks), without taking it."""
    lock = f"{db}-lock"
    if not os.path.exists(lock):
        return False
    inode = os.stat(lock).st_ino
    with open("/proc/locks", encoding="ascii") as locks:
        return any(
            "FLOCK" in line and line.split()[5].endswith(f":{inode}") for line in locks if line
        )


# -- many clients against one live owner --------------------------------------------------------


async def test_many_clients_at_once_each_command_is_answered_exactly_once(
    db: str, owners: list[Owner]
) -> None:
    ints = await waiting_runs(db, 19)
    i = [ints[f"r{k}"] for k in range(19)]
    owner = start_owner(db, owners)
    await asyncio.to_thread(owner.expect, "ready")

    # Three processes: approve vs deny of the same interactions (exactly one may win), the same
    # approval twice (both fine), three cancels of one run, a retry of a waiting run (refused),
    # an interaction that does not exist.
    a = [["approve", i[k], "A"] for k in range(5)]
    a += [["approve", i[5], "same"], ["approve", i[6], "same"], ["cancel", "r7"], ["retry", "r8"]]
    b = [["deny", i[k], "B says no"] for k in range(5)] + [["cancel", "r7"]]
    c = [["approve", i[5], "same"], ["approve", i[6], "same"], ["cancel", "r7"]]
    c += [["approve", "int_missing"]]
    processes = [command_process("clients", db, cmds, timeout=15) for cmds in (a, b, c)]

    # ... and 20 asyncio tasks here, half on one shared client, half on clients of their own.
    async with stead.Client(stead.SqliteStore(db), command_timeout=15) as shared:

        async def alone(act: Callable[[stead.Client], Awaitable[Any]]) -> str:
            async with stead.Client(stead.SqliteStore(db), command_timeout=15) as client:
                return await tried(act(client))

        here = await asyncio.gather(
            *(tried(shared.cancel(f"r{k}")) for k in range(9, 14)),
            *(alone(lambda cl, k=k: cl.cancel(f"r{k}", "twice")) for k in range(9, 14)),
            *(tried(shared.retry(f"r{k}")) for k in range(9, 14)),
            *(alone(lambda cl, k=k: cl.respond(i[k], stead.Approve())) for k in range(14, 19)),
        )
        ra, rb, rc = [await asyncio.to_thread(results_of, p) for p in processes]

        # every command answered, none left waiting
        every = [r.get("error", "ok") for r in ra + rb + rc] + list(here)
        assert "TimeoutError" not in every, every
        for k in range(5):  # approve vs deny: exactly one wins, the other is a conflict
            pair = {ra[k].get("error", "ok"), rb[k].get("error", "ok")}
            assert pair == {"ok", "ConflictError"}, (k, ra[k], rb[k])
            loser = ra[k] if "error" in ra[k] else rb[k]
            assert "answered differently" in loser["message"]
            recorded = (await shared.interaction(i[k])).response
            assert recorded is not None
            assert recorded["kind"] == ("approve" if "error" in rb[k] else "deny")
        assert [r.get("error", "ok") for r in ra[5:8] + rc[:3] + rb[5:]] == ["ok"] * 7
        assert ra[8]["error"] == "ConflictError"
        assert "only failed and needs_attention" in ra[8]["message"]
        assert rc[3]["error"] == "NotFoundError"
        assert list(here) == ["ok"] * 10 + ["ConflictError"] * 5 + ["ok"] * 5

        # the owner goes on running runs: an approved one completes
        assert (await shared.get_run("r14").result(timeout=15)).output == "done"

    rows = inbox(db)
    assert len(rows) == len(a) + len(b) + len(c) + 20  # each posted once, answered once
    assert Counter(status for _, _, status, _ in rows) == {"applied": 27, "failed": 12}
    for run in [f"r{k}" for k in (*range(7), *range(14, 19))]:
        assert kinds(db, run).count("interaction_responded") == 1, run
    for run in ["r7", *(f"r{k}" for k in range(9, 14))]:
        assert statuses(db, run).count("cancelled") == 1, run
    assert statuses(db, "r8")[-1] == "waiting"
    assert (await asyncio.to_thread(owner.close))["ok"]


# -- the owner SIGKILLed while clients post -----------------------------------------------------


async def test_owner_sigkilled_while_clients_post_commands_each_is_applied_once(
    db: str, owners: list[Owner]
) -> None:
    seed = int(os.environ.get("STEAD_HOSTILE_SEED") or random.randrange(2**32))
    print(f"seed {seed}: STEAD_HOSTILE_SEED={seed} replays these kills")
    rng = random.Random(seed)
    ints = await waiting_runs(db, 24)
    targets = sorted(ints)
    rng.shuffle(targets)
    verbs = {run: rng.choice(["cancel", "deny"]) for run in targets}

    async def issue(verb: str, run: str) -> str:
        async with stead.Client(stead.SqliteStore(db), command_timeout=1.0) as client:
            if verb == "cancel":
                return await tried(client.cancel(run, "operator"))
            return await tried(client.respond(ints[run], stead.Deny(reason="no")))

    again: list[tuple[str, str]] = []  # commands whose caller timed out: it sends them again
    outcomes: Counter[str] = Counter()
    for round_ in range(4):
        owner = start_owner(db, owners)
        await asyncio.to_thread(owner.expect, "ready")
        commands = again + [(verbs[run], run) for run in targets[round_ * 6 : round_ * 6 + 6]]
        tasks = [asyncio.create_task(issue(verb, run)) for verb, run in commands]
        await asyncio.sleep(rng.uniform(0.0, 0.5))
        await asyncio.to_thread(owner.kill)
        again = []
        for command, task in zip(commands, tasks, strict=True):
            result = await task
            outcomes[result] += 1
            assert result in ("ok", "TimeoutError"), (command, result)
            if result == "TimeoutError":
                again.append(command)
    print(f"outcomes {dict(outcomes)}, sent again at the end: {again}")

    # The next owner applies what its predecessors left in the inbox when it opens.
    async with await build_app().open(stead.SqliteStore(db)) as runtime:
        for verb, run in again:
            if verb == "cancel":
                await runtime.cancel(run, "operator")
            else:
                await runtime.respond(ints[run], stead.Deny(reason="no"))
        assert runtime.health()["ok"]

    rows = inbox(db)
    assert rows, "no command went through an owner's inbox: the kills came too early"
    assert {status for _, _, status, _ in rows} == {"applied"}, rows
    for run, verb in verbs.items():
        if verb == "cancel":
            assert statuses(db, run).count("cancelled") == 1, (run, statuses(db, run))
            assert "interaction_responded" not in kinds(db, run)
            first_applications = [
                row for row in rows if row[1].get("run_id") == run and row[3] == {"value": True}
            ]
            assert len(first_applications) <= 1, first_applications
        else:
            assert kinds(db, run).count("interaction_responded") == 1, (run, kinds(db, run))
            assert "cancelled" not in statuses(db, run)


# -- clients applying in place while a runtime opens --------------------------------------------


async def test_clients_applying_in_place_race_a_runtime_that_opens(db: str) -> None:
    seed = int(os.environ.get("STEAD_HOSTILE_SEED") or random.randrange(2**32))
    print(f"seed {seed}: STEAD_HOSTILE_SEED={seed} replays this timing")
    rng = random.Random(seed)
    ints = await waiting_runs(db, 12)
    runs = sorted(ints)
    # Two lanes of one process apply cancels in place, over and over (a repeat is a no-op), for
    # a second; a runtime opens at a random moment in it. (One process: two client processes
    # trip the lock defect shown by test_a_client_keeps_its_sqlite_locks... below.)
    hammer = command_process("hammer", db, [["cancel", r, "race"] for r in runs], 5, 1.0, 2)
    try:
        assert hammer.stdout is not None
        line = await asyncio.to_thread(hammer.stdout.readline)
        assert json.loads(line) == {"started": True}, line
        await asyncio.sleep(rng.uniform(0.0, 0.6))
        start = time.monotonic()
        runtime = await build_app().open(stead.SqliteStore(db))
        opened = time.monotonic() - start
        try:
            (results,) = [await asyncio.to_thread(results_of, hammer)]
            assert runtime.health()["ok"]
        finally:
            await runtime.close()
    finally:
        if hammer.poll() is None:
            hammer.kill()
            hammer.communicate()
    assert opened < 1.0, f"the runtime waited {opened:.2f}s for clients to let go of the file"
    assert {r.get("error", "ok") for r in results} == {"ok"}, results
    assert {r["command"][1] for r in results} == set(runs)
    rows = inbox(db)
    print(f"{len(results)} commands, {len(rows)} by the runtime's inbox, opened in {opened:.2f}s")
    assert {status for _, _, status, _ in rows} <= {"applied"}, rows
    for run in runs:
        assert statuses(db, run).count("cancelled") == 1, (run, statuses(db, run))
        assert sum(1 for row in rows if row[1]["run_id"] == run and row[3]["value"]) <= 1


async def test_two_clients_applying_at_once_with_no_owner_both_succeed(db: str) -> None:
    await waiting_runs(db, 2)
    blocker = sqlite3.connect(db, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")  # the first client will hold the owner's lock meanwhile
    try:
        async with (
            stead.Client(stead.SqliteStore(db), command_timeout=1.0) as first,
            stead.Client(stead.SqliteStore(db), command_timeout=1.0) as second,
        ):
            one = asyncio.create_task(first.cancel("r0"))
            async with asyncio.timeout(5):
                while not flock_held(db):
                    await asyncio.sleep(0.01)
            two = asyncio.create_task(second.cancel("r1"))
            await asyncio.sleep(0.2)
            blocker.execute("ROLLBACK")
            results = await asyncio.gather(one, two, return_exceptions=True)
    finally:
        blocker.close()
    assert list(results) == [None, None], results


async def test_a_client_keeps_its_sqlite_locks_so_no_process_deletes_the_wal_under_it(
    db: str, owners: list[Owner]
) -> None:
    ints = await waiting_runs(db, 3)
    client = stead.Client(stead.SqliteStore(db), command_timeout=5)
    try:
        await client.cancel("r0")  # applied here: no runtime owns the file
        # Another process looks at the file and goes: `sqlite3 stead.db .tables`, say.
        subprocess.run(
            [sys.executable, "-c", f"import sqlite3; sqlite3.connect({db!r}).execute({READ!r})"],
            check=True,
        )
        await client.cancel("r1")  # acknowledged
        code, out, err = finished(stead_cli("runs", "show", "r1", "--json", db=db))
        assert code == 0, err
        seen_elsewhere = json.loads(out)["run"]["status"]
        # A runtime opens in another process and completes r2 (approved through the CLI).
        owner = start_owner(db, owners)
        await asyncio.to_thread(owner.expect, "ready")
        code, _, err = finished(stead_cli("approve", ints["r2"], db=db))
        assert code == 0, err
        # (read from other processes: in this one, SQLite would share the client's stale view)
        async with asyncio.timeout(10):
            while await asyncio.to_thread(status_elsewhere, db, "r2") != "completed":
                await asyncio.sleep(0.05)
        assert (await asyncio.to_thread(owner.close))["ok"]
    finally:
        await client.close()
    final = dict(journal(db, "SELECT id, status FROM stead_runs"))
    # Seen here: r1's acknowledged cancel invisible to others ('waiting'), and once the client
    # closes, r2 — completed by the owner, its tool run — back to 'waiting'.
    assert (seen_elsewhere, final["r1"], final["r2"]) == ("cancelled", "cancelled", "completed")


# -- odd ids and values -------------------------------------------------------------------------


def _deep(levels: int) -> Any:
    value: Any = 0
    for _ in range(levels):
        value = [value]
    return value


async def test_odd_values_through_the_client_are_refused_and_the_owner_stays_healthy(
    db: str, owners: list[Owner]
) -> None:
    ints = await waiting_runs(db, 4)
    owner = start_owner(db, owners)
    await asyncio.to_thread(owner.expect, "ready")
    store = stead.SqliteStore(db)
    for bad in (0, -1, True, float("nan"), float("inf"), "5"):
        with pytest.raises(stead.ValidationError):
            stead.Client(store, command_timeout=bad)  # type: ignore[arg-type]
    for make in (
        lambda: stead.Approve(reviewer="\ud800"),
        lambda: stead.Deny(reason="\udfff"),
        lambda: stead.Deny(reason="   "),
        lambda: stead.Answer(value=10**5000),
        lambda: stead.Answer(value=float("nan")),
    ):
        with pytest.raises(stead.ValidationError):
            make()

    async with stead.Client(store, command_timeout=10) as client:
        refused: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
            ("lone surrogate run id", lambda: client.cancel("r\ud800")),
            ("NUL in run id", lambda: client.cancel("r0\x00")),
            ("C1 control in run id", lambda: client.retry("r0\x85")),
            ("100 KB run id", lambda: client.cancel("r" * 100_000)),
            ("not a string", lambda: client.cancel(12345)),  # type: ignore[arg-type]
            ("blank", lambda: client.run_record(" ")),
            ("lone surrogate reason", lambda: client.cancel("r0", "\udc80")),
            ("escape in interaction id", lambda: client.respond("int\x1b[2J", stead.Approve())),
            ("not a response", lambda: client.respond(ints["r0"], "approve")),  # type: ignore[arg-type]
            ("huge int output", lambda: client.resolve("r0", "tool:1:c1", 10**5000)),
            ("NaN output", lambda: client.resolve("r0", "tool:1:c1", float("nan"))),
            ("surrogate key", lambda: client.resolve("r0", "tool:1:c1", {"\ud800": 1})),
            ("not JSON", lambda: client.resolve("r0", "tool:1:c1", object())),
            ("100000 levels deep", lambda: client.resolve("r0", "tool:1:c1", _deep(100_000))),
            (
                "surrogate prompt",
                lambda: client.submit("gated", session_id="s", request_id="q", prompt="\ud83d"),
            ),
            ("fork before DEL", lambda: client.fork("r0", before="\x7f")),
            ("cursor of fullwidth digits", lambda: client.list_runs(after="\uff11\uff12\uff13")),
            ("cursor of 19 digits", lambda: client.list_runs(after="9" * 19)),
            ("huge limit", lambda: client.list_runs(limit=10**100)),
            ("unknown status", lambda: client.list_runs(status="\ud800")),
            ("events after 2**63", lambda: anext(client.events("r0", after=2**63))),
            ("events after -1", lambda: anext(client.events("r0", after=-1))),
            ("result timeout NaN", lambda: client.result("r0", timeout=float("nan"))),
            ("result timeout -1", lambda: client.result("r0", timeout=-1)),
            ("costs of a surrogate", lambda: client.costs(["\ud800"])),
            ("interactions of a 513-char run", lambda: client.list_interactions(run_id="r" * 513)),
        ]
        for what, act in refused:
            with pytest.raises(stead.ValidationError):
                async with asyncio.timeout(5):
                    await act()
            assert inbox(db) == [], what  # refused here: nothing reached the owner
        with pytest.raises(stead.LimitError):
            await client.submit("gated", session_id="s", request_id="q", prompt="p" * 5_000_000)

        # Odd but valid values travel through the owner's inbox and come back intact.
        reason = "\x00\x1b[2J\u202e" + "é" * 50_000 + "\U0001f600"
        await client.cancel("r1", reason)
        assert (await client.run_record("r1")).error["reason"] == reason
        note = "\x07" + "n" * 100_000
        await client.respond(ints["r2"], stead.Approve(reviewer="\t", note=note))
        assert (await client.interaction(ints["r2"])).response["note"] == note
        with pytest.raises((stead.NotFoundError, stead.ConflictError)):
            await client.resolve("r3", "tool:1:c1", {"n": 10**3000, "s": "\x00" * 1000})
        odd_id = "run \U0001f600 ✓ \u00a0 'quoted' \"double\" ;rm -rf"
        handle = await client.submit(
            "gated", session_id="odd", request_id="q", prompt="p\x01" * 50_000, run_id=odd_id
        )
        assert handle.id == odd_id
        assert (await client.run_record(odd_id)).input == {"prompt": "p\x01" * 50_000}
        answered = [status for _, _, status, _ in inbox(db)]
        assert answered == ["applied", "applied", "failed", "applied"]
    assert (await asyncio.to_thread(owner.close))["ok"]


ODD_CLI: list[tuple[str | bytes, ...]] = [
    ("cancel", b"\xff\xfe"),  # not UTF-8
    ("cancel", "run\x01"),
    ("cancel", "x" * 100_000),
    ("retry", "r0\u0085"),
    ("approve", "int\x1b]0;owned\x07"),
    ("approve", "INT0", "--reviewer", b"\xed\xa0\x80"),  # an encoded lone surrogate
    ("deny", "INT0", "--reason", " "),
    ("answer", "INT0", '"\\ud800"'),
    ("answer", "INT0", "1e999"),
    ("resolve", "r0", "tool:1:c1", "--output", "9" * 5000),
    ("resolve", "r0", "tool:1:c1", "--output", "1e999"),
    ("resolve", "r0", "tool:1:c1", "--output", "NaN"),
    ("resolve", "r0", "tool:1:c1", "--output", '{"\\udc80": 1}'),
    ("resolve", "r0", "tool:1:c1", "--output", "[" * 300 + "]" * 300),
    ("fork", "r0", "--before", "\x7f"),
    ("runs", "events", "r0", "--after", "9" * 30),
    ("runs", "list", "--after", "-1"),
    ("runs", "show", b"\xc0\xaf"),
    ("interactions", "list", "--run", "\t"),
    ("cancel", "r0", "--timeout", "nan"),
    ("cancel", "r0", "--timeout", "1e308"),
]


def test_odd_values_through_the_cli_fail_cleanly_and_the_owner_stays_healthy(
    db: str, owners: list[Owner]
) -> None:
    ints = asyncio.run(waiting_runs(db, 2))
    owner = start_owner(db, owners)
    owner.expect("ready")
    cases = [tuple(ints["r0"] if arg == "INT0" else arg for arg in case) for case in ODD_CLI]
    running = [stead_cli(*case, db=db) for case in cases]
    for case, cli in zip(cases, running, strict=True):
        code, _, err = finished(cli)
        assert_clean_failure(code, err, case[:3])
        assert "\x1b" not in err and "\x07" not in err, err  # nothing reaches the terminal raw
    assert inbox(db) == []  # refused before anything was posted
    code, out, err = finished(stead_cli("cancel", "r1", "--reason", "fine", "--json", db=db))
    assert code == 0, err
    assert json.loads(out)["run"]["status"] == "cancelled"
    assert owner.close()["ok"]


@pytest.mark.parametrize("verb", ["resolve", "answer"])
def test_cli_json_nested_too_deep_is_a_usage_error(db: str, verb: str) -> None:
    asyncio.run(waiting_runs(db, 1))
    deep = "[" * 5000 + "]" * 5000
    args = (
        ("resolve", "r0", "tool:1:c1", "--output", deep)
        if verb == "resolve"
        else ("answer", "int_x", deep)
    )
    code, _, err = finished(stead_cli(*args, db=db))
    assert_clean_failure(code, err, verb)


@pytest.mark.parametrize(
    "row",
    [
        {"name": "cancel", "run_id": ["r0"], "reason": None},
        {"name": "respond", "interaction_id": "INT0", "response": "approve"},
    ],
    ids=["list-run-id", "string-response"],
)
async def test_a_malformed_inbox_row_is_answered_failed_and_the_owner_goes_on(
    db: str, row: dict[str, Any]
) -> None:
    ints = await waiting_runs(db, 2)
    command = json.dumps(row).replace("INT0", ints["r0"])
    async with await build_app().open(stead.SqliteStore(db)) as runtime:
        # Another process — an older or newer stead, or a hand-written script — posts a row.
        with contextlib.closing(sqlite3.connect(db, isolation_level=None)) as conn:
            conn.execute(
                "INSERT INTO stead_inbox (command, status, posted_at) VALUES (?, 'posted', ?)",
                (command, "2025-01-01T00:00:00+00:00"),
            )
        async with asyncio.timeout(3):
            while inbox(db)[0][2] == "posted":
                await asyncio.sleep(0.02)
        assert inbox(db)[0][2] == "failed"
        assert runtime.health()["ok"]
        async with stead.Client(stead.SqliteStore(db), command_timeout=2) as client:
            await client.cancel("r1")
    async with await build_app().open(stead.SqliteStore(db)) as runtime:
        assert runtime.health()["ok"]


# -- followers of a busy stream -----------------------------------------------------------------


async def _collect(stream: AsyncIterator[stead.Event]) -> list[stead.Event]:
    return [event async for event in stream]


async def test_followers_see_every_event_of_a_busy_stream_once_in_order(
    db: str, owners: list[Owner], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stead.client, "EVENT_PAGE", 40)  # cross many page boundaries here
    async with await build_app().open(stead.SqliteStore(db)):
        pass  # creates the database
    owner = start_owner(db, owners)
    await asyncio.to_thread(owner.expect, "ready")
    async with stead.Client(stead.SqliteStore(db), command_timeout=10) as client:
        run = await client.submit("streamer", session_id="s", request_id="r", prompt="go")
        cli = stead_cli("runs", "events", run.id, "--follow", "--json", db=db)
        seen: list[stead.Event] = []
        resumed: asyncio.Task[list[stead.Event]] | None = None
        async with asyncio.timeout(40):
            async for event in run.events():
                seen.append(event)
                if len(seen) == 60:  # a second follower picks up from here, mid-stream
                    resumed = asyncio.create_task(
                        _collect(client.events(run.id, after=event.sequence))
                    )
            assert resumed is not None
            later = await resumed
        code, out, err = await asyncio.to_thread(finished, cli)
    truth = every_event(db, run.id)
    assert [(e.sequence, e.kind) for e in seen] == truth
    assert seen[-1].kind == "status" and seen[-1].data["status"] == "completed"
    assert [(e.sequence, e.kind) for e in later] == truth[60:]
    assert kinds(db, run.id).count("model_delta") >= 50 and len(truth) > 5 * 40
    assert code == 0, err
    followed = [json.loads(line) for line in out.splitlines()]
    assert [(e["sequence"], e["kind"]) for e in followed] == truth
    assert (await asyncio.to_thread(owner.close))["ok"]


async def test_events_of_a_retried_run_go_on_past_its_old_failure(db: str) -> None:
    calls = {"n": 0}

    def answer(request: stead.ModelRequest) -> str:
        calls["n"] += 1
        if calls["n"] == 1:
            raise stead.ModelError("bad request", retryable=False)
        return "recovered"

    agent = stead.Agent(id="a", version="1", model=FunctionModel(answer))
    async with await stead.App(agents=[agent]).open(stead.SqliteStore(db)) as runtime:
        run = await runtime.submit("a", session_id="s", request_id="r", prompt="go")
        with pytest.raises(stead.RunFailed):
            await run.result(timeout=10)
    async with stead.Client(stead.SqliteStore(db)) as client:
        await client.retry(run.id)
    async with await stead.App(agents=[agent]).open(stead.SqliteStore(db)) as runtime:
        assert (await runtime.get_run(run.id).result(timeout=10)).output == "recovered"
    async with stead.Client(stead.SqliteStore(db)) as client:
        events = await _collect(client.events(run.id))
    assert [e.data["status"] for e in events if e.kind == "status"][-1] == "completed"
    assert [e.sequence for e in events] == [s for s, _ in every_event(db, run.id)]


# -- waits that never end -----------------------------------------------------------------------


def test_waiting_on_a_run_that_never_ends_times_out_and_leaks_nothing(
    db: str, owners: list[Owner]
) -> None:
    asyncio.run(waiting_runs(db, 1))
    owner = start_owner(db, owners)
    owner.expect("ready")
    before = threading.active_count()

    async def main() -> None:
        async with stead.Client(stead.SqliteStore(db), command_timeout=0.5) as client:
            start = time.monotonic()
            with pytest.raises(TimeoutError, match=r"did not end within 0\.3s"):
                await client.get_run("r0").result(timeout=0.3)
            assert time.monotonic() - start < 2
            with pytest.raises(TimeoutError):
                await client.result("r0", timeout=0)
            stream = client.events("r0")
            async with asyncio.timeout(5):
                while (await anext(stream)).data.get("status") != "waiting":
                    pass
            with pytest.raises(TimeoutError):  # a follower given up on, mid-wait
                await asyncio.wait_for(anext(stream), 0.3)
            await stream.aclose()
            os.kill(owner.process.pid, signal.SIGSTOP)  # alive, holding the file, not draining
            try:
                with pytest.raises(TimeoutError, match=r"cancel\(r0\).*stays in the inbox"):
                    await client.cancel("r0", "stuck")
            finally:
                os.kill(owner.process.pid, signal.SIGCONT)
            assert {t for t in asyncio.all_tasks() if not t.done()} == {asyncio.current_task()}

    asyncio.run(main())
    assert threading.active_count() == before
    # The cancel the stopped owner was sent is applied, once, when it goes on.
    deadline = time.monotonic() + 5
    while statuses(db, "r0")[-1] != "cancelled":
        assert time.monotonic() < deadline, statuses(db, "r0")
        time.sleep(0.05)
    assert statuses(db, "r0").count("cancelled") == 1
    assert [status for _, _, status, _ in inbox(db)] == ["applied"]
    assert owner.close()["ok"]


# -- files that are not (or no longer) a stead database this client can write ------------------


def _not_stead(kind: str, path: Path) -> None:
    if kind == "garbage":
        path.write_bytes(bytes(range(256)) * 16)
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "text":
        path.write_text("runs:\n  - r0\n")
    elif kind == "other-app":
        with contextlib.closing(sqlite3.connect(path)) as conn:
            conn.execute("CREATE TABLE notes (body TEXT)")
            conn.execute("INSERT INTO notes VALUES ('keep me')")
            conn.commit()
    elif kind == "schema-v1":
        shutil.copyfile(JOURNAL_V1, path)


@pytest.mark.parametrize("kind", ["garbage", "empty", "text", "other-app", "schema-v1"])
def test_a_file_that_is_not_a_current_stead_database_is_refused_and_left_alone(
    tmp_path: Path, kind: str
) -> None:
    path = tmp_path / "stead.db"
    _not_stead(kind, path)
    digest, files = sha256(path), sorted(os.listdir(tmp_path))
    # an older journal names the migration; anything else is refused as not stead's
    expected = stead.SchemaVersionError if kind == "schema-v1" else stead.SteadError

    async def main() -> None:
        for act in (
            lambda c: c.list_runs(),
            lambda c: c.run_record("r0"),
            lambda c: c.list_interactions(),
            lambda c: c.cancel("r0"),
            lambda c: c.respond("int_x", stead.Approve()),
            lambda c: c.submit("a", session_id="s", request_id="r", prompt="p", version="1"),
        ):
            client = stead.Client(stead.SqliteStore(path), command_timeout=1)
            with pytest.raises(expected):
                await act(client)
            await client.close()

    asyncio.run(main())
    running = [
        stead_cli(*args, db=path)
        for args in (
            ("runs", "list"),
            ("runs", "show", "r0"),
            ("runs", "events", "r0", "--follow"),
            ("interactions", "list"),
            ("cancel", "r0"),
            ("approve", "int_x"),
        )
    ]
    for cli in running:
        code, _, err = finished(cli)
        assert_clean_failure(code, err, (kind, cli.args))
        assert code == 1
    assert sha256(path) == digest
    assert sorted(os.listdir(tmp_path)) == files


def _set_immutable(path: Path, on: bool) -> bool:
    done = subprocess.run(
        ["chattr", "+i" if on else "-i", str(path)], capture_output=True, check=False
    )
    return done.returncode == 0


@pytest.fixture(params=["file", "folder"])
def read_only_db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Path]:
    """A stead database (run r0 waiting) that cannot be written: the file itself, or its folder
    (no -wal/-shm beside it). Root ignores permissions, so as root the file or folder is made
    immutable instead (skipped where chattr does not work)."""
    folder = tmp_path / "ro"
    folder.mkdir()
    db = folder / "stead.db"
    asyncio.run(waiting_runs(db, 1))
    target = db if request.param == "file" else folder
    if os.geteuid() != 0:
        os.chmod(target, 0o444 if target == db else 0o555)
        yield db
        os.chmod(target, 0o644 if target == db else 0o755)
    else:
        if shutil.which("chattr") is None or not _set_immutable(target, True):
            pytest.skip("root ignores permissions and chattr +i does not work here")
        try:
            yield db
        finally:
            _set_immutable(target, False)


def test_a_read_only_database_refuses_commands_and_stays_unchanged(read_only_db: Path) -> None:
    digest = sha256(read_only_db)

    async def main() -> None:
        client = stead.Client(stead.SqliteStore(read_only_db), command_timeout=1)
        try:
            with pytest.raises((stead.SteadError, sqlite3.Error, OSError)):
                await client.cancel("r0")
        finally:
            await client.close()

    asyncio.run(main())
    code, _, err = finished(stead_cli("cancel", "r0", db=read_only_db))
    assert_clean_failure(code, err, "cancel")
    assert sha256(read_only_db) == digest  # r0 still waiting, as the bytes say


@pytest.fixture
def read_only_file(tmp_path: Path) -> Iterator[Path]:
    db = tmp_path / "stead.db"
    asyncio.run(waiting_runs(db, 1))
    if os.geteuid() != 0:
        os.chmod(db, 0o444)
    elif shutil.which("chattr") is None or not _set_immutable(db, True):
        pytest.skip("root ignores permissions and chattr +i does not work here")
    try:
        yield db
    finally:
        if os.geteuid() == 0:
            _set_immutable(db, False)


async def test_a_command_on_a_read_only_file_raises_a_storage_error(read_only_file: Path) -> None:
    async with stead.Client(stead.SqliteStore(read_only_file), command_timeout=1) as client:
        assert len((await client.list_runs()).runs) == 1
        with pytest.raises(stead.StorageError, match="cannot write"):
            await client.cancel("r0")


@pytest.fixture
def read_only_folder(tmp_path: Path) -> Iterator[Path]:
    folder = tmp_path / "ro"
    folder.mkdir()
    db = folder / "stead.db"
    asyncio.run(waiting_runs(db, 1))
    if os.geteuid() != 0:
        os.chmod(folder, 0o555)
    elif shutil.which("chattr") is None or not _set_immutable(folder, True):
        pytest.skip("root ignores permissions and chattr +i does not work here")
    try:
        yield db
    finally:
        if os.geteuid() == 0:
            _set_immutable(folder, False)
        else:
            os.chmod(folder, 0o755)


async def test_a_database_in_a_read_only_folder_is_not_called_foreign(
    read_only_folder: Path,
) -> None:
    with pytest.raises(stead.SteadError) as refused:
        async with stead.Client(stead.SqliteStore(read_only_folder)) as client:
            await client.list_runs()
    assert "not a stead database" not in str(refused.value)


async def test_a_database_deleted_under_a_client_is_not_recreated_or_written(db: str) -> None:
    await waiting_runs(db, 2)
    async with stead.Client(stead.SqliteStore(db), command_timeout=1) as client:
        await client.cancel("r0")  # the client's connections are open
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.remove(db + suffix)
        with pytest.raises((stead.SteadError, OSError)):
            await client.cancel("r1")
        assert not os.path.exists(db)
    code, _, err = finished(stead_cli("runs", "list", db=db))
    assert code == 1 and "no stead database" in err
    assert not os.path.exists(db)


async def test_a_command_after_the_database_is_replaced_is_not_acknowledged_and_lost(
    db: str, tmp_path: Path
) -> None:
    await waiting_runs(db, 2)
    restored = tmp_path / "backup.db"
    await waiting_runs(restored, 2)
    async with stead.Client(stead.SqliteStore(db), command_timeout=1) as client:
        await client.cancel("r0")
        for suffix in ("-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.remove(db + suffix)
        os.replace(restored, db)
        try:
            await client.cancel("r1")
        except stead.SteadError:
            return  # refused: fine
    assert journal(db, "SELECT status FROM stead_runs WHERE id = 'r1'") == [("cancelled",)]
