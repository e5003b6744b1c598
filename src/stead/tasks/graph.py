"""Graphs: a fixed DAG of agent and task nodes, submitted as data and run as one durable run.

A graph run owns one child run per node (key ``node:<id>``). A node starts once every node it
depends on completed, with their outputs as JSON keyed by node id: an agent node gets them
after its prompt; a task node without dependencies gets its ``input``, one with dependencies
gets ``{"input": <its input>, "upstream": {<node id>: <output>, ...}}``. A failed node leaves
its dependents waiting until it is retried (independent branches go on); a cancelled node fails
the graph. The graph's output maps every node id to its output.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._checks import require_id
from .._json import JSON, NotJSONError, canonical, to_json
from ..errors import RunCancelled, ValidationError, shown
from ..journal.records import Writes
from ..messages import Usage
from ..runtime.context import RunContext
from ..runtime.control import Failed, NeedsAttention, Waiting
from ..runtime.definition import Completion
from .context import Definitions, TaskContext, _merged

__all__ = ["GRAPH", "GraphDefinition", "GraphNode", "graph_input", "node_key"]

#: The definition name (and version) of every graph run.
GRAPH = "graph"
GRAPH_VERSION = "1"
#: Nodes a graph may have.
MAX_NODES = 500


def node_key(node_id: str) -> str:
    """The key of the operation (and the request id of the child run) of a graph node."""
    return f"node:{node_id}"


@dataclass(frozen=True, slots=True)
class GraphNode:
    """One node of a graph: an agent run (``agent_id`` and ``prompt``) or a task run
    (``task`` and ``input``), started once every node in ``depends_on`` completed."""

    id: str
    agent_id: str | None = None
    task: str | None = None
    prompt: str | None = None
    input: Any = None
    depends_on: Sequence[str] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        where = f"graph node {self.id!r}" if isinstance(self.id, str) else "a graph node"
        require_id("graph node id", self.id)
        if "/" in self.id or "#" in self.id:
            raise ValidationError(f"{where}: an id may not contain '/' or '#'")
        if (self.agent_id is None) == (self.task is None):
            raise ValidationError(
                f"{where}: give exactly one of agent_id=... (an agent run) or task=... (a task run)"
            )
        if self.agent_id is not None:
            require_id(f"{where} agent_id", self.agent_id)
            if not isinstance(self.prompt, str) or not self.prompt.strip():
                raise ValidationError(f"{where}: an agent node needs a non-blank prompt")
            if self.input is not None:
                raise ValidationError(
                    f"{where}: an agent node takes a prompt, not an input; pass prompt=..."
                )
        else:
            require_id(f"{where} task", self.task)
            if self.prompt is not None:
                raise ValidationError(
                    f"{where}: a task node takes an input, not a prompt; pass input=..."
                )
        if isinstance(self.depends_on, str) or not isinstance(self.depends_on, Iterable):
            raise ValidationError(
                f"{where}: depends_on must be a list of node ids, got {shown(self.depends_on)}"
            )
        deps = tuple(self.depends_on)
        for dep in deps:
            require_id(f"{where} dependency", dep)
        if len(set(deps)) != len(deps):
            raise ValidationError(f"{where}: depends_on names a node twice")
        if self.id in deps:
            raise ValidationError(f"{where} depends on itself")
        object.__setattr__(self, "depends_on", deps)

    def to_json(self) -> dict[str, JSON]:
        try:
            value = to_json(self.input)
        except NotJSONError as exc:
            raise ValidationError(
                f"graph node {self.id!r}: its input must be JSON or a pydantic model ({exc})"
            ) from None
        found: dict[str, JSON] = {"id": self.id, "depends_on": list(self.depends_on)}
        if self.agent_id is not None:
            found.update(agent_id=self.agent_id, prompt=self.prompt)
        else:
            found.update(task=self.task, input=value)
        return found

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> GraphNode:
        return cls(
            id=data["id"],
            agent_id=data.get("agent_id"),
            task=data.get("task"),
            prompt=data.get("prompt"),
            input=data.get("input"),
            depends_on=tuple(data.get("depends_on") or ()),
        )


def graph_input(nodes: object) -> list[dict[str, JSON]]:
    """The nodes as the graph run keeps them, in a dependency order; :class:`ValidationError`
    for duplicate ids, unknown dependencies or a cycle (naming them)."""
    if isinstance(nodes, str | bytes) or not isinstance(nodes, Iterable):
        raise ValidationError(f"nodes must be a list of stead.GraphNode, got {shown(nodes)}")
    found = list(nodes)
    if not found:
        raise ValidationError("a graph needs at least one node")
    if len(found) > MAX_NODES:
        raise ValidationError(f"a graph has at most {MAX_NODES} nodes, got {len(found)}")
    for node in found:
        if not isinstance(node, GraphNode):
            raise ValidationError(f"nodes must be stead.GraphNode objects, got {shown(node)}")
    by_id: dict[str, GraphNode] = {}
    for node in found:
        if node.id in by_id:
            raise ValidationError(f"two graph nodes have the id {node.id!r}; ids are unique")
        by_id[node.id] = node
    for node in found:
        unknown = [dep for dep in node.depends_on if dep not in by_id]
        if unknown:
            raise ValidationError(
                f"graph node {node.id!r} depends on unknown node(s) {', '.join(map(repr, unknown))}"
                f"; the nodes are {', '.join(map(repr, by_id))}"
            )
    return [node.to_json() for node in _ordered(found)]


def _ordered(nodes: list[GraphNode]) -> list[GraphNode]:
    """The nodes in a dependency order (submission order among the ready ones)."""
    done: set[str] = set()
    ordered: list[GraphNode] = []
    left = list(nodes)
    while left:
        ready = [n for n in left if all(dep in done for dep in n.depends_on)]
        if not ready:
            raise ValidationError(
                f"the graph has a cycle among nodes {', '.join(repr(n.id) for n in left)}; a "
                "graph's dependencies must not loop"
            )
        for node in ready:
            done.add(node.id)
            ordered.append(node)
        left = [n for n in left if n.id not in done]
    return ordered


def _agent_prompt(prompt: str, upstream: dict[str, JSON]) -> str:
    if not upstream:
        return prompt
    return (
        f"{prompt}\n\nThe outputs of the steps before this one, as JSON keyed by step id:\n"
        f"{canonical(upstream)}"
    )


@dataclass(frozen=True, slots=True)
class GraphDefinition:
    """The execution of a graph run (see the module docstring)."""

    definitions: Definitions

    async def execute(self, ctx: RunContext) -> Completion:
        nodes = [GraphNode.from_json(n) for n in ctx.run.input["nodes"]]
        for node in nodes:
            kind = "agent" if node.agent_id is not None else "task"
            name = node.agent_id or node.task or ""
            if self.definitions.kind_of(name) != kind:
                raise NeedsAttention(
                    f"graph node {node.id!r} runs {kind} {name!r}, which is not registered in "
                    "this runtime; register it, then retry() the graph",
                    operation=node_key(node.id),
                )
        context = TaskContext(ctx, self.definitions)
        outputs: dict[str, JSON] = {}
        waits: list[Waiting] = []
        for node in nodes:
            if any(dep not in outputs for dep in node.depends_on):
                continue  # a prerequisite has not completed yet
            upstream = {dep: outputs[dep] for dep in node.depends_on}
            try:
                if node.agent_id is not None:
                    outcome = await context._child(
                        "agent",
                        node.agent_id,
                        {"prompt": _agent_prompt(node.prompt or "", upstream)},
                        node_key(node.id),
                        None,
                        settle=("completed", "cancelled"),
                    )
                else:
                    value = (
                        {"input": node.input, "upstream": upstream}
                        if node.depends_on
                        else node.input
                    )
                    outcome = await context._child(
                        "task",
                        node.task or "",
                        {"input": value},
                        node_key(node.id),
                        None,
                        settle=("completed", "cancelled"),
                    )
            except Waiting as wait:
                waits.append(wait)
                continue
            except RunCancelled as exc:
                raise Failed(
                    f"graph node {node.id!r} was cancelled ({exc}); its dependents cannot run",
                    operation=node_key(node.id),
                    kind="graph",
                ) from None
            outputs[node.id] = outcome.output
        if waits:
            raise _merged(waits)
        outputs = {node.id: outputs[node.id] for node in nodes}
        return Completion(
            outcome={"output": outputs, "usage": {}},
            writes=Writes(),
            output=outputs,
            messages=(),
            usage=Usage(),
        )
