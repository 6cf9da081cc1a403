"""What every node sees: the run's state, the services it may reach, and its fields rendered."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp

from libflow.engine.definition import Node
from libflow.engine.expressions import evaluate
from libflow.engine.render_budget import ExpressionError, RunOutOfTime
from libflow.engine.run_budget import RunBudget, SubRunBudget
from libflow.engine.run_secrets import RunSecrets

# Told of a run's events as they happen: (name, data, the data's key holding a large value).
RunListener = Callable[[str, dict[str, Any], str | None], None]
FileText = Callable[[str], Awaitable[dict[str, Any]]]


class SearchLibrary(Protocol):
    """Searches the run's project's library, as POST .../library/search (dir, filter, mode)."""

    async def __call__(
        self,
        query: str,
        limit: int,
        *,
        folder: str | None = None,
        metadata_filter: Any = None,
        mode: str = "hybrid",
    ) -> list[dict[str, Any]]: ...


class CallWorkflow(Protocol):
    """Runs a workflow of the run's project as a sub-run; its outputs, or a LibflowError.

    ``services`` are the calling run's (the sub-run shares them): handed over on each call
    rather than held, which would make the services refer to themselves, a cycle that
    only the garbage collector frees, on every run.
    """

    async def __call__(
        self,
        workflow_id: str,
        version: str | None,
        inputs: dict[str, Any],
        *,
        services: NodeServices,
        parent_run_id: str | None,
        depth: int,
    ) -> dict[str, Any]: ...


@dataclass(frozen=True, slots=True)
class ModelProvider:
    """The OpenAI-compatible chat API llm nodes call, as the operator's settings name it."""

    base_url: str | None = None  # including /v1
    api_key: str | None = field(default=None, repr=False)
    model: str | None = None


async def _no_sub_runs() -> dict[str, Any]:
    raise NodeFailure("this run cannot run other workflows")


@dataclass(frozen=True, slots=True)
class NodeServices:
    """What nodes may reach outside the run; the caller scopes the library to one project."""

    http: aiohttp.ClientSession
    allow_private_addresses: bool
    search_library: SearchLibrary
    file_text: FileText
    # Runs that may not start sub-runs (the engine's own tests) keep this default.
    call_workflow: CallWorkflow = field(default=lambda *_, **__: _no_sub_runs())
    llm: ModelProvider = ModelProvider()
    # The project's secrets (``secrets.NAME``), per run; None: the run has none to read.
    secrets: RunSecrets | None = None
    # What the run's sub-runs spend together: one per top-level run, as these services are.
    sub_runs: SubRunBudget = field(default_factory=SubRunBudget)


class NodeFailure(Exception):
    """A node could not do its work; the run fails with ``status_code``."""

    def __init__(self, message: str, *, status_code: int = 500) -> None:
        super().__init__(message)
        self.message = message
        self.status_code = status_code
        self.node_id: str | None = None  # set by the runner


@dataclass(slots=True)
class RunState:
    """What nodes read and write during one run."""

    event: str
    inputs: dict[str, Any]
    services: NodeServices
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    outputs: dict[str, Any] = field(default_factory=dict)
    status_code: int = 200
    budget: RunBudget = field(default_factory=RunBudget)
    listener: RunListener | None = None
    # Token usage of the nodes that called a model, by node id: their node timings carry it.
    usage: dict[str, dict[str, int]] = field(default_factory=dict)
    # The run's id (None: not recorded) and how deep in calls of workflows it runs (0: top).
    run_id: str | None = None
    depth: int = 0

    def expression_context(self) -> dict[str, Any]:
        """The names expressions see: inputs, nodes (results so far), event and secrets."""
        context: dict[str, Any] = {
            "inputs": self.inputs,
            "nodes": self.results,
            "event": self.event,
        }
        if self.services.secrets is not None:
            context["secrets"] = self.services.secrets.view
        return context


async def field_value(node: Node, state: RunState, name: str, *, text: bool = False) -> Any:
    """A field of the node with its expressions rendered (as text when ``text``).

    RunOutOfTime passes through: the run timed out, the node did not fail.
    """
    if state.services.secrets is not None:
        await state.services.secrets.fetch_for(node.config[name])  # what it reads, once
    try:
        return await evaluate(
            node.config[name],
            state.expression_context(),
            run=state.budget.renders,
            text_only=text,
        )
    except RunOutOfTime:
        raise
    except ExpressionError as err:
        raise NodeFailure(f"field '{name}': {err}") from None


async def text_field(node: Node, state: RunState, name: str) -> str:
    """A rendered field as text (a native non-string value is written as JSON)."""
    value = await field_value(node, state, name)
    return value if isinstance(value, str) else json.dumps(value)


async def int_field(node: Node, state: RunState, name: str, low: int, high: int) -> int:
    """A rendered field that must be an integer within [low, high]."""
    value = await field_value(node, state, name)
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            value = int(value.strip())
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise NodeFailure(
            f"field '{name}' must be an integer from {low} to {high}, not {_shown(value)}"
        )
    return value


async def number_field(node: Node, state: RunState, name: str, low: float, high: float) -> float:
    """A rendered field that must be a number within [low, high]."""
    value = await field_value(node, state, name)
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            value = float(value.strip())
    if not isinstance(value, int | float) or isinstance(value, bool) or not low <= value <= high:
        raise NodeFailure(
            f"field '{name}' must be a number from {low:g} to {high:g}, not {_shown(value)}"
        )
    return float(value)


def _shown(value: Any) -> str:
    """A value as a message shows it: its repr, cut short (it may be megabytes)."""
    if isinstance(value, str) and len(value) > 100:
        return repr(value[:100]) + "..."
    if isinstance(value, dict | list):
        return f"a {type(value).__name__}"
    return repr(value)
