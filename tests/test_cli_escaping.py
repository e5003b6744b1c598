"""The ``stead runs`` commands print journal text as data: never as rich markup, never as
terminal control sequences (a prompt-injected model writes this text)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.text import Text

import stead
from stead.cli.runs import safe_text
from stead.testing import FunctionModel, ScriptedModel

MARKUP_CLOSE = "all good [/] really"
LINK_MARKUP = "[link=https://evil.example/]click[/link]"
STYLE_MARKUP = "[bold red]x[/]"
TITLE_AND_CLEAR = "\x1b]0;pwned\x07\x1b[2J"
OSC8_LINK = "\x1b]8;;https://evil.example/\x1b\\link\x1b]8;;\x1b\\"
CARRIAGE_RETURN = "a\rb"
C1_CSI = "\x9b31m"
BACKSPACE = "ok\x08\x08no"
BIDI = "abc\u202edcba\u2066x\u2069\u2028y"
PAYLOADS = [
    MARKUP_CLOSE,
    LINK_MARKUP,
    STYLE_MARKUP,
    TITLE_AND_CLEAR,
    OSC8_LINK,
    CARRIAGE_RETURN,
    C1_CSI,
    BACKSPACE,
    BIDI,
]
MARKUP_ID = "[b]x[/b]"
EVIL_TOOL = "[bold red]evil[/]"
FAILURE = f"{LINK_MARKUP} {TITLE_AND_CLEAR}"

STEAD = Path(sys.executable).with_name("stead")


@stead.tool(name="echo", recovery="safe")
async def echo(text: str) -> str:
    """Say it back."""
    return text


def _raise(request: stead.ModelRequest) -> str:
    raise ValueError(FAILURE)


async def _populate(db: str) -> tuple[str, str]:
    model = ScriptedModel(
        [
            [
                *(
                    stead.ToolCall(name="echo", arguments={"text": p}, id=f"c{i}")
                    for i, p in enumerate(PAYLOADS, start=1)
                ),
                stead.ToolCall(name=EVIL_TOOL, arguments={"text": STYLE_MARKUP}, id="c99"),
            ],
            MARKUP_CLOSE,
        ]
    )
    app = stead.App(
        agents=[
            stead.Agent(
                id="agent", version="1", model=model, instructions="be brief", tools=[echo]
            ),
            stead.Agent(id="broken", version="1", model=FunctionModel(_raise), instructions="x"),
        ]
    )
    async with await app.open(stead.SqliteStore(db)) as runtime:
        good = await runtime.submit(
            "agent", session_id=MARKUP_ID, request_id=MARKUP_ID, prompt="go"
        )
        outcome = await good.result()
        assert outcome.output == MARKUP_CLOSE
        bad = await runtime.submit(
            "broken", session_id=MARKUP_ID, request_id=f"{MARKUP_ID}\u202e", prompt="go"
        )
        with pytest.raises(stead.RunFailed):
            await bad.result()
    return good.id, bad.id


@pytest.fixture(scope="module")
def journal(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str, str]:
    db = str(tmp_path_factory.mktemp("escaping") / "stead.db")
    good, bad = asyncio.run(_populate(db))
    return db, good, bad


def _cli(*args: str) -> str:
    env = {
        **os.environ,
        "FORCE_COLOR": "1",
        "TERM": "xterm-256color",
        "COLUMNS": "250",
        "LINES": "100",
    }
    for name in ("NO_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        env.pop(name, None)
    result = subprocess.run(
        [str(STEAD), *args], capture_output=True, env=env, timeout=60, check=False
    )
    assert result.returncode == 0, (result.returncode, result.stdout, result.stderr)
    return result.stdout.decode("utf-8")


def _assert_inert(out: str) -> None:
    assert "\x1b]" not in out  # no OSC: window titles, hyperlinks
    assert "\x1b[2J" not in out
    assert "\x1b\\" not in out
    for raw in ("\r", "\x07", "\x08", "\x9b", "\x7f", "\u202e", "\u2066", "\u2069", "\u2028"):
        assert raw not in out, repr(raw)
    # rich itself only ever writes SGR (colour/bold) sequences here
    stripped = out.replace("\x1b[", "")
    assert "\x1b" not in stripped


def test_list_prints_ids_literally(journal: tuple[str, str, str]) -> None:
    db, good, bad = journal
    out = _cli("runs", "list", "--db", db)
    _assert_inert(out)
    assert good in out and bad in out
    assert out.count(MARKUP_ID) >= 3
    assert f"{MARKUP_ID}\\u202e" in out


def test_show_prints_model_text_and_tool_results_literally(
    journal: tuple[str, str, str],
) -> None:
    db, good, _ = journal
    out = _cli("runs", "show", good, "--db", db)
    _assert_inert(out)
    assert f"output: {MARKUP_CLOSE}" in out
    assert MARKUP_ID in out
    assert LINK_MARKUP in out
    assert STYLE_MARKUP in out
    assert "\\x1b]0;pwned\\x07\\x1b[2J" in out
    assert "\\x1b]8;;https://evil.example/\\x1b\\link\\x1b]8;;\\x1b\\" in out
    assert "a\\rb" in out
    assert "\\x9b31m" in out
    assert "ok\\x08\\x08no" in out
    assert "abc\\u202edcba\\u2066x\\u2069\\u2028y" in out


def test_show_prints_failure_reason_literally(journal: tuple[str, str, str]) -> None:
    db, _, bad = journal
    out = _cli("runs", "show", bad, "--db", db)
    _assert_inert(out)
    assert LINK_MARKUP in out
    assert "\\x1b]0;pwned\\x07\\x1b[2J" in out
    assert f"request {MARKUP_ID}\\u202e" in out


def test_events_prints_event_data_literally(journal: tuple[str, str, str]) -> None:
    db, good, bad = journal
    out = _cli("runs", "events", good, "--db", db)
    _assert_inert(out)
    assert MARKUP_CLOSE in out
    assert LINK_MARKUP in out
    assert STYLE_MARKUP in out
    assert EVIL_TOOL in out
    assert "\\x1b]0;pwned\\x07\\x1b[2J" in out
    assert "\\x1b]8;;https://evil.example/\\x1b\\link\\x1b]8;;\\x1b\\" in out
    assert "a\\rb" in out
    assert "\\x9b31m" in out
    assert f"request {MARKUP_ID}" in out

    failed = _cli("runs", "events", bad, "--db", db)
    _assert_inert(failed)
    assert LINK_MARKUP in failed
    assert "\\x1b]0;pwned\\x07\\x1b[2J" in failed


def test_without_a_terminal_the_text_is_still_inert(journal: tuple[str, str, str]) -> None:
    db, good, _ = journal
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TERM", "COLUMNS")}
    result = subprocess.run(
        [str(STEAD), "runs", "show", good, "--db", db, "--"],
        capture_output=True,
        env={**env, "COLUMNS": "250"},
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout.decode("utf-8")
    assert "\x1b" not in out and "\r" not in out and "\x9b" not in out
    assert LINK_MARKUP in out and MARKUP_CLOSE in out


def test_safe_text_contract() -> None:
    text = safe_text("[b]x[/b]\x1b[2J\x00\x7f\x85\u202a\u2029 a\tb\nc\r")
    assert isinstance(text, Text)
    assert text.plain == "[b]x[/b]\\x1b[2J\\x00\\x7f\\x85\\u202a\\u2029 a\tb\nc\\r"
    assert safe_text("a\tb\nc", one_line=True).plain == "a\\tb\\nc"
    assert safe_text({"k": "\x9b"}).plain == '{"k": "\\x9b"}'
    assert safe_text("héllo ✓ 日本").plain == "héllo ✓ 日本"
    assert safe_text(3).plain == "3"
