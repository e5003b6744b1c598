"""Every example in examples/ runs offline, exits 0 and prints what it promises."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))

#: Lines (substrings) each example must print. An example missing here must still exit 0.
EXPECTED: dict[str, list[str]] = {
    "quickstart.py": ["model_completed", "outcome: Refunded 49.00 for your teapot."],
    "crash_and_resume.py": [
        "child process killed by SIGKILL",
        "ledger after the resume: 1 refund(s)",
        "the refund ran exactly once",
    ],
    "approvals.py": [
        "question approval:1:ask: Which orders?",
        "done before any approval: ['refund 17 20.00']",
        "close: a reviewer denied this call: closing accounts needs a phone call",
        "done in the end: ['refund 17 20.00', 'refund 18 500.00']",
    ],
    "manual_recovery.py": [
        "needs attention at tool:1:alice",
        "needs attention at tool:2:bob",
        "alice: wire-1 (confirmed with the bank)",
        "bank books: 2 transfers",
    ],
    "client_from_another_process.py": [
        "pending approval approval:1:call_1_1: refund",
        "outcome: Refund approved and issued.",
        "run finished, runtime closed",
    ],
    "retries_and_budgets.py": [
        "next attempt in 30s",
        "budget reached: {'limit': 'max_turns'",
        "model:1 was attempted 3 times",
        "outcome: Found it on page 3.",
    ],
    "streaming.py": [
        "connection reset by peer: this attempt's text is dropped",
        "folded: Durable execution means every model response",
    ],
    "fork.py": [
        "fork (v2):     Sunny and 31°C in Lisbon",
        "model:2    ran in the fork",
        "weather was looked up 1 time(s); v2's model was asked for turn(s) [2]",
    ],
    "run_agent.py": ["second call: job-1:", "the model was called 1 time(s)"],
    "triage.py": [
        "child agent:summarizer: completed",
        "progress: {'stage': 'summarized'}",
        "waiting: signal 'manager' at signal:manager",
        "effect_completed: charge",
        "timer_fired: sleep",
        "receipt: credit of 100 EUR to ana, approved by rui",
        "the provider's books: 1 charge(s)",
    ],
    "graph.py": [
        "refused: the graph has a cycle among nodes 'a', 'b'",
        "node node:review failed: task 'critic' raised ConnectionError",
        "completed meanwhile: ['node:history', 'node:sights', 'node:write']",
        "review: {'verdict': 'approved', 'style': 'short'",
    ],
    "task_versions.py": [
        "version 1: charged ['A-1'], waiting for the warehouse",
        "the run is on version 2 now (migrated from version 1)",
        "its input: {'order': 'A-1', 'gift_wrap': False}",
        "outcome: A-1: receipt-A-1, shipped",
        "charges made: 1",
    ],
    "schedules.py": [
        "monday: slot:2026-11-30T09:00:00.000+00:00 -> sales report for EMEA",
        "after the downtime: slot:2026-12-03T09:00:00.000+00:00 -> sales report for EMEA",
        "runs in all: 2",
    ],
    "postgres.py": [
        "pending approval approval:1:call_1_1: refund {'order_id': '19', 'amount': 250.0}",
        "Done: refunded 20.00 on order 17.",
        "Done: refunded 250.00 on order 19.",
        "Done: refunded 40.00 on order 22.",
    ],
}


def test_there_are_examples_and_every_expectation_names_one() -> None:
    names = {path.name for path in EXAMPLES}
    assert names, "examples/ holds no examples"
    assert set(EXPECTED) <= names, f"expectations for missing examples: {set(EXPECTED) - names}"


#: Examples that need a PostgreSQL server (STEAD_TEST_POSTGRES_URL); they write no file.
POSTGRES_EXAMPLES = {"postgres.py"}


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda path: path.name)
def test_example_runs(example: Path, tmp_path: Path) -> None:
    env = {**os.environ, "STEAD_EXAMPLE_DIR": str(tmp_path)}
    if example.name in POSTGRES_EXAMPLES:
        url = os.environ.get("STEAD_TEST_POSTGRES_URL")
        if not url:
            pytest.skip("STEAD_TEST_POSTGRES_URL is not set")
        env["STEAD_POSTGRES_URL"] = url
    done = subprocess.run(
        [sys.executable, str(example)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    report = f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    assert done.returncode == 0, report
    assert "Traceback" not in done.stderr, report
    for line in EXPECTED.get(example.name, []):
        assert line in done.stdout, f"{example.name} did not print {line!r}\n{report}"
    if example.name not in POSTGRES_EXAMPLES:
        assert any(tmp_path.rglob("*.db")), f"{example.name} wrote no database"
