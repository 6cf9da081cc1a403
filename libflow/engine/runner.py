"""Running a workflow: inputs checked, the DAG walked with independent branches concurrent."""

from __future__ import annotations

import asyncio
import copy
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from libflow.engine.definition import Edge, Node, RunPlan, WorkflowDefinition, value_matches
from libflow.engine.nodes import (
    INSTANT_TYPES,
    USAGE_TYPES,
    NodeFailure,
    NodeServices,
    RunState,
    run_node,
)
from libflow.engine.nodes.state import RunListener
from libflow.engine.render_budget import RunOutOfTime
from libflow.engine.run_budget import TIMING_RECORD_BYTES, RunBudget, clip_message
from libflow.errors import LibflowError
from libflow.ids import epoch_iso, utcnow

RunStatus = Literal["running", "succeeded", "failed", "timed_out", "cancelled"]
NodeStatus = Literal["running", "succeeded", "failed", "skipped", "cancelled"]
CANCELLED_STATUS_CODE = 499  # never sent: the client is gone (nginx's "client closed request")
# The room a node's token usage takes in its timing, kept for each node of USAGE_TYPES.
USAGE_RECORD_BYTES = 96


class UnknownEvent(LibflowError):
    """No event node of the workflow matches the run's event."""

    code = "UNKNOWN_EVENT"


class InvalidInputs(LibflowError):
    """The inputs do not match the workflow's input nodes; ``details`` has one entry each."""

    code = "INVALID_INPUTS"


@dataclass(frozen=True, slots=True)
class NodeTiming:
    """When one node ran (``time.time()`` readings: cheaper than datetimes, which a small
    node's own work does not outweigh) and how it ended."""

    started: float
    finished: float | None
    status: NodeStatus
    usage: dict[str, int] | None = None  # a model's tokens, for the nodes that called one

    def to_json(self) -> dict[str, Any]:
        """The camelCase shape of run records."""
        timing: dict[str, Any] = {
            "startedDate": epoch_iso(self.started),
            "finishedDate": None if self.finished is None else epoch_iso(self.finished),
            "status": self.status,
        }
        if self.usage is not None:
            timing["usage"] = self.usage
        return timing


@dataclass(frozen=True, slots=True)
class RunError:
    """Why a run did not succeed."""

    code: str
    node: str | None
    message: str

    def to_json(self) -> dict[str, Any]:
        """The shape of ``result.error`` and of run records."""
        return {"code": self.code, "node": self.node, "message": self.message}


@dataclass(frozen=True, slots=True)
class RunResult:
    """A snapshot of a run: final once ``status`` is no longer "running"."""

    status: RunStatus
    status_code: int
    outputs: dict[str, Any]
    error: RunError | None
    timings: dict[str, NodeTiming]
    started_date: datetime | None
    finished_date: datetime | None

    @property
    def success(self) -> bool:
        """Whether the run succeeded."""
        return self.status == "succeeded"

    def response_body(self) -> dict[str, Any]:
        """The runsync body: ``{success, result: {outputs, error?}, statusCode}``."""
        result: dict[str, Any] = {"outputs": self.outputs}
        if self.error is not None:
            result["error"] = self.error.to_json()
        return {"success": self.success, "result": result, "statusCode": self.status_code}

    def timings_json(self) -> dict[str, dict[str, Any]]:
        """Node timings keyed by node id, camelCase."""
        return {node_id: timing.to_json() for node_id, timing in self.timings.items()}


def check_inputs(definition: WorkflowDefinition, inputs: Any) -> dict[str, Any]:
    """The run's inputs with defaults applied; InvalidInputs listing every problem."""
    if inputs is None:
        inputs = {}
    if not isinstance(inputs, dict):
        raise InvalidInputs(
            "inputs must be an object",
            details=[{"input": None, "problem": "inputs must be an object"}],
        )
    checked = dict(inputs)  # undeclared inputs pass through
    problems: list[dict[str, Any]] = []
    for node in definition.input_nodes:
        name, value_type = node.config["name"], node.config["valueType"]
        value = checked.get(name)
        if value is None:
            if node.config["default"] is not None:
                checked[name] = copy.deepcopy(node.config["default"])
            elif node.config["required"]:
                problems.append({"input": name, "problem": "is required"})
            else:
                checked[name] = None
        elif not value_matches(value, value_type):
            problems.append({"input": name, "problem": f"must be of type {value_type}"})
    if problems:
        first = problems[0]
        raise InvalidInputs(f"input '{first['input']}' {first['problem']}", details=problems)
    return checked


def _plan_of(definition: WorkflowDefinition, event: str) -> RunPlan:
    plan = definition.plan(event)
    if plan is None:
        raise UnknownEvent(
            f"the workflow has no event node for event {event!r}",
            details={"event": event, "knownEvents": definition.event_names()},
        )
    return plan


def check_event(definition: WorkflowDefinition, event: str) -> None:
    """UnknownEvent unless an event node of ``definition`` starts runs of ``event``."""
    _plan_of(definition, event)


def check_run(definition: WorkflowDefinition, event: str, inputs: Any) -> dict[str, Any]:
    """What a run of ``event`` with ``inputs`` would get: its inputs, defaults applied.

    Raises UnknownEvent or InvalidInputs, as creating the run would (a queued run is
    checked when it is queued).
    """
    _plan_of(definition, event)
    return check_inputs(definition, inputs)


class WorkflowRun:
    """One run of a definition; its state stays readable while it runs and after it ends.

    Creating it checks the event and the inputs (UnknownEvent, InvalidInputs) before
    anything runs. If the task awaiting ``execute`` is cancelled, the run records
    status "cancelled" and re-raises; ``result()`` still tells what happened.
    """

    def __init__(
        self,
        definition: WorkflowDefinition,
        *,
        event: str,
        inputs: Mapping[str, Any] | None,
        services: NodeServices,
        listener: RunListener | None = None,
        run_id: str | None = None,
        depth: int = 0,
    ) -> None:
        plan = _plan_of(definition, event)
        self.definition = definition
        self.event = event
        self.state = RunState(
            event=event,
            inputs=check_inputs(definition, inputs),
            services=services,
            budget=(
                RunBudget(timings_bytes=_timings_bytes(definition, plan))
                if depth == 0
                else RunBudget.sub_run(services.sub_runs, _timings_bytes(definition, plan))
            ),
            listener=listener,
            run_id=run_id,
            depth=depth,
        )
        self.status: RunStatus = "running"
        self.error: RunError | None = None
        self.timings: dict[str, NodeTiming] = {}
        self.started_date: datetime | None = None
        self.finished_date: datetime | None = None
        self._plan = plan
        self._status_code: int | None = None

    @property
    def inputs(self) -> dict[str, Any]:
        """The checked inputs, defaults applied."""
        return self.state.inputs

    @property
    def outputs(self) -> dict[str, Any]:
        """The outputs set so far."""
        return self.state.outputs

    @property
    def status_code(self) -> int:
        """The status code the run answers with (so far)."""
        return self._status_code if self._status_code is not None else self.state.status_code

    def result(self) -> RunResult:
        """A snapshot of the run as it stands."""
        return RunResult(
            status=self.status,
            status_code=self.status_code,
            outputs=dict(self.state.outputs),
            error=self.error,
            timings=dict(self.timings),
            started_date=self.started_date,
            finished_date=self.finished_date,
        )

    async def execute(self) -> RunResult:
        """Run the workflow to its end, its failure or its timeout."""
        if self.started_date is not None:
            raise RuntimeError("a WorkflowRun executes once")
        self.started_date = utcnow()
        self.state.budget.start(self.definition.timeout_seconds)
        try:
            async with asyncio.timeout(self.definition.timeout_seconds):
                await self._walk()
        except (TimeoutError, RunOutOfTime):  # RunOutOfTime: a render noticed it first
            if self.status != "running":  # it failed just as time ran out
                return self.result()
            running = [node_id for node_id, t in self.timings.items() if t.status == "cancelled"]
            self._end(
                "timed_out",
                504,
                RunError(
                    code="RUN_TIMEOUT",
                    node=running[0] if running else None,
                    message=f"the run did not finish within {self.definition.timeout_seconds:g} s",
                ),
            )
        except asyncio.CancelledError:
            if self.status == "running":  # else it ended while its nodes were being stopped
                self._end("cancelled", CANCELLED_STATUS_CODE, None)
            raise
        except Exception:
            self._end("failed", 500, RunError("INTERNAL", None, "internal error in the runner"))
            raise
        finally:
            self.state.budget.give_back()  # a sub-run's share of its tree's budget
        return self.result()

    def _end(self, status: RunStatus, status_code: int | None, error: RunError | None) -> None:
        """Record how the run ended."""
        self.status = status
        self._status_code = status_code
        self.error = error
        self.finished_date = utcnow()

    def _mark(self, node_id: str, status: NodeStatus) -> None:
        """Record a node starting ("running") or ending."""
        now = time.time()
        if status == "running":
            self.timings[node_id] = NodeTiming(now, None, status)
        elif status == "skipped":
            self.timings[node_id] = NodeTiming(now, now, status)
        else:
            started = self.timings[node_id].started
            self.timings[node_id] = NodeTiming(started, now, status, self.state.usage.get(node_id))

    async def _run_one(self, node: Node) -> dict[str, Any]:
        """Run one node (marked running when it was scheduled), recording how it ended."""
        listener = self.state.listener
        if listener is not None:
            listener("node.started", {"node": node.id}, None)
        try:
            output = await run_node(node, self.state)
        except NodeFailure as failure:
            failure.node_id = node.id
            self._mark(node.id, "failed")
            if listener is not None:
                listener(
                    "node.failed", {"node": node.id, "error": clip_message(failure.message)}, None
                )
            raise
        except (asyncio.CancelledError, RunOutOfTime):
            self._mark(node.id, "cancelled")  # stopped by the run's end, not failed
            raise
        self._mark(node.id, "succeeded")
        if listener is not None:
            timing = self.timings[node.id]
            assert timing.finished is not None
            ms = round((timing.finished - timing.started) * 1000, 3)
            listener("node.finished", {"node": node.id, "output": output, "ms": ms}, "output")
        return output

    async def _walk(self) -> None:
        """Run the reached nodes in dependency order; independent ones concurrently."""
        definition = self.definition
        waiting = dict(self._plan.waiting)
        live: set[str] = set()
        ready = deque(self._plan.starts)
        tasks: dict[asyncio.Task[dict[str, Any]], Node] = {}

        def settle(node: Node, output: dict[str, Any] | None) -> None:
            """A node finished (output) or was skipped (None): release what follows it."""
            pending: deque[tuple[Node, dict[str, Any] | None]] = deque([(node, output)])
            while pending:
                done, result = pending.popleft()
                for edge in definition.outgoing[done.id]:
                    if result is not None and _edge_taken(edge, result):
                        live.add(edge.target)
                    waiting[edge.target] -= 1
                    if waiting[edge.target] == 0:
                        target = definition.by_id[edge.target]
                        if edge.target in live:
                            ready.append(target)
                        else:
                            self._mark(target.id, "skipped")
                            pending.append((target, None))

        try:
            while ready or tasks:
                while ready:
                    node = ready.popleft()
                    self._mark(node.id, "running")
                    if node.type in INSTANT_TYPES:
                        output = await self._run_one(node)
                        self.state.results[node.id] = output
                        settle(node, output)
                    else:
                        tasks[asyncio.create_task(self._run_one(node))] = node
                if not tasks:
                    break
                finished, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
                for task in finished:
                    node = tasks.pop(task)
                    output = task.result()
                    self.state.results[node.id] = output
                    settle(node, output)
            self._end("succeeded", None, None)
        except NodeFailure as failure:
            self._end(
                "failed",
                failure.status_code,
                RunError(
                    code="NODE_FAILED", node=failure.node_id, message=clip_message(failure.message)
                ),
            )
        finally:
            await self._cancel(tasks)

    async def _cancel(self, tasks: Mapping[asyncio.Task[dict[str, Any]], Node]) -> None:
        """Stop the nodes still running and record them as cancelled."""
        for task, node in tasks.items():
            task.cancel()
            timing = self.timings.get(node.id)
            if timing is not None and timing.status == "running":
                self._mark(node.id, "cancelled")
        if tasks:
            await asyncio.wait(tasks)
        for task in tasks:
            if not task.cancelled():
                task.exception()  # retrieved: a second failure is not logged as unhandled


def _timings_bytes(definition: WorkflowDefinition, plan: RunPlan) -> int:
    """The most the timings of a run of ``plan`` can take in its record."""
    usage = sum(definition.by_id[node_id].type in USAGE_TYPES for node_id in plan.waiting)
    return len(plan.waiting) * TIMING_RECORD_BYTES + plan.id_chars + usage * USAGE_RECORD_BYTES


def _edge_taken(edge: Edge, output: Mapping[str, Any]) -> bool:
    """Whether a finished node's edge carries the run on (a condition picks its branch)."""
    return edge.when is None or edge.when == output.get("result")


async def run_workflow(
    definition: WorkflowDefinition,
    *,
    event: str,
    inputs: Mapping[str, Any] | None,
    services: NodeServices,
) -> RunResult:
    """Check and run a workflow; see WorkflowRun to keep the state of a cancelled run."""
    return await WorkflowRun(definition, event=event, inputs=inputs, services=services).execute()
