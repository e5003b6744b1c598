"""App: the code side — registered agents and tasks, each under (name, version)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Generic, TypeVar

from ._json import JSON
from .agent.agent import Agent
from .agent.definition import AgentDefinition
from .errors import NotFoundError, StorageError, ValidationError, shown
from .journal.records import Run
from .models.pricing import Price
from .tasks.definition import TaskDefinition
from .tasks.graph import GraphDefinition, GraphNode
from .tasks.schedule import Schedule
from .tasks.task import Task

if TYPE_CHECKING:
    from .journal.protocol import OwnedStore
    from .runtime.limits import Limits
    from .runtime.runtime import Runtime

__all__ = ["App"]

T = TypeVar("T")


class _Versions(Generic[T]):
    """The registered versions of one kind of definition (agents, tasks), each name's latest."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.items: dict[tuple[str, str], T] = {}
        self.latest: dict[str, str] = {}

    def add(self, name: str, version: str, item: T, *, taken_by: str | None) -> None:
        if taken_by is not None:
            raise ValidationError(
                f"{self.kind} {name!r} has the name of a registered {taken_by}; give it "
                "another name"
            )
        existing = self.items.get((name, version))
        if existing is not None and existing is not item:
            raise ValidationError(
                f"{self.kind} {name!r} version {version!r} is already registered; give a "
                f"changed {self.kind} a new version"
            )
        self.items[(name, version)] = item
        self.latest[name] = version

    def get(self, name: str, version: str | None, hint: str = "") -> T:
        """The registered item (latest version unless ``version`` is given)."""
        if version is None:
            latest = self.latest.get(name)
            if latest is None:
                known = ", ".join(sorted(self.latest)) or "none"
                raise NotFoundError(
                    f"unknown {self.kind} {name!r}{hint}; registered {self.kind}s: {known}"
                )
            version = latest
        found = self.items.get((name, version))
        if found is None:
            versions = sorted(v for (n, v) in self.items if n == name)
            raise NotFoundError(
                f"{self.kind} {name!r} version {version!r} is not registered "
                f"(registered versions: {', '.join(versions) or 'none'})"
            )
        return found


class App:
    """Registered agents and tasks. Several versions of one agent or task may be registered at
    once; a new submission uses the version registered last unless it names one. An agent and
    a task may not share a name: a run names what it executes by it.

    Open it on a store to get a :class:`~stead.Runtime`::

        async with await app.open(stead.SqliteStore("stead.db")) as runtime: ...
    """

    def __init__(
        self,
        agents: Iterable[Agent] = (),
        *,
        tasks: Iterable[Task] = (),
        schedules: Iterable[Schedule] = (),
        prices: Mapping[str, Price] | None = None,
    ) -> None:
        """``prices`` replaces the price table used for cost and ``max_cost_usd`` budgets
        (default :data:`stead.models.pricing.DEFAULT_PRICES`; extend it with
        ``{**DEFAULT_PRICES, "openai-compatible:llama3.1": Price(0, 0)}``)."""
        self.prices = prices
        self._agents: _Versions[Agent] = _Versions("agent")
        self._tasks: _Versions[Task] = _Versions("task")
        for agent in agents:
            self.register(agent)
        for found in tasks:
            if not isinstance(found, Task):
                raise ValidationError(
                    f"App(tasks=...) takes functions decorated with @stead.task, got {shown(found)}"
                )
            self.register(found)
        self.schedules: list[Schedule] = []
        for schedule in schedules:
            self._add_schedule(schedule)

    def _add_schedule(self, schedule: Schedule) -> None:
        if not isinstance(schedule, Schedule):
            raise ValidationError(
                f"App(schedules=...) takes stead.Schedule objects, got {shown(schedule)}"
            )
        if any(s.name == schedule.name for s in self.schedules):
            raise ValidationError(f"two schedules are named {schedule.name!r}; names are unique")
        task = self.task(schedule.task)
        try:
            task.input_json(schedule.input)
        except ValidationError as exc:
            raise ValidationError(f"schedule {schedule.name!r}: {exc}") from None
        self.schedules.append(schedule)

    def register(self, agent: Agent | Task) -> None:
        """Register an agent or task version (also while a runtime is open: ``retry()`` a run
        that was waiting for it)."""
        if isinstance(agent, Task):
            taken = "agent" if agent.name in self._agents.latest else None
            self._tasks.add(agent.name, agent.version, agent, taken_by=taken)
        elif isinstance(agent, Agent):
            taken = "task" if agent.id in self._tasks.latest else None
            self._agents.add(agent.id, agent.version, agent, taken_by=taken)
        else:
            raise ValidationError(
                f"App.register expects a stead.Agent or a @stead.task, got {shown(agent)}"
            )

    def agent(self, agent_id: str, version: str | None = None) -> Agent:
        """The registered agent (latest version unless ``version`` is given)."""
        return self._agents.get(agent_id, version)

    def task(self, name: str, version: str | int | None = None) -> Task:
        """The registered task (latest version unless ``version`` is given)."""
        hint = f" ({name!r} is an agent: submit() it)" if name in self._agents.latest else ""
        return self._tasks.get(name, None if version is None else str(version), hint)

    def find(self, agent_id: str, version: str) -> Agent | None:
        return self._agents.items.get((agent_id, version))

    def definition(self, run: Run) -> AgentDefinition | TaskDefinition | GraphDefinition | None:
        """What ``run`` executes, or ``None`` if its version is not registered here."""
        if run.kind == "graph":
            return GraphDefinition(self)
        if run.kind == "task":
            found = self._tasks.items.get((run.agent_id, run.version))
            return TaskDefinition(found, self) if found is not None else None
        agent = self._agents.items.get((run.agent_id, run.version))
        return AgentDefinition(agent, self.prices) if agent is not None else None

    def migration(self, run: Run) -> tuple[str, JSON] | None:
        """A task run whose version is not registered here goes to the latest registered
        version of its task, if that version declares ``migrate``: that version and the input
        ``migrate`` gives (:class:`ValidationError` when it refuses). ``None`` otherwise."""
        if run.kind != "task" or (run.agent_id, run.version) in self._tasks.items:
            return None
        latest = self._tasks.latest.get(run.agent_id)
        if latest is None:
            return None
        task = self._tasks.items[(run.agent_id, latest)]
        if task.migrate is None:
            return None
        stored = run.input.get("input") if isinstance(run.input, dict) else None
        return task.version, {"input": task.migrated_input(run.version, stored)}

    def version_of(self, name: str, version: str | None) -> str:
        """The version a new run of the agent or task ``name`` is pinned to (the latest
        unless given)."""
        if name in self._tasks.latest:
            return self.task(name, version).version
        return self.agent(name, version).version

    def kind_of(self, name: str) -> str | None:
        """``agent`` or ``task``: what ``name`` is here (``None``: neither)."""
        if name in self._tasks.latest:
            return "task"
        return "agent" if name in self._agents.latest else None

    def task_input(self, name: str, value: object) -> object:
        """``value`` as the JSON input of a run of task ``name`` (validated by its latest
        version); :class:`ValidationError` if it is not valid."""
        return self.task(name).input_json(value)

    def check_graph(self, nodes: list[GraphNode]) -> None:
        """Every node runs a registered agent or task, and a task node without dependencies
        has a valid input; :class:`NotFoundError` or :class:`ValidationError` naming the
        node otherwise."""
        for node in nodes:
            if node.agent_id is not None:
                if self.kind_of(node.agent_id) != "agent":
                    self.agent(node.agent_id)  # raises, listing the registered agents
            else:
                name = node.task or ""
                task = self.task(name)
                if not node.depends_on:
                    try:
                        task.input_json(node.input)
                    except ValidationError as exc:
                        raise ValidationError(f"graph node {node.id!r}: {exc}") from None

    @property
    def agents(self) -> list[Agent]:
        return list(self._agents.items.values())

    @property
    def tasks(self) -> list[Task]:
        return list(self._tasks.items.values())

    def latest_versions(self) -> dict[str, str]:
        """Each registered agent's and task's latest version (what a submission naming none
        gets)."""
        return {**self._agents.latest, **self._tasks.latest}

    async def open(
        self,
        store: OwnedStore,
        *,
        max_concurrent_runs: int = 4,
        resume: bool = True,
        limits: Limits | None = None,
        on_fatal_error: Callable[[StorageError], None] | None = None,
    ) -> Runtime:
        """Open ``store``: take ownership (of a SQLite file; on PostgreSQL, join the workers
        of the schema), and (unless ``resume=False``) resume unfinished runs.

        ``on_fatal_error`` is called once if the store fails; the runtime then refuses every
        call with that :class:`StorageError` until it is closed and the store reopened.
        """
        from .runtime.runtime import Runtime

        return await Runtime.open(
            self,
            store,
            max_concurrent_runs=max_concurrent_runs,
            resume=resume,
            limits=limits,
            on_fatal_error=on_fatal_error,
        )
