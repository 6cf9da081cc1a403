"""The workflow engine: definitions, expressions, node types and the runner (no HTTP server)."""

from __future__ import annotations

from libflow.engine.definition import (
    Edge,
    InvalidWorkflow,
    Node,
    WorkflowDefinition,
    parse_definition,
)
from libflow.engine.nodes import NodeServices
from libflow.engine.runner import (
    InvalidInputs,
    NodeTiming,
    RunError,
    RunResult,
    UnknownEvent,
    WorkflowRun,
    run_workflow,
)

__all__ = [
    "Edge",
    "InvalidInputs",
    "InvalidWorkflow",
    "Node",
    "NodeServices",
    "NodeTiming",
    "RunError",
    "RunResult",
    "UnknownEvent",
    "WorkflowDefinition",
    "WorkflowRun",
    "parse_definition",
    "run_workflow",
]
