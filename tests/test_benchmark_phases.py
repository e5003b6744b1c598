"""``benchmarks/phases.py``: a run of ``peers.py``'s loop cut into phases that add up to the
run, with the time stead spends in SQLite and in fdatasync counted where it is spent."""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

import pytest
from rich.console import Console

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import phases
from stead.store.sqlite import store as sqlite_store


@pytest.mark.parametrize(("tool_on_loop", "nth"), [(False, 1), (True, 1), (False, 2)])
def test_a_runs_phases_add_up_to_it_and_only_its_barriers_flush(
    tmp_path: Path, tool_on_loop: bool, nth: int
) -> None:
    connect, fdatasync = sqlite3.connect, sqlite_store._fdatasync
    runs = phases.measure(2, 1, tmp_path, tool_on_loop=tool_on_loop, nth=nth)
    assert (sqlite3.connect, sqlite_store._fdatasync) == (connect, fdatasync)  # put back
    assert len(runs) == 2
    for run in runs:
        assert len(run.models) == phases.TOOL_CALLS + 1
        found = phases.phases_of(run)
        submission, start, turn, end, step = (found[name] for name in phases.PHASES)
        turns = phases.TOOL_CALLS
        for figure in ("wall", "sql", "statements", "sync"):
            parts = [getattr(p, figure) for p in (submission, start, turn, end)]
            whole = parts[0] + parts[1] + turns * parts[2] + parts[3]
            assert whole == pytest.approx(getattr(step, figure) * phases.STEPS_PER_RUN)
        # Every phase writes to the journal; with fsync="barriers" and one run, the
        # submission's commit and the run's last are flushed, and no turn's.
        assert min(p.statements for p in (submission, start, turn, end)) >= 1
        assert submission.sync > 0 and end.sync > 0
        assert start.sync == 0 and turn.sync == 0
        assert 0 < step.sql < step.wall


def test_the_table_shows_each_phase_with_its_figures() -> None:
    mark = phases.Mark(at=0.0, sql=0.0, statements=0, sync=0.0)
    later = phases.Mark(at=0.002, sql=0.0005, statements=12, sync=0.0004)
    console = Console(width=200, record=True)
    console.print(phases.table_of({"submission": phases.between(mark, later)}, "title"))
    (line,) = [line for line in console.export_text().splitlines() if " submission " in line]
    cells = [cell.strip() for cell in line.strip("│ ").split("│")]
    assert cells == ["submission", "2,000.0", "500.0 (12)", "400.0", "1,100.0"]


def test_a_runtimes_later_run_is_measured_after_the_ones_before_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    submitted: list[str] = []
    submit = phases.stead.Runtime.submit

    async def counted(self: object, *args: object, **kwargs: object) -> object:
        submitted.append(str(kwargs["session_id"]))
        return await submit(self, *args, **kwargs)  # type: ignore[arg-type]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(phases.stead.Runtime, "submit", counted)
        (run,) = phases.measure(1, 0, tmp_path, nth=3)
    assert submitted == ["s0-1", "s0-2", "s0-3"]  # one runtime, its third run timed
    assert len(run.models) == phases.TOOL_CALLS + 1
    with pytest.raises(SystemExit):
        phases.main(["--runs", "1", "--nth", "0", "--dir", str(tmp_path)])
    assert "--nth counts a runtime's runs from 1, got 0" in capsys.readouterr().err
