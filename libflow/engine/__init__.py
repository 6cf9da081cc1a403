"""The workflow engine: definitions, expressions, node types and the runner (no HTTP server)."""

from __future__ import annotations

from libflow.engine.definition import Edge, InvalidWorkflow, Node, WorkflowDefinition
from libflow.engine.nodes import NodeServices
from libflow.engine.nodes.state import RunListener
from libflow.engine.runner import (
    InvalidInputs,
    NodeTiming,
    RunError,
    RunResult,
    UnknownEvent,
    WorkflowRun,
    check_event,
    check_run,
    run_workflow,
)
from libflow.engine.validation import parse_definition, parse_definition_off_loop

__all__ = [
    "Edge",
    "InvalidInputs",
    "InvalidWorkflow",
    "Node",
    "NodeServices",
    "NodeTiming",
    "RunError",
    "RunListener",
    "RunResult",
    "UnknownEvent",
    "WorkflowDefinition",
    "WorkflowRun",
    "check_event",
    "check_run",
    "parse_definition",
    "parse_definition_off_loop",
    "run_workflow",
]
