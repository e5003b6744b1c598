"""The ``stead`` command, run as a real process on a database no runtime holds open: every
command's happy path, its errors (one line, exit status 1), its usage errors (status 2), its
``--json``; a decision it records is acted on by the next runtime that opens the database."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import stead
from stead.cli import main
from stead.cli.interactions import parse_value
from stead.testing import FunctionModel, ScriptedModel

V1_FIXTURE = Path(__file__).parent / "fixtures" / "journal-v1.sqlite"
REFUND_TEXT = "Refunded 10 for order 1."


def make_app(calls: list[str], shipping: asyncio.Event | None = None) -> stead.App:
    @stead.tool(recovery="idempotent", approval=True)
    async def refund(order_id: str, amount: int, ctx: stead.ToolContext) -> str:
        """Refund an order."""
        calls.append(ctx.operation_id)
        return f"refunded {amount}"

    @stead.tool(recovery="manual")
    async def ship(order_id: str) -> str:
        """Ship an order (here: hangs until the runtime closes)."""
        calls.append("ship")
        if shipping is not None:
            shipping.set()
        await asyncio.Event().wait()
        return "shipped"

    support_turns = ScriptedModel(
        [
            [stead.ToolCall(name="refund", arguments={"order_id": "1", "amount": 10}, id="c1")],
            REFUND_TEXT,
        ]
    )

    def broken(request: stead.ModelRequest) -> str:
        raise ValueError("the model is down")

    return stead.App(
        agents=[
            stead.Agent(
                id="support",
                version="1",
                # a priced model id, so runs have a cost
                model=FunctionModel(support_turns.complete, model_id="openai:gpt-4.1-mini"),
                tools=[refund],
            ),
            stead.Agent(
                id="asker",
                version="1",
                model=ScriptedModel(
                    [
                        [
                            stead.ToolCall(
                                name="ask_user", arguments={"question": "Which size?"}, id="q1"
                            )
                        ],
                        "Noted.",
                    ]
                ),
                tools=[stead.ask_user],
            ),
            stead.Agent(
                id="shipper",
                version="1",
                model=ScriptedModel(
                    [
                        [stead.ToolCall(name="ship", arguments={"order_id": "7"}, id="s1")],
                        "Shipped.",
                    ]
                ),
                tools=[ship],
            ),
            stead.Agent(id="broken", version="1", model=FunctionModel(broken)),
        ]
    )


async def until(run: stead.RunHandle, status: stead.RunStatus) -> None:
    for _ in range(1000):
        if await run.status() is status:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"run never reached {status}: it is {await run.status()}")


@dataclass(frozen=True)
class Journal:
    """A database holding one run in each state the CLI acts on."""

    db: Path
    done: str
    waiting: str
    approval: str
    asking: str
    question: str
    attention: str
    failed: str


async def build(db: Path) -> Journal:
    calls: list[str] = []
    shipping = asyncio.Event()
    app = make_app(calls, shipping)
    async with await app.open(stead.SqliteStore(db)) as runtime:
        done = await runtime.submit("support", session_id="done", request_id="r", prompt="go")
        await until(done, stead.RunStatus.WAITING)
        (first,) = await done.interactions()
        await done.respond(first.interaction_id, stead.Approve(reviewer="ana"))
        assert (await done.result(timeout=10)).output == REFUND_TEXT
        waiting = await runtime.submit("support", session_id="wait", request_id="r", prompt="go")
        await until(waiting, stead.RunStatus.WAITING)
        asking = await runtime.submit("asker", session_id="ask", request_id="r", prompt="go")
        await until(asking, stead.RunStatus.WAITING)
        failed = await runtime.submit("broken", session_id="fail", request_id="r", prompt="go")
        with pytest.raises(stead.RunFailed):
            await failed.result(timeout=10)
        attention = await runtime.submit("shipper", session_id="ship", request_id="r", prompt="go")
        await asyncio.wait_for(shipping.wait(), 10)
        (approval,) = await waiting.interactions()
        (question,) = await asking.interactions()
    # closing interrupted the manual ship tool mid-call: reopened, that run needs attention
    async with await make_app(calls).open(stead.SqliteStore(db)) as runtime:
        await until(runtime.get_run(attention.id), stead.RunStatus.NEEDS_ATTENTION)
    return Journal(
        db=db,
        done=done.id,
        waiting=waiting.id,
        approval=approval.interaction_id,
        asking=asking.id,
        question=question.interaction_id,
        attention=attention.id,
        failed=failed.id,
    )


@pytest.fixture(scope="module")
def journal(tmp_path_factory: pytest.TempPathFactory) -> Journal:
    return asyncio.run(build(tmp_path_factory.mktemp("cli") / "stead.db"))


@pytest.fixture
def fresh(journal: Journal, tmp_path: Path) -> Journal:
    """A copy of the journal a test may change (no process has it open)."""
    for suffix in ("", "-wal", "-shm"):
        source = Path(f"{journal.db}{suffix}")
        if source.exists():
            shutil.copy(source, tmp_path / f"stead.db{suffix}")
    return Journal(**{**journal.__dict__, "db": tmp_path / "stead.db"})


def stead_cli(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "stead", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
        cwd=cwd,
        check=False,
    )


def ok(*args: str, **kwargs: Any) -> str:
    done = stead_cli(*args, **kwargs)
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    assert done.stderr == ""
    return done.stdout


def as_json(*args: str, **kwargs: Any) -> Any:
    return json.loads(ok(*args, "--json", **kwargs))


def error(*args: str, status: int = 1, **kwargs: Any) -> str:
    """Run a command that must fail: its one-line message on stderr, never a traceback."""
    done = stead_cli(*args, **kwargs)
    assert done.returncode == status, (args, done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    if status == 1:
        assert done.stdout == ""
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1, done.stderr
        assert lines[0].startswith("Error: ")
    return done.stderr


def finish(db: Path, run_id: str) -> tuple[stead.RunOutcome, list[str]]:
    """Open the database with a runtime, as a deployment would, and let the run finish."""

    async def go() -> tuple[stead.RunOutcome, list[str]]:
        calls: list[str] = []
        async with await make_app(calls).open(stead.SqliteStore(db)) as runtime:
            return await runtime.get_run(run_id).result(timeout=10), calls

    return asyncio.run(go())


def status(db: Path, run_id: str) -> str:
    return str(as_json("runs", "show", run_id, "--db", str(db))["run"]["status"])


def files_of(folder: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.iterdir())
        if p.is_file()
    }


# -- the command itself ------------------------------------------------------------------------


def test_python_dash_m_stead_documents_every_command() -> None:
    out = ok("--help")
    for command in (
        "runs",
        "interactions",
        "approve",
        "deny",
        "answer",
        "resolve",
        "retry",
        "cancel",
        "fork",
        "demo",
    ):
        assert command in out
    assert "STEAD_DB" in out
    # each command's own help, in process (the entry point itself was run above)
    runner = CliRunner()
    for path in (
        ["runs", "list"],
        ["runs", "show"],
        ["runs", "events"],
        ["interactions", "list"],
        ["approve"],
        ["deny"],
        ["answer"],
        ["resolve"],
        ["retry"],
        ["cancel"],
        ["fork"],
    ):
        result = runner.invoke(main, [*path, "--help"])
        assert result.exit_code == 0, path
        assert "--db" in result.output and "STEAD_DB" in result.output, path
        assert "--json" in result.output, path


# -- runs list ----------------------------------------------------------------------------------


def test_runs_list_shows_status_times_tokens_and_cost(journal: Journal) -> None:
    out = ok("runs", "list", "--db", str(journal.db))
    for run_id in (journal.done, journal.waiting, journal.attention, journal.failed):
        assert run_id in out
    for word in ("completed", "waiting", "needs_attention", "failed", "support@1"):
        assert word in out
    assert "tokens" in out and "$0." in out  # the priced support runs have a cost

    doc = as_json("runs", "list", "--db", str(journal.db))
    runs = {run["id"]: run for run in doc["runs"]}
    assert doc["next_cursor"] is None
    done = runs[journal.done]
    assert done["status"] == "completed" and done["session_id"] == "done"
    assert done["created_at"].endswith("+00:00")  # ISO times
    assert done["usage"]["output_tokens"] > 0
    assert done["cost_usd"] > 0
    assert runs[journal.asking]["cost_usd"] is None  # no known price for the scripted model


def test_runs_list_filters_and_pages(journal: Journal) -> None:
    db = str(journal.db)
    waiting = as_json("runs", "list", "--status", "waiting", "--db", db)["runs"]
    assert {r["id"] for r in waiting} == {journal.waiting, journal.asking}
    either = as_json(
        "runs", "list", "--status", "failed", "--status", "needs_attention", "--db", db
    )
    assert {r["id"] for r in either["runs"]} == {journal.failed, journal.attention}
    assert [r["id"] for r in as_json("runs", "list", "--session", "ask", "--db", db)["runs"]] == [
        journal.asking
    ]
    assert {r["id"] for r in as_json("runs", "list", "--agent", "support", "--db", db)["runs"]} == {
        journal.done,
        journal.waiting,
    }
    assert "no runs with session 'nobody'" in ok("runs", "list", "--session", "nobody", "--db", db)

    first = as_json("runs", "list", "--limit", "2", "--db", db)
    assert len(first["runs"]) == 2 and first["next_cursor"]
    out = ok("runs", "list", "--limit", "2", "--db", db)
    assert f"--after {first['next_cursor']}" in out  # says there is more, and how to get it
    seen = [r["id"] for r in first["runs"]]
    cursor = first["next_cursor"]
    while cursor:
        page = as_json("runs", "list", "--limit", "2", "--after", cursor, "--db", db)
        seen += [r["id"] for r in page["runs"]]
        cursor = page["next_cursor"]
    assert len(seen) == len(set(seen)) == 5


def test_an_unknown_status_is_a_usage_error(journal: Journal) -> None:
    message = error("runs", "list", "--status", "done", "--db", str(journal.db), status=2)
    assert "'done' is not one of" in message
    error("interactions", "list", "--status", "open", "--db", str(journal.db), status=2)
    error("runs", "list", "--limit", "0", "--db", str(journal.db), status=2)
    error("runs", "list", "--after", "abc", "--db", str(journal.db))


def test_the_database_comes_from_stead_db_or_the_current_folder(
    journal: Journal, tmp_path: Path
) -> None:
    via_env = ok("runs", "list", env={"STEAD_DB": str(journal.db)}, cwd=tmp_path)
    assert journal.done in via_env
    message = error("runs", "list", cwd=tmp_path, env={"STEAD_DB": ""})
    assert "stead.db" in message
    shutil.copy(journal.db, tmp_path / "stead.db")
    for suffix in ("-wal", "-shm"):
        if Path(f"{journal.db}{suffix}").exists():
            shutil.copy(f"{journal.db}{suffix}", tmp_path / f"stead.db{suffix}")
    assert journal.done in ok("runs", "list", cwd=tmp_path)


# -- runs show ------------------------------------------------------------------------------


def test_show_has_the_model_text_tool_calls_results_usage_and_cost(journal: Journal) -> None:
    out = ok("runs", "show", journal.done, "--db", str(journal.db))
    assert "status: completed" in out
    assert f"output: {REFUND_TEXT}" in out
    assert 'call refund({"amount": 10, "order_id": "1"})' in out
    assert out.count(REFUND_TEXT) == 2  # the output and the model:2 response
    assert "refunded 10" in out
    assert "null" not in out
    assert "usage:" in out and "cost $0." in out
    assert "approve by ana" in out

    doc = as_json("runs", "show", journal.done, "--db", str(journal.db))
    ops = {op["key"]: op for op in doc["operations"]}
    assert ops["model:1"]["response"] == {
        "text": "",
        "tool_calls": [
            {"id": "c1", "name": "refund", "arguments": {"order_id": "1", "amount": 10}}
        ],
    }
    assert ops["model:2"]["response"]["text"] == REFUND_TEXT
    assert ops["tool:1:c1"]["result"]["output"] == "refunded 10"
    assert doc["output"] == REFUND_TEXT
    assert doc["cost_usd"] > 0 and doc["usage"]["requests"] == 2
    assert doc["next"] == []


def test_show_names_what_a_waiting_run_waits_for_and_the_commands(journal: Journal) -> None:
    db = str(journal.db)
    out = ok("runs", "show", journal.waiting, "--db", db)
    assert "status: waiting" in out
    assert f"waiting for {journal.approval} (approval:1:c1): approval of refund" in out
    assert '{"order_id": "1", "amount": 10}' in out
    assert f"stead approve {journal.approval} --db {db}" in out
    assert f"stead deny {journal.approval} --reason '<why>' --db {db}" in out

    asked = ok("runs", "show", journal.asking, "--db", db)
    assert "Which size?" in asked
    assert f"stead answer {journal.question} '<answer>' --db {db}" in asked


def test_show_names_the_operation_a_run_needs_attention_at(journal: Journal) -> None:
    db = str(journal.db)
    out = ok("runs", "show", journal.attention, "--db", db)
    assert "status: needs_attention" in out
    assert "needs attention at: tool:1:s1" in out
    assert f"stead resolve {journal.attention} tool:1:s1 --output '<json>' --db {db}" in out
    assert f"stead retry {journal.attention} --db {db}" in out
    doc = as_json("runs", "show", journal.attention, "--db", db)
    assert doc["attention_key"] == "tool:1:s1"
    assert doc["reason"]
    assert [s["command"] for s in doc["next"]] == [
        f"stead resolve {journal.attention} tool:1:s1 --output '<json>' --db {db}",
        f"stead retry {journal.attention} --db {db}",
        f"stead cancel {journal.attention} --db {db}",
    ]

    failed = ok("runs", "show", journal.failed, "--db", db)
    assert "status: failed" in failed and "the model is down" in failed
    assert f"stead retry {journal.failed} --db {db}" in failed


def test_show_of_an_unknown_run_says_how_to_find_one(journal: Journal) -> None:
    message = error("runs", "show", "run_nope", "--db", str(journal.db))
    assert "no run 'run_nope'" in message and "stead runs list" in message


# -- runs events ----------------------------------------------------------------------------


def test_events_lists_a_runs_events_and_follows_an_ended_run_to_its_end(journal: Journal) -> None:
    db = str(journal.db)
    out = ok("runs", "events", journal.done, "--db", db)
    for kind in ("submitted", "model_completed", "interaction_responded", "tool_completed"):
        assert kind in out
    events = as_json("runs", "events", journal.done, "--db", db)["events"]
    assert events[0]["kind"] == "submitted"
    assert events[-1]["data"] == {"status": "completed"}
    later = as_json(
        "runs", "events", journal.done, "--after", str(events[2]["sequence"]), "--db", db
    )
    assert later["events"] == events[3:]

    # a run that goes on: without --follow, the events so far, and the command ends
    waiting = as_json("runs", "events", journal.waiting, "--db", db)["events"]
    assert waiting[-1]["data"]["status"] == "waiting"

    followed = ok("runs", "events", journal.done, "--follow", "--json", "--db", db)
    assert [json.loads(line) for line in followed.splitlines()] == events


# -- interactions -------------------------------------------------------------------------


def test_interactions_list_is_the_approval_queue(journal: Journal) -> None:
    db = str(journal.db)
    out = ok("interactions", "list", "--db", db)
    assert journal.approval in out and journal.question in out
    assert "refund" in out and "Which size?" in out
    pending = as_json("interactions", "list", "--db", db)["interactions"]
    assert [(i["interaction_id"], i["kind"], i["tool"], i["arguments"]) for i in pending] == [
        (journal.approval, "approval", "refund", {"order_id": "1", "amount": 10}),
        (journal.question, "question", "ask_user", {"question": "Which size?"}),
    ]
    responded = as_json("interactions", "list", "--status", "responded", "--db", db)
    assert [i["run_id"] for i in responded["interactions"]] == [journal.done]
    assert len(as_json("interactions", "list", "--status", "all", "--db", db)["interactions"]) == 3
    by_run = as_json("interactions", "list", "--run", journal.asking, "--db", db)
    assert [i["interaction_id"] for i in by_run["interactions"]] == [journal.question]
    by_session = as_json("interactions", "list", "--session", "wait", "--db", db)
    assert [i["interaction_id"] for i in by_session["interactions"]] == [journal.approval]
    assert "no cancelled interactions" in ok(
        "interactions", "list", "--status", "cancelled", "--db", db
    )


def test_approve_is_recorded_and_the_next_runtime_completes_the_run(fresh: Journal) -> None:
    db = str(fresh.db)
    out = ok("approve", fresh.approval, "--reviewer", "ana", "--note", "ok by policy", "--db", db)
    assert f"approved {fresh.approval}" in out and "pending" in out
    assert status(fresh.db, fresh.waiting) == "pending"
    again = as_json(
        "approve", fresh.approval, "--reviewer", "ana", "--note", "ok by policy", "--db", db
    )
    assert again["changed"] is False
    assert again["interaction"]["response"] == {
        "kind": "approve",
        "reviewer": "ana",
        "note": "ok by policy",
    }
    message = error("deny", fresh.approval, "--reason", "changed my mind", "--db", db)
    assert "already answered differently" in message

    outcome, calls = finish(fresh.db, fresh.waiting)
    assert outcome.output == REFUND_TEXT
    assert calls == [f"{fresh.waiting}/tool:1:c1"]


def test_deny_is_recorded_and_the_tool_never_runs(fresh: Journal) -> None:
    doc = as_json("deny", fresh.approval, "--reason", "too much", "--db", str(fresh.db))
    assert doc["changed"] is True
    assert doc["interaction"]["response"] == {
        "kind": "deny",
        "reason": "too much",
        "reviewer": None,
    }
    assert doc["run"]["status"] == "pending"
    outcome, calls = finish(fresh.db, fresh.waiting)
    assert calls == []
    assert outcome.output == REFUND_TEXT  # the scripted model answers regardless


def test_answer_parses_json_else_takes_text(fresh: Journal) -> None:
    doc = as_json("answer", fresh.question, '{"size": "L"}', "--db", str(fresh.db))
    assert doc["interaction"]["response"]["value"] == {"size": "L"}
    assert parse_value("L") == "L"
    assert parse_value("42") == 42
    assert parse_value('"42"') == "42"
    assert parse_value("[1, 2") == "[1, 2"


def test_answer_is_recorded_and_the_next_runtime_completes_the_run(fresh: Journal) -> None:
    out = ok("answer", fresh.question, "large", "--reviewer", "sam", "--db", str(fresh.db))
    assert f"answered {fresh.question}" in out
    outcome, _ = finish(fresh.db, fresh.asking)
    assert outcome.output == "Noted."


def test_a_response_of_the_wrong_kind_says_which_command_fits(fresh: Journal) -> None:
    db = str(fresh.db)
    assert f"stead answer {fresh.question} VALUE" in error("approve", fresh.question, "--db", db)
    assert f"stead approve {fresh.approval}" in error("answer", fresh.approval, "x", "--db", db)
    assert "no interaction 'int_nope'" in error("approve", "int_nope", "--db", db)
    assert "--reason" in error("deny", fresh.approval, "--db", db, status=2)
    assert status(fresh.db, fresh.waiting) == "waiting"  # nothing was recorded


# -- resolve, retry, cancel, fork ------------------------------------------------------------


def test_resolve_supplies_the_result_and_the_run_goes_on(fresh: Journal) -> None:
    db = str(fresh.db)
    out = ok("resolve", fresh.attention, "tool:1:s1", "--output", '"shipped by hand"', "--db", db)
    assert "resolved tool:1:s1" in out and "pending" in out
    assert status(fresh.db, fresh.attention) == "pending"
    outcome, calls = finish(fresh.db, fresh.attention)
    assert outcome.output == "Shipped."
    assert calls == []  # the manual tool did not run again


def test_resolve_errors(fresh: Journal) -> None:
    db = str(fresh.db)
    malformed = error(
        "resolve", fresh.attention, "tool:1:s1", "--output", "{shipped", "--db", db, status=2
    )
    assert "not JSON" in malformed
    error("resolve", fresh.attention, "tool:1:s1", "--db", db, status=2)  # --output is required
    unknown = error("resolve", fresh.attention, "tool:9:x", "--output", "1", "--db", db)
    assert "has no operation 'tool:9:x'" in unknown and "tool:1:s1" in unknown
    wrong = error("resolve", fresh.done, "tool:1:c1", "--output", "1", "--db", db)
    assert "already has a result" in wrong
    error(
        "resolve",
        fresh.attention,
        "tool:1:s1",
        "--output",
        "1",
        "--timeout",
        "0",
        "--db",
        db,
        status=2,
    )
    assert status(fresh.db, fresh.attention) == "needs_attention"


def test_retry_continues_a_failed_or_needs_attention_run(fresh: Journal) -> None:
    db = str(fresh.db)
    assert "retried" in ok("retry", fresh.failed, "--db", db)
    doc = as_json("retry", fresh.attention, "--db", db)
    assert doc["run"]["status"] == "pending"
    assert status(fresh.db, fresh.failed) == "pending"
    message = error("retry", fresh.done, "--db", db)
    assert "only failed and needs_attention runs can be retried" in message


def test_cancel_ends_a_waiting_run_for_good(fresh: Journal) -> None:
    db = str(fresh.db)
    out = ok("cancel", fresh.waiting, "--reason", "customer withdrew", "--db", db)
    assert f"cancelled run {fresh.waiting}" in out
    shown = as_json("runs", "show", fresh.waiting, "--db", db)
    assert shown["run"]["status"] == "cancelled"
    assert shown["reason"] == "customer withdrew"
    assert shown["interactions"][0]["status"] == "cancelled"
    assert as_json("cancel", fresh.waiting, "--db", db)["changed"] is False
    assert "already ended completed" in error("cancel", fresh.done, "--db", db)
    assert "was cancelled" in error("approve", fresh.approval, "--db", db)


def test_fork_prints_the_new_run_which_the_next_runtime_runs(fresh: Journal) -> None:
    db = str(fresh.db)
    new_id = ok("fork", fresh.done, "--before", "model:2", "--db", db).strip()
    assert new_id.startswith("run_") and new_id != fresh.done
    assert ok("fork", fresh.done, "--before", "model:2", "--db", db).strip() == new_id
    shown = as_json("runs", "show", new_id, "--db", db)
    assert shown["run"]["status"] == "pending"
    assert [op["key"] for op in shown["operations"]] == ["model:1", "tool:1:c1"]
    outcome, calls = finish(fresh.db, new_id)
    assert outcome.output == REFUND_TEXT
    assert calls == []  # the refund was reused from the source run, not done again
    doc = as_json("fork", fresh.done, "--before", "model:1", "--session", "retry-1", "--db", db)
    assert doc["run"]["session_id"] == "retry-1" and doc["forked_from"] == fresh.done
    assert "has no operation 'model:9'" in error(
        "fork", fresh.done, "--before", "model:9", "--db", db
    )


# -- databases the CLI cannot use ----------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [["runs", "list"], ["runs", "events", "run_x"], ["approve", "int_x"]],
)
def test_a_missing_database_is_one_line_and_creates_nothing(
    tmp_path: Path, args: list[str]
) -> None:
    message = error(*args, "--db", str(tmp_path / "missing.db"))
    assert "no stead database at" in message
    assert list(tmp_path.iterdir()) == []
    assert "does not exist" in error(*args, "--db", str(tmp_path / "no" / "such.db"))


@pytest.fixture
def old_journal(tmp_path: Path) -> Iterator[Path]:
    folder = tmp_path / "old"
    folder.mkdir()
    shutil.copy(V1_FIXTURE, folder / "journal.sqlite")
    yield folder / "journal.sqlite"


@pytest.mark.parametrize(
    "args",
    [
        ["runs", "show", "run_x"],
        ["runs", "events", "run_x", "--follow"],
        ["interactions", "list", "--json"],
        ["approve", "int_x"],
    ],
)
def test_an_older_database_says_what_to_do_and_is_left_as_it_is(
    old_journal: Path, args: list[str]
) -> None:
    before = files_of(old_journal.parent)
    message = error(*args, "--db", str(old_journal))
    assert "older stead" in message and "App.open" in message
    assert files_of(old_journal.parent) == before
