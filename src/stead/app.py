"""App: the code side — registered agents, each under (id, version)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from .agent.agent import Agent
from .agent.definition import AgentDefinition
from .errors import NotFoundError, StorageError, ValidationError, shown
from .journal.records import Run
from .models.pricing import Price

if TYPE_CHECKING:
    from .journal.protocol import OwnedStore
    from .runtime.limits import Limits
    from .runtime.runtime import Runtime

__all__ = ["App"]


class App:
    """Registered agents. Several versions of one agent may be registered at once; a new
    submission uses the version registered last unless it names one.

    Open it on a store to get a :class:`~stead.Runtime`::

        async with await app.open(stead.SqliteStore("stead.db")) as runtime: ...
    """

    def __init__(
        self, agents: Iterable[Agent] = (), *, prices: Mapping[str, Price] | None = None
    ) -> None:
        """``prices`` replaces the price table used for cost and ``max_cost_usd`` budgets
        (default :data:`stead.models.pricing.DEFAULT_PRICES`; extend it with
        ``{**DEFAULT_PRICES, "openai-compatible:llama3.1": Price(0, 0)}``)."""
        self.prices = prices
        self._agents: dict[tuple[str, str], Agent] = {}
        self._latest: dict[str, str] = {}
        for agent in agents:
            self.register(agent)

    def register(self, agent: Agent) -> None:
        """Register an agent version (also while a runtime is open: ``retry()`` a run that was
        waiting for it)."""
        if not isinstance(agent, Agent):
            raise ValidationError(f"App.register expects a stead.Agent, got {shown(agent)}")
        key = (agent.id, agent.version)
        existing = self._agents.get(key)
        if existing is not None and existing is not agent:
            raise ValidationError(
                f"agent {agent.id!r} version {agent.version!r} is already "
                "registered; give a changed agent a new version"
            )
        self._agents[key] = agent
        self._latest[agent.id] = agent.version

    def agent(self, agent_id: str, version: str | None = None) -> Agent:
        """The registered agent (latest version unless ``version`` is given)."""
        if version is None:
            latest = self._latest.get(agent_id)
            if latest is None:
                known = ", ".join(sorted(self._latest)) or "none"
                raise NotFoundError(f"unknown agent {agent_id!r}; registered agents: {known}")
            version = latest
        found = self._agents.get((agent_id, version))
        if found is None:
            versions = sorted(v for (a, v) in self._agents if a == agent_id)
            raise NotFoundError(
                f"agent {agent_id!r} version {version!r} is not registered "
                f"(registered versions: {', '.join(versions) or 'none'})"
            )
        return found

    def find(self, agent_id: str, version: str) -> Agent | None:
        return self._agents.get((agent_id, version))

    def definition(self, run: Run) -> AgentDefinition | None:
        """What ``run`` executes, or ``None`` if its version is not registered here."""
        agent = self._agents.get((run.agent_id, run.version))
        return AgentDefinition(agent, self.prices) if agent is not None else None

    def version_of(self, agent_id: str, version: str | None) -> str:
        """The version a new run of ``agent_id`` is pinned to (the latest unless given)."""
        return self.agent(agent_id, version).version

    @property
    def agents(self) -> list[Agent]:
        return list(self._agents.values())

    def latest_versions(self) -> dict[str, str]:
        """Each registered agent's latest version (what a submission naming none gets)."""
        return dict(self._latest)

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
