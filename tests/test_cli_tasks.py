"""The ``stead`` command on task and graph runs, run as a real process: ``submit-task``,
``signal``, ``tasks``, ``graphs`` and the tree ``runs show`` prints of the runs a task owns —
against a database no runtime holds open, and against a runtime that owns it in another
process."""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

import stead
from stead.cli import main

from ._processes import JsonLinesChild
from ._task_app import app, graph_nodes, waiting_graph_nodes
from .test_cli import as_json, error, ok, until

TASK_APP = Path(__file__).with_name("_task_app.py")


@dataclass(frozen=True)
class Journal:
    """A database holding task and graph runs in the states the CLI shows."""

    db: Path
    done: str  # a triage that completed: a child agent, and a child task with its own child
    waiting: str  # a triage waiting for its manager signal
    graph: str  # a graph that completed
    stuck: str  # a graph waiting on its first node, so its second never started
    agent: str  # a plain agent run


async def build(db: Path) -> Journal:
    async with await app.open(stead.SqliteStore(db)) as runtime:
        done = await runtime.submit_task("triage", "T-1", session_id="done", request_id="r")
        await until(done, stead.RunStatus.WAITING)
        await done.signal("manager", {"ok": True}, request_id="m1")
        await done.result(timeout=10)
        waiting = await runtime.submit_task("triage", "T-2", session_id="wait", request_id="r")
        await until(waiting, stead.RunStatus.WAITING)
        graph = await runtime.submit_graph(graph_nodes(), session_id="graph", request_id="r")
        await graph.result(timeout=10)
        stuck = await runtime.submit_graph(
            waiting_graph_nodes(), session_id="stuck", request_id="r"
        )
        await until(stuck, stead.RunStatus.WAITING)
        agent = await runtime.submit("summarizer", session_id="agent", request_id="r", prompt="hi")
        await agent.result(timeout=10)
    return Journal(db, done.id, waiting.id, graph.id, stuck.id, agent.id)


@pytest.fixture(scope="module")
def journal(tmp_path_factory: pytest.TempPathFactory) -> Journal:
    return asyncio.run(build(tmp_path_factory.mktemp("cli-tasks") / "stead.db"))


@pytest.fixture
def fresh(journal: Journal, tmp_path: Path) -> Journal:
    """A copy of the journal a test may change (no process has it open)."""
    for suffix in ("", "-wal", "-shm"):
        source = Path(f"{journal.db}{suffix}")
        if source.exists():
            shutil.copy(source, tmp_path / f"stead.db{suffix}")
    return Journal(**{**journal.__dict__, "db": tmp_path / "stead.db"})


def finish(db: Path, run_id: str) -> stead.RunOutcome:
    """Open the database with a runtime, as a deployment would, and let the run finish."""

    async def go() -> stead.RunOutcome:
        async with await app.open(stead.SqliteStore(db)) as runtime:
            return await runtime.get_run(run_id).result(timeout=10)

    return asyncio.run(go())


def record(db: Path, run_id: str) -> stead.Run:
    async def read() -> stead.Run:
        async with stead.Client(stead.SqliteStore(db)) as client:
            return await client.run_record(run_id)

    return asyncio.run(read())


def wait_status(db: Path, run_id: str, wanted: stead.RunStatus, within: float = 10) -> None:
    start = time.monotonic()
    while (seen := record(db, run_id).status) is not wanted:
        assert time.monotonic() - start < within, f"run is {seen}, not {wanted}, after {within}s"
        time.sleep(0.02)


# -- the commands themselves -------------------------------------------------------------------


def test_help_lists_the_task_commands_and_each_takes_db_and_json() -> None:
    out = ok("--help")
    for words in ("stead submit-task TASK", "stead signal RUN_ID NAME", "stead tasks", "graphs"):
        assert words in out
    runner = CliRunner()
    for path in (["submit-task"], ["signal"], ["tasks"], ["graphs"], ["graphs", "show"]):
        result = runner.invoke(main, [*path, "--help"])
        assert result.exit_code == 0, path
        assert "--db" in result.output and "STEAD_DB" in result.output, path
        assert "--json" in result.output, path


# -- submit-task -------------------------------------------------------------------------------


def test_submit_task_is_pending_until_a_runtime_runs_it(fresh: Journal) -> None:
    db = str(fresh.db)
    submit = ("submit-task", "echo", "--session", "new", "--request", "r1", "--db", db)
    run_id = ok(*submit, "--input", '{"a": [1, "two"]}', "--version", "1").strip()
    assert run_id.startswith("run_")
    shown = as_json("runs", "show", run_id, "--db", db)
    assert shown["run"]["status"] == "pending"
    assert (shown["run"]["kind"], shown["run"]["agent_id"]) == ("task", "echo")
    assert shown["operations"] == [] and shown["children"] == []
    assert "it starts when a runtime that registers task echo version 1" in ok(
        "runs", "show", run_id, "--db", db
    )
    # the same submission again is the same run; --json says so too
    again = as_json(*submit, "--input", '{"a": [1, "two"]}', "--version", "1")
    assert again["run_id"] == run_id and again["run"]["status"] == "pending"
    # a different one under the same request id is a conflict
    assert "different submission" in error(*submit, "--input", "2", "--version", "1")
    # with no runtime to pick the latest version, the command says which option to pass
    said = error("submit-task", "echo", "--session", "x", "--request", "r", "--db", db)
    assert "pass --version V" in said and "task 'echo'" in said
    assert "version=..." not in said  # the library's spelling is not the CLI's

    assert finish(fresh.db, run_id).output == {"a": [1, "two"]}
    assert as_json("runs", "show", run_id, "--db", db)["run"]["status"] == "completed"


def test_bad_input_json_is_a_usage_error_naming_the_option(fresh: Journal) -> None:
    db = str(fresh.db)
    submit = ("submit-task", "echo", "--session", "s", "--request", "r", "--db", db)
    for bad in ("T-3", "[1,"):
        err = error(*submit, "--input", bad, status=2)
        assert "Invalid value for '--input'" in err and "not JSON" in err
    send = ("signal", fresh.waiting, "manager", "--request-id", "i", "--db", db)
    err = error(*send, "--value", "yes", status=2)
    assert "Invalid value for '--value'" in err
    assert as_json("tasks", "--session", "s", "--db", db)["runs"] == []  # nothing submitted


def test_a_task_submitted_to_a_live_owner_runs_and_takes_a_signal(tmp_path: Path) -> None:
    db = tmp_path / "stead.db"
    owner = JsonLinesChild([sys.executable, str(TASK_APP), str(db)])
    try:
        owner.expect("ready")
        # no --version: the owner picks the latest registered one
        submit = ("submit-task", "triage", "--session", "t", "--request", "r", "--db", str(db))
        run_id = ok(*submit, "--input", '"T-5"').strip()
        wait_status(db, run_id, stead.RunStatus.WAITING)
        out = ok(
            "signal", run_id, "manager", "--value", '"go"', "--request-id", "m", "--db", str(db)
        )
        assert f"delivered signal 'manager' to run {run_id} with value \"go\"" in out
        wait_status(db, run_id, stead.RunStatus.COMPLETED)
        shown = as_json("runs", "show", run_id, "--db", str(db))
        assert shown["output"]["decision"] == "go"
        assert [c["key"] for c in shown["children"]] == ["agent:summarizer", "task:critic"]
    finally:
        owner.stop()


# -- signal ------------------------------------------------------------------------------------


def test_signal_new_duplicate_conflict_and_ended(fresh: Journal) -> None:
    db = str(fresh.db)
    send = ("signal", fresh.waiting, "manager", "--request-id", "m1", "--db", db)
    out = ok(*send, "--value", '{"approved": true}')
    assert f"delivered signal 'manager' to run {fresh.waiting} with value" in out
    assert '{"approved": true}' in out
    assert "is pending" in out and "it continues when a runtime runs it" in out

    again = as_json(*send, "--value", '{"approved": true}')
    assert again["changed"] is False and again["run"]["status"] == "pending"
    assert "was already delivered" in ok(*send, "--value", '{"approved": true}')

    err = error(*send, "--value", '{"approved": false}')
    assert "already delivered signal 'manager'" in err and "different value" in err
    err = error("signal", fresh.done, "manager", "--request-id", "late", "--db", db)
    assert f"run {fresh.done} already ended completed" in err
    err = error("signal", fresh.agent, "manager", "--request-id", "x", "--db", db)
    assert "signals go to task runs" in err
    err = error("signal", "run_nope", "manager", "--request-id", "x", "--db", db)
    assert "no run 'run_nope'" in err

    # the next runtime continues the run with the signal that was delivered, once
    outcome = finish(fresh.db, fresh.waiting)
    assert outcome.output["decision"] == {"approved": True}


# -- tasks and graphs ------------------------------------------------------------------------


def test_tasks_lists_task_runs_only_with_filters(journal: Journal) -> None:
    db = str(journal.db)
    listed = as_json("tasks", "--db", db)["runs"]
    assert {run["kind"] for run in listed} == {"task"}
    ids = [run["id"] for run in listed]
    assert journal.done in ids and journal.waiting in ids and journal.agent not in ids
    critics = as_json("tasks", "--task", "critic", "--db", db)["runs"]
    assert len(critics) == 1 and critics[0]["parent_id"] is not None
    assert critics[0]["request_id"] == "task:critic"
    waiting = as_json("tasks", "--status", "waiting", "--task", "triage", "--db", db)["runs"]
    assert {run["id"] for run in waiting} >= {journal.waiting}
    assert journal.done not in {run["id"] for run in waiting}
    owned = as_json("tasks", "--parent", journal.stuck, "--db", db)["runs"]
    assert [run["request_id"] for run in owned] == ["node:wait"]

    first = as_json("tasks", "--limit", "1", "--db", db)
    assert len(first["runs"]) == 1 and first["next_cursor"] is not None
    second = as_json("tasks", "--limit", "1", "--after", first["next_cursor"], "--db", db)
    assert second["runs"][0]["id"] != first["runs"][0]["id"]

    out = ok("tasks", "--task", "triage", "--db", db)
    assert "task" in out.splitlines()[1] and "triage@1" in out and journal.waiting in out
    assert "summarizer" not in out
    assert f"no task runs with task 'nope' in {db}" in ok("tasks", "--task", "nope", "--db", db)
    assert "Invalid value for '--status'" in error(
        "tasks", "--status", "asleep", "--db", db, status=2
    )


def test_graphs_list_and_show_each_node(journal: Journal) -> None:
    db = str(journal.db)
    listed = {run["id"]: run for run in as_json("graphs", "--db", db)["runs"]}
    assert set(listed) == {journal.graph, journal.stuck}
    assert (listed[journal.graph]["nodes"], listed[journal.graph]["nodes_completed"]) == (2, 2)
    assert (listed[journal.stuck]["nodes"], listed[journal.stuck]["nodes_completed"]) == (2, 0)
    out = ok("graphs", "--status", "waiting", "--db", db)
    assert journal.stuck in out and journal.graph not in out and "0/2" in out

    shown = as_json("graphs", "show", journal.stuck, "--db", db)
    wait, then = shown["nodes"]
    assert (wait["id"], wait["kind"], wait["definition"], wait["depends_on"]) == (
        "wait",
        "task",
        "triage",
        [],
    )
    assert wait["status"] == "waiting" and wait["run_id"].startswith("run_")
    assert (then["id"], then["definition"], then["depends_on"]) == ("then", "echo", ["wait"])
    assert then["status"] == "not started" and then["run_id"] is None

    out = ok("graphs", "show", journal.stuck, "--db", db)
    row = next(text for text in out.splitlines() if text.lstrip().startswith("then"))
    assert "task echo" in row and "wait" in row and "not started" in row
    row = next(text for text in out.splitlines() if text.lstrip().startswith("wait "))
    assert wait["run_id"] in row and "waiting" in row

    done = as_json("graphs", "show", journal.graph, "--db", db)
    assert [node["status"] for node in done["nodes"]] == ["completed", "completed"]
    assert done["output"]["draft"] == "A short summary."

    assert "is a task run, not a graph" in error("graphs", "show", journal.done, "--db", db)
    assert "takes its own options" in error("graphs", "--db", db, "show", journal.graph, status=2)


# -- runs show ---------------------------------------------------------------------------------


def test_runs_show_of_a_task_has_its_operations_and_its_children_as_a_tree(
    journal: Journal,
) -> None:
    db = str(journal.db)
    shown = as_json("runs", "show", journal.done, "--db", db)
    assert [(op["key"], op["kind"]) for op in shown["operations"]] == [
        ("fetch", "step"),
        ("signal:manager", "signal"),
        ("agent:summarizer", "child"),
        ("task:critic", "child"),
    ]
    summarizer, critic = shown["children"]
    assert (summarizer["key"], summarizer["kind"], summarizer["definition"]) == (
        "agent:summarizer",
        "agent",
        "summarizer",
    )
    assert summarizer["status"] == "completed" and summarizer["output"] == "A short summary."
    assert (critic["key"], critic["kind"], critic["parent_id"]) == (
        "task:critic",
        "task",
        journal.done,
    )
    (nested,) = critic["children"]
    assert (nested["key"], nested["kind"], nested["children"]) == ("agent:summarizer", "agent", [])
    assert shown["output"]["critic"] == {"review": "A short summary.", "length": 16}

    out = ok("runs", "show", journal.done, "--db", db)
    assert "runs it owns:" in out
    lines = out.splitlines()
    ops = {
        text.split()[0]: text for text in lines if text.startswith(" ") and len(text.split()) > 3
    }
    assert "step" in ops["fetch"] and "the body of T-1" in ops["fetch"]
    assert '{"ok": true} (request m1)' in ops["signal:manager"]
    assert "completed → A short summary." in ops["agent:summarizer"]
    tree = lines[lines.index("runs it owns:") + 1 :]
    assert tree[0].startswith(journal.done) and "task triage@1" in tree[0]
    critic_line = next(text for text in tree if "task:critic" in text)
    nested_line = next(text for text in tree if nested["run_id"] in text)
    assert critic_line.startswith("└── task:critic  " + critic["run_id"])
    assert nested_line.index("agent:summarizer") > critic_line.index("task:critic")

    # an agent child still shows as an agent run: its conversation, usage and cost
    child = ok("runs", "show", summarizer["run_id"], "--db", db)
    assert "usage:" in child and "model:1" in child


def test_runs_show_of_a_waiting_task_says_which_signal_and_how_to_send_it(
    journal: Journal,
) -> None:
    db = str(journal.db)
    out = ok("runs", "show", journal.waiting, "--db", db)
    assert "waiting for:\n  signal 'manager' (at signal:manager)" in out
    command = (
        f"stead signal {journal.waiting} manager --value '<json>' --request-id '<id>' --db {db}"
    )
    assert command in out
    shown = as_json("runs", "show", journal.waiting, "--db", db)
    assert [(w["key"], w["kind"]) for w in shown["waiting_for"]] == [("signal:manager", "signal")]
    assert command in [step["command"] for step in shown["next"]]

    # a graph's nodes are its children; a node's own wait shows in the tree
    graph = as_json("runs", "show", journal.stuck, "--db", db)
    (node,) = graph["children"]
    assert node["key"] == "node:wait" and node["status"] == "waiting"
    assert node["waiting_for"][0]["key"] == "signal:manager"
    out = ok("runs", "show", journal.stuck, "--db", db)
    row = next(text for text in out.splitlines() if "node:wait" in text and "└──" in text)
    assert row.endswith("waiting  waiting for signal 'manager'")


def test_journal_text_of_a_task_reaches_the_terminal_inert(fresh: Journal) -> None:
    db = str(fresh.db)
    hostile = "\x1b[2J\x1b]0;pwned\x07\u202e"
    submit = ("submit-task", "echo", "--session", "e", "--request", "r", "--version", "1")
    run_id = ok(*submit, "--input", json.dumps(hostile), "--db", db).strip()
    finish(fresh.db, run_id)
    out = ok("runs", "show", run_id, "--db", db)
    assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out
    assert "\\x1b[2J\\x1b]0;pwned\\x07\\u202e" in out  # shown as visible escapes


def test_runs_events_of_a_task_reads_as_its_steps_signals_and_children(journal: Journal) -> None:
    out = ok("runs", "events", journal.done, "--db", str(journal.db))
    assert "effect_completed" in out and "signal_received" in out
    assert "manager #1 (request m1)" in out
    assert "child_started" in out and "child_completed" in out
    assert " → completed" in out


def test_runs_events_say_when_a_newer_version_took_a_run_over(tmp_path: Path) -> None:
    @stead.task(name="job", version=1)
    async def job_v1(ctx: stead.TaskContext, n: int) -> int:
        await ctx.wait_for_signal("go")
        return n

    @stead.task(name="job", version=2, migrate=lambda version, n: n + 100)
    async def job_v2(ctx: stead.TaskContext, n: int) -> int:
        await ctx.wait_for_signal("go")
        return n

    async def make(db: Path) -> str:
        async with await stead.App(tasks=[job_v1]).open(stead.SqliteStore(db)) as runtime:
            run = await runtime.submit_task("job", 1, session_id="s", request_id="r")
            await until(run, stead.RunStatus.WAITING)
        async with await stead.App(tasks=[job_v2]).open(stead.SqliteStore(db)) as runtime:
            await runtime.get_run(run.id).signal("go", True, request_id="g")
            assert (await runtime.get_run(run.id).result(timeout=10)).output == 101
        return run.id

    db = tmp_path / "versions.db"
    run_id = asyncio.run(make(db))
    assert "running, migrated from version 1" in ok("runs", "events", run_id, "--db", str(db))
    shown = as_json("runs", "show", run_id, "--db", str(db))["run"]
    assert (shown["version"], shown["input"]) == ("2", {"input": 101})
