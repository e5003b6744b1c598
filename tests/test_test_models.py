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
