"""Odd data in every field a model, a tool or a caller controls.

Lone surrogates, NaN and infinities, ``None`` where a dict or a str belongs, huge integers, deeply
nested lists, rich markup, terminal escapes, control characters, 100 KB strings, non-string keys
and values that are not JSON must never crash, hang, loop or poison the runtime: a caller gets a
:class:`stead.SteadError`, and every run ends in a recorded state with a reason.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import stead
from stead._json import MAX_DEPTH, NotJSONError, check
from stead.testing import FakeClock, FunctionModel, ScriptedModel

S = stead.RunStatus
#: Where a run may rest once the runtime is done with it (a FakeClock keeps retry_wait put).
RECORDED = {S.COMPLETED, S.FAILED, S.NEEDS_ATTENTION, S.WAITING, S.RETRY_WAIT}
SETTLE_SECONDS = 10.0
MAX_TURNS = 3
RETRY = stead.RetryPolicy(max_attempts=3, initial_delay=1, max_delay=5)
TOOL_ATTEMPTS = 2

ODD_SETTINGS = settings(
    max_examples=30,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


# -- odd values ----------------------------------------------------------------------------------


class Odd:
    """A drawn value with a short label, so a falsifying example prints legibly (a plain class:
    Hypothesis would print a dataclass field by field, 5000 digits and 1000 brackets deep)."""

    __slots__ = ("label", "value")

    def __init__(self, label: str, value: Any) -> None:
        self.label = label
        self.value = value

    def __repr__(self) -> str:
        return self.label


def _deep(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth - 1):
        value = [value]
    return value


TEXT_ATOMS = [
    Odd("high-surrogate", "\ud83d"),
    Odd("low-surrogate", "\udc80"),
    Odd("split-pair", "\ud83d" + "\ude00"),
    Odd("rich-close", "[/]"),
    Odd("rich-link", "[link=https://x/]y[/link]"),
    Odd("term-escapes", "\x1b]0;t\x07\x1b[2J"),
    Odd("NUL", "\x00"),
    Odd("controls", "\x01\x08\x0b\r\x7f\x85\x9f\u2028\u202e"),
    Odd("100KB", "x" * 100_000),
    Odd("empty", ""),
    Odd("blank", " \t\n"),
    Odd("emoji", "\U0001f600"),
    Odd("plain", "ok"),
]

VALUE_ATOMS = [
    Odd("nan", float("nan")),
    Odd("inf", float("inf")),
    Odd("-inf", float("-inf")),
    Odd("None", None),
    Odd("10**5000", 10**5000),
    Odd("2**64", 2**64),
    Odd("-1", -1),
    Odd("1.5", 1.5),
    Odd("True", True),
    Odd("deep-list-1000", _deep(1000)),
    Odd("set", {1, 2}),
    Odd("object()", object()),
    Odd("bytes", b"\xff\x00"),
    Odd("int-and-None-keys", {1: "a", None: "b"}),
    Odd("tuple-key", {("t", 1): "v"}),
    Odd("empty-dict", {}),
    Odd("empty-list", []),
    Odd("dict", {"a": 1}),
]


def _join(parts: list[Odd]) -> Odd:
    return Odd("+".join(p.label for p in parts), "".join(p.value for p in parts))


def _list(items: list[Odd]) -> Odd:
    return Odd("[" + ", ".join(i.label for i in items) + "]", [i.value for i in items])


def _dict(pairs: list[tuple[Odd, Odd]]) -> Odd:
    label = "{" + ", ".join(f"{k.label}: {v.label}" for k, v in pairs) + "}"
    return Odd(label, {k.value: v.value for k, v in pairs})


plain_text = st.text(max_size=12).map(lambda s: Odd(repr(s), s))
odd_text = st.one_of(
    st.sampled_from(TEXT_ATOMS),
    st.lists(st.one_of(st.sampled_from(TEXT_ATOMS), plain_text), min_size=2, max_size=3).map(_join),
    plain_text,
)
odd_scalar = st.one_of(odd_text, st.sampled_from(VALUE_ATOMS))
odd_value = st.recursive(
    odd_scalar,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3).map(_list),
        st.lists(st.tuples(odd_text, inner), max_size=3).map(_dict),
    ),
    max_leaves=4,
)
#: What a str-typed field may be handed: mostly strings, sometimes anything.
odd_str_field = st.one_of(odd_text, odd_text, odd_value)
#: What a caller hands a public entry point: a string, an odd non-string, or a mix.
odd_caller_value = st.one_of(odd_text, st.sampled_from(VALUE_ATOMS), odd_value)
odd_count = st.one_of(
    st.sampled_from([Odd(str(n), n) for n in (0, 3, 10**6)]), st.sampled_from(VALUE_ATOMS)
)


# -- helpers -------------------------------------------------------------------------------------

_paths = itertools.count()


def _db(tmp_path: Path) -> str:
    return str(tmp_path / f"odd-{next(_paths)}.db")


async def _settle(
    handle: stead.RunHandle, calls: Callable[[], int] = lambda: 0, bound: int = 1_000
) -> stead.RunStatus:
    """Poll until the run rests in a recorded state; fail if it does not, or if the model is
    called more than ``bound`` times meanwhile."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + SETTLE_SECONDS
    while True:
        status = await handle.status()
        assert calls() <= bound, f"run {handle.id} ({status}) called the model {calls()} times"
        if status in RECORDED or status.terminal:
            return status
        if loop.time() > deadline:
            raise AssertionError(f"run {handle.id} is still {status} after {SETTLE_SECONDS}s")
        await asyncio.sleep(0.01)


async def _has_reason(handle: stead.RunHandle) -> stead.Run:
    record = await handle.run()
    if record.status in (S.FAILED, S.NEEDS_ATTENTION, S.RETRY_WAIT):
        error = record.error
        assert isinstance(error, dict), f"run {handle.id} is {record.status} without an error"
        reason = error.get("reason")
        assert isinstance(reason, str) and reason.strip(), f"run {handle.id}: reason {reason!r}"
    return record


async def _ordinary_run_completes(runtime: stead.Runtime) -> None:
    assert runtime.health()["ok"], runtime.health()
    run = await runtime.submit(
        "plain", session_id=f"ordinary-{next(_paths)}", request_id="r", prompt="hello"
    )
    assert (await run.result(timeout=SETTLE_SECONDS)).output == "fine"


def _plain_agent() -> stead.Agent:
    return stead.Agent(id="plain", version="1", model=ScriptedModel(["fine"]))


def _run(coro: Awaitable[None]) -> None:
    async def bounded() -> None:
        async with asyncio.timeout(60):
            await coro

    asyncio.run(bounded())


# -- model and tool side -------------------------------------------------------------------------


@dataclass(frozen=True)
class Behaviour:
    """What a tool does when called: return ``value``, or raise an exception carrying it."""

    kind: str  # "return", "raise", "model_retry", "approval"
    value: Odd


behaviours = st.builds(
    Behaviour, st.sampled_from(["return", "raise", "model_retry", "approval"]), odd_value
)
TOOL_NAMES = {"safe": "t_safe", "idempotent": "t_idem", "manual": "t_manual"}


def _tools(behaviour: dict[str, Behaviour], executions: dict[str, list[str]]) -> list[stead.Tool]:
    def act(policy: str, ctx: stead.ToolContext) -> Any:
        executions[policy].append(ctx.operation_id)
        chosen = behaviour[policy]
        value = chosen.value.value
        if chosen.kind == "raise":
            raise RuntimeError(value)
        if chosen.kind == "model_retry":
            raise stead.ModelRetry(value)
        if chosen.kind == "approval" and not ctx.approved:
            raise stead.ApprovalRequired(value)
        return value

    @stead.tool(name="t_safe", recovery="safe", max_attempts=TOOL_ATTEMPTS)
    def t_safe(ctx: stead.ToolContext, x: Any = None) -> Any:
        """A safe tool (runs in a worker thread)."""
        return act("safe", ctx)

    @stead.tool(name="t_idem", recovery="idempotent", max_attempts=TOOL_ATTEMPTS)
    async def t_idem(ctx: stead.ToolContext, x: Any = None) -> Any:
        """An idempotent tool."""
        return act("idempotent", ctx)

    @stead.tool(name="t_manual", recovery="manual", max_attempts=TOOL_ATTEMPTS)
    async def t_manual(ctx: stead.ToolContext, x: Any = None) -> Any:
        """A manual tool."""
        return act("manual", ctx)

    return [t_safe, t_idem, t_manual, stead.ask_user]


@dataclass(frozen=True)
class Call:
    name: Odd
    id: Odd
    arguments: Odd


@dataclass(frozen=True)
class Reply:
    """One drawn model response (built fresh on every call): ordinary but for the fields in
    ``odd``, so that odd data also reaches the tools."""

    odd: frozenset[str]
    text: Odd
    calls: list[Call]
    odd_calls: Odd | None  # replaces the whole tool_calls tuple when set
    usage: Odd | tuple[Odd, ...]
    model: Odd
    finish_reason: Odd

    def response(self) -> stead.ModelResponse:
        tool_calls: Any = tuple(
            stead.ToolCall(name=c.name.value, arguments=c.arguments.value, id=c.id.value)
            for c in self.calls
        )
        if self.odd_calls is not None:
            tool_calls = self.odd_calls.value
        usage = (
            stead.Usage(*(u.value for u in self.usage))
            if isinstance(self.usage, tuple)
            else self.usage.value
        )
        return stead.ModelResponse(
            text=self.text.value,
            tool_calls=tool_calls,
            usage=usage,
            model=self.model.value,
            finish_reason=self.finish_reason.value,
        )


REPLY_FIELDS = ("text", "name", "id", "arguments", "tool_calls", "usage", "model", "finish_reason")
_SURROGATE = re.compile("[\ud800-\udfff]")
#: Odd strings that JSON can hold (markup, escapes, NUL, 100 KB...): they reach the tools.
storable_text = odd_text.filter(lambda o: not _SURROGATE.search(o.value))
ordinary_arguments = st.one_of(
    st.sampled_from([Odd("{}", {}), Odd("{x: 1}", {"x": 1}), Odd("{x: [None]}", {"x": [None]})]),
    storable_text.map(lambda v: Odd(f"{{x: {v.label}}}", {"x": v.value})),
)


@st.composite
def replies(draw: st.DrawFn) -> Reply:
    odd = frozenset(draw(st.sets(st.sampled_from(REPLY_FIELDS), max_size=2)))

    def pick(field: str, ordinary: st.SearchStrategy[Odd], strange: st.SearchStrategy[Odd]) -> Odd:
        return draw(strange if field in odd else ordinary)

    calls = []
    for index in range(draw(st.integers(0, 3))):
        name = draw(st.sampled_from([Odd(n, n) for n in (*TOOL_NAMES.values(), "ask_user")]))
        if name.value == "ask_user":
            arguments = Odd("{question: 'which?'}", {"question": "which?"})
        else:
            arguments = draw(ordinary_arguments)
        call_id = draw(st.sampled_from([Odd("None", None), Odd(f"c{index}", f"c{index}")]))
        if index == 0:  # the odd fields of a call go into the first one
            name = pick("name", st.just(name), odd_str_field)
            call_id = pick("id", st.just(call_id), odd_str_field)
            arguments = pick(
                "arguments",
                st.just(arguments),
                st.one_of(
                    odd_value,
                    odd_value.map(lambda v: Odd(f"{{x: {v.label}}}", {"x": v.value})),
                    odd_value.map(lambda v: Odd(f"{{question: {v.label}}}", {"question": v.value})),
                ),
            )
        calls.append(Call(name, call_id, arguments))
    return Reply(
        odd=odd,
        text=pick("text", storable_text, odd_str_field),
        calls=calls,
        odd_calls=draw(odd_value) if "tool_calls" in odd else None,
        usage=pick(
            "usage",
            st.just((Odd("3", 3), Odd("5", 5), Odd("0", 0), Odd("0", 0), Odd("0", 0))),
            st.one_of(st.tuples(*[odd_count] * 5), odd_value),
        ),
        model=pick("model", st.sampled_from([Odd("None", None), Odd("m", "m")]), odd_str_field),
        finish_reason=pick("finish_reason", st.just(Odd("stop", "stop")), odd_str_field),
    )


@ODD_SETTINGS
@given(
    answer=replies(),
    repeat=st.booleans(),
    stream=st.booleans(),
    behaviour=st.fixed_dictionaries({p: behaviours for p in TOOL_NAMES}),
)
def test_odd_model_and_tool_data_end_in_a_recorded_state(
    tmp_path: Path, answer: Reply, repeat: bool, stream: bool, behaviour: dict[str, Behaviour]
) -> None:
    _run(_model_example(_db(tmp_path), answer, repeat, stream, behaviour))


async def _model_example(
    db: str, answer: Reply, repeat: bool, stream: bool, behaviour: dict[str, Behaviour]
) -> None:
    def respond(request: stead.ModelRequest) -> stead.ModelResponse | str:
        if request.turn == 1 or repeat:
            return answer.response()
        return "done"

    executions: dict[str, list[str]] = {p: [] for p in TOOL_NAMES}
    model = FunctionModel(respond)
    agent = stead.Agent(
        id="odd",
        version="1",
        model=model,
        tools=_tools(behaviour, executions),
        max_turns=MAX_TURNS,
        model_retry=RETRY,
        stream=stream,
    )
    app = stead.App(agents=[agent, _plain_agent()])
    clock = FakeClock()
    bound = MAX_TURNS + RETRY.max_attempts

    def model_calls() -> int:
        return len(model.requests)

    def tool_runs() -> dict[str, int]:
        return {op: ops.count(op) for ops in executions.values() for op in ops}

    async with await app.open(stead.SqliteStore(db, clock=clock)) as runtime:
        run = await runtime.submit("odd", session_id="s", request_id="r", prompt="go")
        status = await _settle(run, model_calls, bound)
        # Nothing loops: a moment later the run rests where it was and nothing was called again.
        calls_then, tools_then = model_calls(), tool_runs()
        await asyncio.sleep(0.1)
        assert await run.status() is status
        assert (model_calls(), tool_runs()) == (calls_then, tools_then)
        assert all(n <= 1 for n in tools_then.values()), tools_then  # no crash: one run each
        record = await _has_reason(run)
        snapshot = await run.snapshot()
        assert snapshot.run.status is status
        if status.terminal:
            events = await asyncio.wait_for(_collect(run), SETTLE_SECONDS)
            assert events[-1].kind == "status"
        await _ordinary_run_completes(runtime)
    # The store reopens and the run reads back as it was; resuming does not run anything again.
    async with await app.open(stead.SqliteStore(db, clock=clock)) as runtime:
        again = runtime.get_run(run.id)
        assert (await again.run()).status is record.status
        await asyncio.sleep(0.1)
        assert await again.status() is record.status
        assert (model_calls(), tool_runs()) == (calls_then, tools_then)
        assert len((await again.snapshot()).operations) == len(snapshot.operations)
        assert {r.id for r in (await runtime.list_runs(session_id="s")).runs} == {run.id}
        assert runtime.health()["ok"]


async def _collect(run: stead.RunHandle) -> list[stead.Event]:
    return [event async for event in run.events()]


# -- caller side ---------------------------------------------------------------------------------

CALLER_FIELDS = (
    "submit.agent_id",
    "submit.session_id",
    "submit.request_id",
    "submit.prompt",
    "submit.run_id",
    "get_run",
    "list_runs.session_id",
    "list_interactions.session_id",
    "respond.interaction_id",
    "Answer.value",
    "Deny.reason",
    "Approve.reviewer",
    "cancel.reason",
    "resolve.key",
    "resolve.output",
)


def _people_model() -> ScriptedModel:
    return ScriptedModel(
        [
            [
                stead.ToolCall(name="ask_user", arguments={"question": "which?"}, id="q"),
                stead.ToolCall(name="gate", arguments={}, id="g"),
            ],
            "done",
        ]
    )


def _caller_app() -> stead.App:
    @stead.tool(recovery="idempotent", approval=True)
    async def gate() -> str:
        """Needs a person's approval."""
        return "passed"

    @stead.tool(recovery="manual")
    async def make() -> object:
        """Returns something that is not JSON, so the run needs attention."""
        return object()

    people = stead.Agent(
        id="people", version="1", model=_people_model(), tools=[stead.ask_user, gate]
    )
    blocker = stead.Agent(
        id="blocker",
        version="1",
        model=ScriptedModel([[stead.ToolCall(name="make", arguments={}, id="m")], "done"]),
        tools=[make],
    )
    return stead.App(agents=[_plain_agent(), people, blocker])


HUGE_INT, DEEP_LIST = VALUE_ATOMS[4], VALUE_ATOMS[9]
assert (HUGE_INT.label, DEEP_LIST.label) == ("10**5000", "deep-list-1000")


@ODD_SETTINGS
@given(values=st.fixed_dictionaries({field: odd_caller_value for field in CALLER_FIELDS}))
@example(values=dict.fromkeys(CALLER_FIELDS, HUGE_INT))
@example(values=dict.fromkeys(CALLER_FIELDS, DEEP_LIST))
def test_odd_caller_input_is_refused_cleanly_and_the_runtime_goes_on(
    tmp_path: Path, values: dict[str, Odd]
) -> None:
    _run(_caller_example(_db(tmp_path), values))


async def _caller_example(db: str, values: dict[str, Odd]) -> None:
    app = _caller_app()
    created: list[stead.RunHandle] = []
    raw: list[str] = []
    async with await app.open(stead.SqliteStore(db)) as runtime:

        async def attempt(field: str, call: Callable[[Any], Awaitable[Any]]) -> Any:
            """``call(value)``: its result, or None when refused. A refusal other than a
            SteadError is noted (and the example goes on, to name every such field)."""
            value = values[field].value
            try:
                return await call(value)
            except stead.SteadError:
                return None
            except Exception as exc:
                raw.append(f"{field}={values[field]!r}: {type(exc).__name__}: {str(exc)[:120]}")
                return None
            finally:
                assert runtime.health()["ok"], (field, values[field], runtime.health())

        for field in CALLER_FIELDS[:5]:
            name = field.split(".")[1]
            kwargs: dict[str, Any] = {
                "agent_id": "plain",
                "session_id": f"session-{name}",
                "request_id": "r",
                "prompt": "hello",
            }

            async def submit(value: Any, name: str = name, kwargs: dict[str, Any] = kwargs) -> Any:
                return await runtime.submit(**{**kwargs, name: value})

            handle = await attempt(field, submit)
            if handle is not None:  # accepted: it is an ordinary run and completes
                created.append(handle)
                assert (await handle.result(timeout=SETTLE_SECONDS)).output == "fine"
                if name == "run_id" and values[field].value is not None:
                    assert handle.id == values[field].value

        await attempt("get_run", lambda v: runtime.get_run(v).status())
        await attempt("list_runs.session_id", lambda v: runtime.list_runs(session_id=v))
        await attempt(
            "list_interactions.session_id", lambda v: runtime.list_interactions(session_id=v)
        )
        await attempt("respond.interaction_id", lambda v: runtime.respond(v, stead.Approve()))

        # Answers and denials: accepted ones are acted on, refused ones leave the run waiting.
        first = await runtime.submit("people", session_id="p1", request_id="r", prompt="go")
        second = await runtime.submit("people", session_id="p2", request_id="r", prompt="go")
        created += [first, second]
        question, approval = await _pending(first)
        await attempt("Answer.value", lambda v: runtime.respond(question, stead.Answer(value=v)))
        await _answer_if_pending(runtime, question, stead.Answer(value="plain answer"))
        await attempt("Deny.reason", lambda v: runtime.respond(approval, stead.Deny(reason=v)))
        await _answer_if_pending(runtime, approval, stead.Approve())
        assert (await first.result(timeout=SETTLE_SECONDS)).output == "done"

        _question, approval = await _pending(second)
        await attempt(
            "Approve.reviewer", lambda v: runtime.respond(approval, stead.Approve(reviewer=v))
        )
        await attempt("cancel.reason", lambda v: second.cancel(reason=v))
        if await second.status() is not S.CANCELLED:
            assert await second.status() is S.WAITING
            await second.cancel("plain reason")
        assert await second.status() is S.CANCELLED

        # Resolving a blocked manual operation.
        blocked = await runtime.submit("blocker", session_id="b", request_id="r", prompt="go")
        created.append(blocked)
        assert await _settle(blocked) is S.NEEDS_ATTENTION
        await attempt("resolve.key", lambda v: blocked.resolve(v, output=1))
        await attempt("resolve.output", lambda v: blocked.resolve("tool:1:m", output=v))
        if await blocked.status() is S.NEEDS_ATTENTION:
            await blocked.resolve("tool:1:m", output={"made": True})
        assert (await blocked.result(timeout=SETTLE_SECONDS)).output == "done"

        await _ordinary_run_completes(runtime)
        statuses = {h.id: await h.status() for h in created}
    # The store reopens and every run reads back as it ended.
    async with await app.open(stead.SqliteStore(db)) as runtime:
        listed = {r.id: r.status for r in (await runtime.list_runs(limit=1000)).runs}
        assert {k: listed[k] for k in statuses} == statuses
        for run_id in statuses:
            await runtime.get_run(run_id).snapshot()
        assert runtime.health()["ok"]
    assert not raw, "raised something other than a stead.SteadError:\n" + "\n".join(raw)


async def _pending(run: stead.RunHandle) -> tuple[str, str]:
    """The run's question and approval ids, once it waits for them."""
    assert await _settle(run) is S.WAITING
    found = {i.kind: i.interaction_id for i in await run.interactions(status="pending")}
    return found["question"], found["approval"]


async def _answer_if_pending(
    runtime: stead.Runtime, interaction_id: str, response: stead.Approve | stead.Answer
) -> None:
    pending = await runtime.list_interactions(status="pending", limit=1000)
    if any(i.interaction_id == interaction_id for i in pending):
        await runtime.respond(interaction_id, response)


# -- the JSON check itself -----------------------------------------------------------------------


def _stores_and_reads_back(value: Any) -> bool:
    """What stead's JSON check promises, said plainly: strict JSON text (no NaN), valid UTF-8,
    that reads back equal, nested at most MAX_DEPTH levels, with no integer of more than
    13,000 bits (Python writes at most 4,300 digits)."""

    def within(v: Any, levels: int) -> bool:
        """At most ``levels`` levels of lists and dicts, and no integer too large."""
        if isinstance(v, list | dict):
            items = v.values() if isinstance(v, dict) else v
            return levels > 0 and all(within(item, levels - 1) for item in items)
        return not (isinstance(v, int) and v.bit_length() > 13_000)

    try:
        text = json.dumps(value, allow_nan=False, ensure_ascii=False)
        text.encode("utf-8")
        back = json.loads(text)
    except (TypeError, ValueError, RecursionError):
        return False
    return bool(back == value) and within(value, MAX_DEPTH)


def _nested(levels: int, leaf: Any) -> Any:
    value = leaf
    for level in range(levels):
        value = [value] if level % 2 else {"k": value}
    return value


@settings(max_examples=300, deadline=None)
@given(value=st.one_of(odd_value, st.sampled_from(VALUE_ATOMS)))
@example(value=Odd("255-deep", _nested(255, "\ud83d")))
@example(value=Odd("256-deep", _nested(256, 1)))
@example(value=Odd("257-deep", _nested(257, 1)))
@example(value=Odd("surrogate-key", {"a": {"\udc80": 1}}))
@example(value=Odd("int-key-deep", [{"a": [{1: "x"}]}]))
@example(value=Odd("13000-bit", [2**13000 - 1, -(2**13000)]))
def test_the_json_check_refuses_exactly_what_does_not_store_and_read_back(value: Odd) -> None:
    try:
        check(value.value)
    except NotJSONError:
        refused = True
    else:
        refused = False
    assert refused is not _stores_and_reads_back(value.value), value.label
