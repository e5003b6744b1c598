"""A session's history is built from the operations of the runs it continues: every message is
in the journal once (prompt in the run, responses and tool results in operation results), and
the next run, a fork and result() all see the same conversation."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import stead
from stead.testing import FunctionModel

from .test_journal_fixture import FIXTURE_V3


def _echo_app(seen: list[int]) -> stead.App:
    @stead.tool(recovery="safe")
    def shout(text: str) -> dict[str, str]:
        """Shout."""
        return {"loud": text.upper()}

    def answer(request: stead.ModelRequest) -> stead.ModelResponse | str:
        seen.append(len(request.messages))
        last = request.messages[-1]
        if isinstance(last, stead.UserMessage):
            return stead.ModelResponse(
                tool_calls=(stead.ToolCall(name="shout", arguments={"text": last.content}),)
            )
        return f"heard {len(request.messages)} messages"

    agent = stead.Agent(id="echo", version="1", model=FunctionModel(answer), tools=[shout])
    return stead.App(agents=[agent])


async def test_each_run_of_a_session_sees_the_whole_conversation(tmp_path: Path) -> None:
    db = tmp_path / "stead.db"
    seen: list[int] = []
    async with await _echo_app(seen).open(stead.SqliteStore(db)) as runtime:
        outcomes = []
        for n in range(3):
            run = await runtime.submit("echo", session_id="s", request_id=f"r{n}", prompt=f"m{n}")
            outcomes.append(await run.result())
        # each run adds 4 messages: prompt, tool call, tool result, answer
        assert seen == [1, 3, 5, 7, 9, 11]
        assert [len(o.messages) for o in outcomes] == [4, 4, 4]
        snapshot = await runtime.get_run(outcomes[2].run_id).snapshot()
        messages = snapshot.checkpoint.messages
        assert len(messages) == 12
        assert [m.content for m in messages if isinstance(m, stead.UserMessage)] == [
            "m0",
            "m1",
            "m2",
        ]
        assert list(messages[8:]) == list(outcomes[2].messages)
        third = await runtime.get_run(outcomes[2].run_id).run()
        assert third.history_run == outcomes[1].run_id and third.history_length == 8
    conn = sqlite3.connect(db)
    # nothing is stored twice: only the agent's instructions and tool specs are a blob
    assert conn.execute("SELECT COUNT(*) FROM stead_history").fetchone()[0] == 0
    assert conn.execute("SELECT COUNT(*) FROM stead_blobs").fetchone()[0] == 1
    # a tool operation keeps its result; its arguments are in the model's message only
    inputs = [r[0] for r in conn.execute("SELECT input FROM stead_operations WHERE kind = 'tool'")]
    conn.close()
    assert inputs and all('"arguments"' not in text for text in inputs)


async def test_a_fork_continues_the_session_history_of_its_source(tmp_path: Path) -> None:
    seen: list[int] = []
    async with await _echo_app(seen).open(stead.SqliteStore(tmp_path / "stead.db")) as runtime:
        first = await runtime.submit("echo", session_id="s", request_id="r1", prompt="one")
        await first.result()
        second = await runtime.submit("echo", session_id="s", request_id="r2", prompt="two")
        await second.result()
        seen.clear()
        fork = await runtime.fork(second.id, before="model:2", session_id="f", request_id="f1")
        outcome = await fork.result()
        # the fork replays model:1 and the tool, then asks model:2 with the whole history
        assert seen == [7]
        assert outcome.output == "heard 7 messages"
        messages = (await fork.snapshot()).checkpoint.messages
        assert len(messages) == 8


async def test_a_session_recorded_by_schema_3_continues(tmp_path: Path) -> None:
    """The history of a run finished before the upgrade is its stored chain; a run that
    finished after it mixes stored and rebuilt messages; both continue into a new run."""
    from .fixtures import journal_v3_app

    db = tmp_path / "journal.sqlite"
    db.write_bytes(FIXTURE_V3.read_bytes())
    journal_v3_app.LEDGER.clear()
    async with await journal_v3_app.build_app().open(stead.SqliteStore(db)) as runtime:
        for session in ("fixture-done", "fixture-crash"):
            (previous,) = (await runtime.list_runs(session_id=session)).runs
            before = await runtime.get_run(previous.id).result(timeout=10)
            earlier = (await runtime.get_run(previous.id).snapshot()).checkpoint.messages
            assert list(earlier[-len(before.messages) :]) == list(before.messages)
            follow = await runtime.submit(
                "support", session_id=session, request_id="msg-2", prompt="Thanks."
            )
            assert (await follow.result(timeout=10)).output == "Refunded 49.00 for order 17."
            messages = (await follow.snapshot()).checkpoint.messages
            assert list(messages[: len(earlier)]) == list(earlier)
            assert messages[len(earlier)] == stead.UserMessage("Thanks.")


_AWKWARD = [
    "",
    "plain",
    'quote " and backslash \\ and slash /',
    "line\nbreak\ttab\r\x00\x1f\x7f",
    "accents é ü, CJK 漢字, emoji 🧪",
    "half of an emoji \ud83e",
    "\u2028\u2029",
]


def test_texts_written_around_their_strings_are_the_canonical_json() -> None:
    """A model call's input, a tool result's message body and what a tool operation keeps of
    its input are written around their strings instead of encoded; they must be byte for byte
    what the encoder gives (the input's digest is what replay compares, the body's links the
    conversation's history chain)."""
    from stead._json import canonical
    from stead.agent.history import tool_result_body
    from stead.agent.loop import model_input, stored_tool_input
    from stead.messages import ToolResultMessage, message_to_json

    for text in _AWKWARD:
        for head in (None, text):
            for length, turn in ((0, 1), (7, 12), (10**12, 3)):
                messages = {"head": head, "length": length}
                written = {"model": text, "context": "ab" * 32, "messages": messages, "turn": turn}
                assert model_input(text, "ab" * 32, messages, turn) == canonical(written)
        for other in ("c1", text):
            assert stored_tool_input(text, other) == canonical({"tool": text, "call_id": other})
            for failed in (False, True):
                message = ToolResultMessage(
                    call_id=other, name=text, content=text + other, is_error=failed
                )
                assert tool_result_body(message) == canonical(message_to_json(message))
