"""``benchmarks/peers.py``'s round-robin: what runs between the systems' measured runs."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import peers


def test_an_untimed_run_follows_each_run_of_a_system_that_leaves_the_disk_busy(
    tmp_path: Path,
) -> None:
    calls: list[str] = []

    def system(name: str, *, busy: bool) -> peers.System:
        def run_once(run_dir: Path, n: int) -> float:
            assert run_dir.is_dir()
            calls.append(f"{name} {n}")
            return 0.021  # 21 steps of a millisecond

        return peers.System(name, "setting", run_once, leaves_disk_busy=busy)

    def absorber(run_dir: Path) -> None:
        assert run_dir.is_dir()
        calls.append("absorber")

    busy, quiet = system("DBOS", busy=True), system("LangGraph", busy=False)
    peers.measure([busy, quiet], 2, 1, tmp_path, absorber=absorber)

    assert calls == [
        "DBOS 0",
        "absorber",
        "LangGraph 0",
        "DBOS 1",
        "absorber",
        "LangGraph 1",
        "DBOS 2",
        "absorber",
        "LangGraph 2",
    ]
    # The warm-up round is not counted, and the absorber's runs are nobody's samples.
    assert busy.samples_ms_per_step == [1.0, 1.0]
    assert quiet.samples_ms_per_step == [1.0, 1.0]
    assert list(tmp_path.iterdir()) == []  # every run's folder, the absorber's too, is gone


def test_of_the_peers_only_dbos_is_followed_by_an_untimed_run() -> None:
    dbos = peers.dbos_system()
    assert dbos.leaves_disk_busy or dbos.run_once is None  # None: DBOS is not installed
    assert not peers.langgraph_system().leaves_disk_busy
    assert not peers.stead_system("barriers").leaves_disk_busy
    assert not peers.floor_system("always").leaves_disk_busy


def test_only_the_floor_is_measured_without_a_collection_first() -> None:
    assert not peers.floor_system("barriers").collected
    assert not peers.floor_system("always").collected
    assert peers.stead_system("barriers").collected
    assert peers.langgraph_system().collected


def test_a_system_that_fails_is_reported_and_the_others_are_still_measured(
    tmp_path: Path,
) -> None:
    def broken(run_dir: Path, n: int) -> float:
        raise RuntimeError("DBOS failed to launch")

    failing = peers.System("DBOS", "setting", broken)
    working = peers.System("LangGraph", "setting", lambda run_dir, n: 0.021)
    peers.measure([failing, working], 2, 1, tmp_path, absorber=lambda run_dir: None)

    assert failing.skipped == "DBOS failed: RuntimeError: DBOS failed to launch"
    assert failing.run_once is None and failing.samples_ms_per_step == []
    assert working.samples_ms_per_step == [1.0, 1.0]


def test_a_column_default_this_sqlite_cannot_evaluate_is_named_with_the_version() -> None:
    import sqlite3

    assert peers.sqlite_default_problem("DBOS 9", "(strftime('%s','now') * 1000)") is None
    null = peers.sqlite_default_problem("DBOS 9", "(NULL)")
    assert null is not None
    assert f"SQLite {sqlite3.sqlite_version}" in null and "gives NULL" in null
    assert "DBOS 9" in null and "(NULL)" in null and "sqlite3.sqlite_version" in null
    failing = peers.sqlite_default_problem("DBOS 9", "(no_such_function())")
    assert failing is not None and "fails (no such function: no_such_function)" in failing


def test_dbos_is_skipped_with_the_reason_where_its_timestamps_cannot_be_written(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # DBOS itself need not be installed: its helper is what the check asks.
    migration = types.SimpleNamespace(get_sqlite_timestamp_expr=lambda: "(NULL)")
    dbos = types.ModuleType("dbos")
    dbos.DBOS, dbos.DBOSConfig, dbos._migration = object(), object(), migration  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "dbos", dbos)
    monkeypatch.setitem(sys.modules, "dbos._migration", migration)
    system = peers.dbos_system()
    assert system.run_once is None
    assert system.skipped is not None and "gives NULL" in system.skipped


def test_the_floor_runs_again_on_its_connection_and_times_the_last_run(tmp_path: Path) -> None:
    import sqlite3

    import step_overhead

    flushed: list[int] = []
    steps = step_overhead._floor_steps(
        tmp_path, 2, "safe", lambda fd: flushed.append(fd), collect=False, runs=3
    )
    turns = []
    try:
        turns.append(next(steps))
        while True:
            turns.append(steps.send(None))
    except StopIteration as done:
        ms_per_step = float(done.value)
    assert turns == [1, 2] * 3
    assert len(flushed) == 6  # the submission's and the end's barrier, each run
    assert 0 < ms_per_step < 1000
    (path,) = tmp_path.glob("floor-safe-*.db")
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT run, COUNT(*) FROM journal GROUP BY run").fetchall()
    assert rows == [("run1", 6), ("run2", 6), ("run3", 6)]  # 1 + 2 model + 2 tool + final


@pytest.mark.parametrize("system", ["stead", "LangGraph", "floor"])
def test_a_systems_later_run_on_its_database_is_timed_after_the_ones_before(
    tmp_path: Path, system: str
) -> None:
    made = {
        "stead": lambda: peers.stead_system("barriers", 3),
        "LangGraph": lambda: peers.langgraph_system(3),
        "floor": lambda: peers.floor_system("barriers", 3),
    }[system]()
    if made.run_once is None:
        pytest.skip(made.skipped or "not installed")
    peers.COUNTER.reset()
    seconds = made.run_once(tmp_path, 0)
    # Every run called each tool: LangGraph checks each run's 21 steps, counted afresh.
    runs = 1 if system == "LangGraph" else 3
    assert peers.COUNTER.tool == runs * peers.TOOL_CALLS
    assert 0 < seconds < 5


def test_nth_is_refused_below_one(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        peers.main(["--nth", "0", "--runs", "1"])
    assert exit_.value.code == 2
    assert "--nth counts a database's runs from 1, got 0" in capsys.readouterr().err
