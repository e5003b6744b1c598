"""``benchmarks/summary.py``'s figures and their verdicts: what a round reports against each
target, and what several rounds report together (``--repeat``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from rich.console import Console

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import peers
import summary


def _text(rounds: list[summary.Figures]) -> str:
    console = Console(width=200, record=True)
    console.print(summary.table_of(rounds))
    return console.export_text()


def _line(text: str, figure: str) -> str:
    return next(line for line in text.splitlines() if f" {figure} " in line)


def test_each_target_is_read_in_its_own_unit_and_direction() -> None:
    figures = summary.Figures()
    figures.add("ratio", 3.0, "x", target="≤ 3x")  # on the bound: met
    figures.add("slow ratio", 3.01, "x", target="≤ 3x")
    figures.add("rate", 9_999, spec=",.0f", target="≥ 10,000")
    figures.add("open", 4.5, " ms", target="≤ 20 ms")
    figures.add("held", 2_049, " B", spec=",.0f", target="≤ 2,048 B")
    figures.add("speed-up", 10.0, "x", target="≥ 10x")
    figures.add("floor", 22.2, " µs/step", ".1f")
    assert [row.ok for row in figures.rows] == [True, False, False, True, False, True, None]
    text = _text([figures])
    assert "3.00x" in _line(text, "ratio") and "PASS" in _line(text, "ratio")
    assert "MISS" in _line(text, "slow ratio")
    assert "9,999" in _line(text, "rate") and "MISS" in _line(text, "rate")
    assert "2,049 B" in _line(text, "held")
    assert "22.2 µs/step" in _line(text, "floor")
    assert "PASS" not in _line(text, "floor") and "MISS" not in _line(text, "floor")


def test_rounds_together_give_each_figures_range_and_how_many_rounds_met_it() -> None:
    rounds = []
    for safe, rate in ((2.96, 19_577), (3.09, 19_956), (3.17, 19_700)):
        figures = summary.Figures()
        figures.add("safe", safe, "x", target="≤ 3x")
        figures.add("rate", rate, spec=",.0f", target="≥ 10,000")
        figures.note("DBOS", "not installed")
        rounds.append(figures)
    rounds[0].add("LangGraph", 1.5, "x")  # ran in one round only
    text = _text(rounds)
    assert "lowest to highest of 3 rounds" in text
    assert "2.96 to 3.17x" in _line(text, "safe")
    assert "MISS (1 of 3 met)" in _line(text, "safe")
    assert "19,577 to 19,956" in _line(text, "rate") and "PASS" in _line(text, "rate")
    assert "not installed" in _line(text, "DBOS")
    assert "1.50x (1 of 3 rounds)" in _line(text, "LangGraph")


def test_rounds_side_by_side_show_each_rounds_value_and_mark_its_misses() -> None:
    rounds = []
    for safe, peer in ((2.96, 1_283.0), (3.09, 2_179.5)):
        figures = summary.Figures()
        figures.add("safe", safe, "x", target="≤ 3x")
        figures.add("LangGraph step", peer, " µs/step", ".1f")
        figures.note("DBOS", "not installed")
        rounds.append(figures)
    rounds[1].add("late", 1.0, "x")  # measured in the second round only
    console = Console(width=200, record=True)
    console.print(summary.rounds_of(rounds))
    text = console.export_text()
    assert "round 1" in text and "round 2" in text and "round 3" not in text
    line = _line(text, "safe")
    assert "2.96x" in line and "3.09x ✗" in line and "2.96x ✗" not in line
    assert "1283.0 µs/step" in _line(text, "LangGraph step")
    assert "✗" not in _line(text, "LangGraph step")  # no target: nothing to miss
    assert "—" in _line(text, "late")
    assert "DBOS" not in text  # a note has no value a round: the range table shows it


def test_peer_rows_say_what_each_target_asks_of_steads_ratio_to_the_floor(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # ms a step each system "measured": the peers' loop is not run here.
    steps = {
        ("stead", "barriers"): 0.15,
        ("stead", "always"): 0.25,
        ("DBOS", None): 1.6,
        ("LangGraph", None): 1.2,
        (peers.FLOOR, "barriers"): 0.08,
        (peers.FLOOR, "always"): 0.3,
    }

    # A database's later run: stead's step shorter, LangGraph's longer.
    later = {("stead", "barriers"): 0.12, ("LangGraph", None): 1.32}

    def system(name: str, fsync: str | None, nth: int = 1) -> peers.System:
        setting = f'SqliteStore(fsync="{fsync}")' if name == "stead" else f"{name} setting"
        if name == peers.FLOOR:
            assert fsync is not None
            setting = peers.FLOOR_SETTINGS[fsync]
        found = peers.System(name, setting, run_once=lambda run_dir, n: 0.0)
        found.samples_ms_per_step.append(
            later.get((name, fsync), steps[(name, fsync)]) if nth > 1 else steps[(name, fsync)]
        )
        return found

    monkeypatch.setattr(peers, "stead_system", lambda fsync, nth=1: system("stead", fsync, nth))
    monkeypatch.setattr(peers, "dbos_system", lambda nth=1: system("DBOS", None, nth))
    monkeypatch.setattr(peers, "langgraph_system", lambda nth=1: system("LangGraph", None, nth))
    monkeypatch.setattr(peers, "floor_system", lambda fsync: system(peers.FLOOR, fsync))
    measured: list[list[str]] = []
    monkeypatch.setattr(
        peers,
        "measure",
        lambda systems, runs, warmup, base: measured.append([s.name for s in systems]),
    )
    figures = summary.Figures()
    summary.peer_figures(3, tmp_path, figures)
    value = {row.name: row.value for row in figures.rows}
    assert value['speed-up over LangGraph, fsync="barriers"'] == pytest.approx(8.0)
    # Measured again with each system's third run on its database: 1.32 / 0.12 ms.
    nth = summary.WARM_NTH
    warm = f'speed-up over LangGraph, fsync="barriers", {peers.ordinal(nth)} run'
    assert value[warm] == pytest.approx(11.0)
    assert next(row for row in figures.rows if row.name == warm).ok
    assert value[f'speed-up over DBOS, fsync="always", {peers.ordinal(nth)} run'] == (
        pytest.approx(1.6 / 0.25)
    )
    # The floors are not measured again: no target divides by them there.
    assert measured[1] == ["stead", "stead", "DBOS", "LangGraph"]
    assert value[
        'stead fsync="barriers" ÷ the Python floor fsync\'d at submission and end, this loop'
    ] == pytest.approx(1.875)
    # 10x over LangGraph's 1.2 ms is 0.12 ms: 1.5 times the floor's 0.08.
    assert value["… what 10x over LangGraph asks of that ratio (at most)"] == pytest.approx(1.5)
    assert value["… what 10x over DBOS asks of that ratio (at most)"] == pytest.approx(2.0)
    # 5x over DBOS's 1.6 ms is 0.32 ms, against a floor fsync'd after every commit of 0.3.
    assert value["… what 5x over DBOS asks of that ratio (at most)"] == pytest.approx(0.32 / 0.3)
    names = [row.name for row in figures.rows]
    assert (
        names.index("… what 10x over LangGraph asks of that ratio (at most)")
        == names.index(
            'stead fsync="barriers" ÷ the Python floor fsync\'d at submission and end, this loop'
        )
        + 2
    )


def test_a_peer_that_did_not_run_leaves_its_targets_shown_as_not_measured(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def system(name: str, setting: str, ms: float | None) -> peers.System:
        found = peers.System(name, setting, run_once=None if ms is None else lambda d, n: 0.0)
        if ms is None:
            found.skipped = f"{name} failed: RuntimeError: no launch"
        else:
            found.samples_ms_per_step.append(ms)
        return found

    monkeypatch.setattr(
        peers,
        "stead_system",
        lambda fsync, nth=1: system("stead", f'SqliteStore(fsync="{fsync}")', 0.15),
    )
    monkeypatch.setattr(peers, "dbos_system", lambda nth=1: system("DBOS", "DBOS setting", None))
    monkeypatch.setattr(peers, "langgraph_system", lambda nth=1: system("LangGraph", "LG", 1.2))
    monkeypatch.setattr(
        peers, "floor_system", lambda fsync: system(peers.FLOOR, peers.FLOOR_SETTINGS[fsync], 0.08)
    )
    monkeypatch.setattr(peers, "measure", lambda systems, runs, warmup, base: None)
    rounds = []
    for _ in range(2):
        figures = summary.Figures()
        summary.peer_figures(3, tmp_path, figures)
        rounds.append(figures)
    text = _text(rounds)
    for fsync, target in (("barriers", "≥ 10x"), ("always", "≥ 5x")):
        for suffix in ("", f", {peers.ordinal(summary.WARM_NTH)} run"):
            line = _line(text, f'speed-up over DBOS, fsync="{fsync}"{suffix}')
            assert "not measured: DBOS did not run" in line
            assert target in line and "NOT MEASURED" in line
    assert "DBOS failed: RuntimeError: no launch" in _line(text, "DBOS DBOS setting")
    assert "PASS" not in _line(text, 'speed-up over LangGraph, fsync="barriers"')
    assert "8.00x" in _line(text, 'speed-up over LangGraph, fsync="barriers"')


def test_a_figure_measured_in_some_rounds_only_is_judged_on_those() -> None:
    rounds = []
    for value in (12.0, None, 11.0):
        figures = summary.Figures()
        if value is None:
            figures.note("speed-up", "not measured: DBOS did not run", target="≥ 10x")
        else:
            figures.add("speed-up", value, "x", target="≥ 10x")
        rounds.append(figures)
    line = _line(_text(rounds), "speed-up")
    assert "11.00 to 12.00x (2 of 3 rounds)" in line and "PASS" in line
