"""The test models of stead.testing: what they keep of the requests they were sent."""

from __future__ import annotations

import pytest

import stead
from stead.testing import FunctionModel, ScriptedModel


async def _serve(model: stead.Model, runs: int, db: str) -> None:
    agent = stead.Agent(id="a", version="1", model=model, instructions="be brief")
    async with await stead.App(agents=[agent]).open(stead.SqliteStore(db)) as runtime:
        for n in range(runs):
            handle = await runtime.submit("a", session_id=f"s{n}", request_id="r", prompt=f"p{n}")
            assert (await handle.result()).output == "done"


def _prompts(model: ScriptedModel | FunctionModel) -> list[str]:
    prompts = []
    for request in model.requests:
        message = request.messages[-1]
        assert isinstance(message, stead.UserMessage)
        prompts.append(message.content)
    return prompts


@pytest.mark.parametrize("kind", ["scripted", "function"])
async def test_a_test_model_keeps_only_its_latest_requests(kind: str, db: str) -> None:
    model: ScriptedModel | FunctionModel
    if kind == "scripted":
        model = ScriptedModel(["done"], keep_requests=2)
    else:
        model = FunctionModel(lambda request: "done", keep_requests=2)
    await _serve(model, 5, db)
    assert _prompts(model) == ["p3", "p4"]  # oldest first, the three before let go


async def test_by_default_a_test_model_keeps_a_thousand_requests(db: str) -> None:
    model = ScriptedModel(["done"])
    await _serve(model, 3, db)
    assert _prompts(model) == ["p0", "p1", "p2"]
    assert model.keep_requests == 1_000


async def test_keep_requests_none_keeps_every_request(db: str) -> None:
    model = FunctionModel(lambda request: "done", keep_requests=None)
    await _serve(model, 3, db)
    assert _prompts(model) == ["p0", "p1", "p2"]
    assert model.keep_requests is None


@pytest.mark.parametrize("bad", [-1, 1.5, "10", True])
def test_keep_requests_must_be_a_count(bad: object) -> None:
    for make in (
        lambda: ScriptedModel(["done"], keep_requests=bad),  # type: ignore[arg-type]
        lambda: FunctionModel(lambda request: "done", keep_requests=bad),  # type: ignore[arg-type]
    ):
        with pytest.raises(stead.ValidationError) as caught:
            make()
        assert str(caught.value) == (
            f"keep_requests must be a count >= 0 or None (keep every request), not {bad!r}"
        )


async def test_keep_requests_zero_keeps_none(db: str) -> None:
    model = ScriptedModel(["done"], keep_requests=0)
    await _serve(model, 2, db)
    assert model.requests == []


@pytest.mark.parametrize("bad", [["not a call"], [stead.ToolCall(name="t"), 3]])
def test_a_scripted_turn_of_the_wrong_kind_is_refused_when_the_script_is_written(
    bad: list[object],
) -> None:
    with pytest.raises(stead.ValidationError) as caught:
        ScriptedModel(["first", bad])  # type: ignore[list-item]
    assert str(caught.value) == (
        "a scripted turn is a str, a list of stead.ToolCall or a ModelResponse; got an item "
        f"{bad[-1]!r}"
    )


async def test_a_scripted_model_answers_each_turn_as_written() -> None:
    given = stead.ModelResponse(text="as given", model="m")
    model = ScriptedModel(
        [
            [stead.ToolCall(name="t", arguments={"a": 1}), stead.ToolCall(name="t", id="mine")],
            given,
            "the end of it",
        ],
    )
    messages = (stead.UserMessage("hi"),)
    first = await model.complete(stead.ModelRequest(messages=messages, instructions="x" * 8))
    assert first.tool_calls == (
        stead.ToolCall(name="t", arguments={"a": 1}, id="call_1_1"),
        stead.ToolCall(name="t", id="mine"),
    )
    assert first.usage == stead.Usage(input_tokens=14, output_tokens=16)
    assert first.finish_reason == "tool_calls"
    assert await model.complete(stead.ModelRequest(messages=messages, turn=2)) is given
    last = await model.complete(stead.ModelRequest(messages=messages * 3, turn=3))
    assert (last.text, last.usage, last.finish_reason) == (
        "the end of it",
        stead.Usage(input_tokens=36, output_tokens=3),
        "stop",
    )
    with pytest.raises(stead.ValidationError, match="ScriptedModel has 3 turns; it was asked"):
        await model.complete(stead.ModelRequest(messages=messages, turn=4))
