"""`stead demo` as a person runs it: kills at a model or a tool boundary, and refuses a model it
cannot use with one clear line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


def _demo(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k not in ("STEAD_MODEL", "OPENAI_API_KEY")}
    return subprocess.run(
        [sys.executable, "-m", "stead", "demo", "--db", str(tmp_path / "demo.db"), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**environ, "COLUMNS": "200", **env},
        check=False,
    )


def test_the_demo_kills_at_a_tool_boundary_and_the_refund_is_charged_once(
    tmp_path: Path,
) -> None:
    result = _demo(tmp_path, "--kill-at", "tool:2:call_refund")
    assert result.returncode == 0, result.stdout + result.stderr
    text = " ".join(result.stdout.split())
    assert "killed with SIGKILL" in text and "while tool:2:call_refund was in progress" in text
    assert "the refund ran exactly once" in text
    assert "tool:2:call_refund was attempted 2 times" in text


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"STEAD_MODEL": "bogus:x"}, "unknown model provider 'bogus'"),
        ({"STEAD_MODEL": "openai:gpt-4.1-mini"}, "needs an API key in OPENAI_API_KEY"),
    ],
)
def test_a_model_the_demo_cannot_use_is_one_clear_line(
    tmp_path: Path, env: dict[str, str], expected: str
) -> None:
    result = _demo(tmp_path, **env)
    assert result.returncode == 1
    assert expected in result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_kill_point_that_is_no_operation_key_is_a_usage_error(tmp_path: Path) -> None:
    result = _demo(tmp_path, "--kill-at", "refund")
    assert result.returncode == 2
    assert "use model:N or tool:N:CALL_ID" in result.stderr
