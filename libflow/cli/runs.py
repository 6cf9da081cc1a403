"""``libflow runs``: start a workflow's run, find runs, follow one's events, cancel one.

Like public_api's commands they call the public HTTP API through libflow.client. ``watch``
follows the run's events (the client resumes a broken stream) and prints each on a line;
``libflow run`` runs a workflow with runsync and prints its outputs.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime
from typing import Any

from libflow.cli.connection import add_connection_options, client_of
from libflow.cli.output import CliError
from libflow.client import LibflowClient
from libflow.client.events import RUN_FINISHED
from libflow.workflows.run_history import RUN_STATUSES, RUN_TRIGGERS

# A value in a human-readable event line is cut here (--json and ``runs get`` show it whole).
SHOWN_VALUE_CHARS = 200


class RunNotSucceeded(CliError):
    """The watched run ended, but not "succeeded": ``watch`` exits 1."""


def add_runs_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``libflow runs start|get|list|watch|cancel`` to the command's subparsers."""
    runs = sub.add_parser("runs", help="start, find, watch and cancel runs through the public API")
    actions = runs.add_subparsers(dest="action", required=True)

    s = actions.add_parser(
        "start",
        help="queue a run of a workflow; print its record as JSON",
        description="Queue a run of WORKFLOW_ID (its latest version unless --version) and "
        "print the run record as JSON. --input values are strings; give other types with "
        "--inputs-json (an --input of the same name wins).",
    )
    _project_argument(s)
    s.add_argument("workflow_id", metavar="WORKFLOW_ID", help="workflow id")
    _run_options(s)
    s.add_argument("--watch", action="store_true", help="then follow its events, as watch")
    s.add_argument("--json", action="store_true", help="with --watch: one JSON event per line")
    add_connection_options(s)
    s.set_defaults(run=runs_start)

    g = actions.add_parser("get", help="print a run's record as JSON")
    _project_argument(g)
    g.add_argument("run_id", metavar="RUN_ID", help="run id")
    add_connection_options(g)
    g.set_defaults(run=runs_get)

    li = actions.add_parser(
        "list",
        help="list a project's runs, newest first",
        description="One line per run: id, status, workflow, version, trigger, start. "
        "Without --all, one page of at most --limit runs.",
    )
    _project_argument(li)
    li.add_argument("--workflow", metavar="ID", help="only this workflow's runs")
    li.add_argument("--status", choices=RUN_STATUSES)
    li.add_argument("--trigger", choices=RUN_TRIGGERS)
    li.add_argument("--version", metavar="V", help="only runs of this version")
    li.add_argument("--started-after", metavar="DATE", help="ISO 8601 date and time")
    li.add_argument("--started-before", metavar="DATE", help="ISO 8601 date and time")
    li.add_argument(
        "--limit", type=int, metavar="N", help="runs per page, 1..1000 (server default 100)"
    )
    li.add_argument("--all", action="store_true", help="every page, not just the first")
    li.add_argument("--json", action="store_true", help="print a JSON array of run records")
    add_connection_options(li)
    li.set_defaults(run=runs_list)

    w = actions.add_parser(
        "watch",
        help="print a run's events as they happen; exit 0 if it succeeded, else 1",
        description="Print each event of RUN_ID (from its first) on a line until the run "
        "ends; a broken stream is resumed where it stopped. Exit 0 if the run succeeded, "
        "1 if it ended otherwise.",
    )
    _project_argument(w)
    w.add_argument("run_id", metavar="RUN_ID", help="run id")
    w.add_argument("--json", action="store_true", help="one JSON object per event: id, event, data")
    add_connection_options(w)
    w.set_defaults(run=runs_watch)

    c = actions.add_parser("cancel", help="cancel a run; print its record as JSON")
    _project_argument(c)
    c.add_argument("run_id", metavar="RUN_ID", help="run id")
    add_connection_options(c)
    c.set_defaults(run=runs_cancel)


def _project_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("project", help="project id")


def _name_value(text: str) -> tuple[str, str]:
    name, equals, value = text.partition("=")
    if not equals or not name:
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=VALUE")
    return name, value


def _print_json(data: Any) -> None:
    print(json.dumps(data), flush=True)


async def runs_start(args: argparse.Namespace) -> None:
    """``libflow runs start``: queue a run, print its record; with --watch, follow it."""
    inputs = _inputs(args.inputs_json, args.input)
    async with client_of(args) as client:
        run = await client.workflows.start(
            args.workflow_id, inputs, event=args.event, version=args.version
        )
        _print_json(run)
        if args.watch:
            await _watch(client, run["runId"], args.json)


def _inputs(inputs_json: str | None, pairs: list[tuple[str, str]]) -> dict[str, Any] | None:
    """The run's inputs: --inputs-json, then each --input over it; None when neither."""
    if inputs_json is None and not pairs:
        return None
    inputs: dict[str, Any] = {}
    if inputs_json is not None:
        try:
            given = json.loads(inputs_json)
        except ValueError as err:
            raise CliError(f"--inputs-json is not JSON: {err}") from err
        if not isinstance(given, dict):
            raise CliError("--inputs-json must be a JSON object")
        inputs.update(given)
    inputs.update(pairs)
    return inputs


async def runs_get(args: argparse.Namespace) -> None:
    """``libflow runs get``: print a run's record."""
    async with client_of(args) as client:
        _print_json(await client.runs.get(args.run_id))


async def runs_cancel(args: argparse.Namespace) -> None:
    """``libflow runs cancel``: cancel a run, print its record (it ends within a second)."""
    async with client_of(args) as client:
        _print_json(await client.runs.cancel(args.run_id))


async def runs_list(args: argparse.Namespace) -> None:
    """``libflow runs list``: the project's runs, newest first; every page with --all."""
    if args.limit is not None and not 1 <= args.limit <= 1000:
        raise CliError("--limit must be 1..1000")
    limit = args.limit or 100
    printed = 0
    async with client_of(args) as client:
        runs = client.runs.iter(
            workflow_id=args.workflow,
            status=args.status,
            trigger=args.trigger,
            version=args.version,
            started_after=args.started_after,
            started_before=args.started_before,
            page_size=limit,
        )
        # Printed as they come: --all over a long history never holds it all.
        async for run in runs:
            if args.json:
                sys.stdout.write(("," if printed else "[") + json.dumps(run) + "\n")
            else:
                print(_run_line(dict(run)))
            printed += 1
            if not args.all and printed == limit:
                break
    if args.json:
        print("]" if printed else "[]")
    elif not printed:
        print("no runs")


def _run_line(run: dict[str, Any]) -> str:
    return (
        f"{run.get('runId')}  {run.get('status')!s:<9}  {run.get('workflowId')}  "
        f"v{run.get('version')}  {run.get('trigger')!s:<9}  {run.get('startedDate')}"
    )


async def runs_watch(args: argparse.Namespace) -> None:
    """``libflow runs watch``: print the run's events until it ends; fail unless it succeeded."""
    async with client_of(args) as client:
        await _watch(client, args.run_id, args.json)


async def _watch(client: LibflowClient, run_id: str, as_json: bool) -> None:
    """Print each event of the run; RunNotSucceeded if it ended other than "succeeded"."""
    record: Any = None
    async for event in client.runs.events(run_id):
        data = event.json_data()
        if as_json:
            _print_json({"id": event.number(), "event": event.name, "data": data})
        else:
            print(event_line(event.name, data), flush=True)
        if event.name == RUN_FINISHED:
            record = data
    ending = record if isinstance(record, dict) else {}
    if ending.get("status") != "succeeded":
        raise RunNotSucceeded(_one_line(f"run {run_id} {_ending(ending)}"))


async def run_sync(args: argparse.Namespace) -> None:
    """``libflow run``: runsync; print the outputs; exit 1 unless the run succeeded."""
    inputs = _inputs(args.inputs_json, args.input)
    async with client_of(args) as client:
        answer = await client.workflows.runsync(
            args.workflow_id, inputs, event=args.event, version=args.version
        )
    if args.json:
        _print_json(answer)
    else:
        for name, value in (answer.get("result", {}).get("outputs") or {}).items():
            print(f"{name} = {json.dumps(value, ensure_ascii=False)}")
    if not answer.get("success"):
        error = answer.get("result", {}).get("error") or {}
        raise RunNotSucceeded(
            _one_line(
                f"run failed ({answer.get('statusCode')}): "
                f"{error.get('code')}: {error.get('message')}"
            )
        )


def add_run_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``libflow run PROJECT WORKFLOW_ID`` (runsync) to the command's subparsers."""
    r = sub.add_parser(
        "run",
        help="run a workflow now (runsync) and print its outputs",
        description="Run WORKFLOW_ID (its latest version unless --version) and wait for "
        "it; print each output as NAME = JSON (--json: the whole answer). Exit 1 unless "
        "the run succeeded.",
    )
    _project_argument(r)
    r.add_argument("workflow_id", metavar="WORKFLOW_ID", help="workflow id")
    _run_options(r)
    r.add_argument("--json", action="store_true", help="print runsync's answer as JSON")
    add_connection_options(r)
    r.set_defaults(run=run_sync)


def _run_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--input",
        action="append",
        default=[],
        type=_name_value,
        metavar="NAME=VALUE",
        help="a string input (repeatable)",
    )
    parser.add_argument("--inputs-json", metavar="JSON", help='inputs as a JSON object: {"n": 3}')
    parser.add_argument("--event", metavar="NAME", help="event node to start (server default: run)")
    parser.add_argument("--version", metavar="V", help="version to run (default: the latest)")


def event_line(name: str, data: Any) -> str:
    """One event as a line for people: its name, then what it is about."""
    fields = data if isinstance(data, dict) else {}
    node = fields.get("node")
    if name in ("run.queued", "run.started"):
        detail = str(fields.get("runId", ""))
    elif name == "node.started":
        detail = str(node)
    elif name == "node.finished":
        ms = fields.get("ms")
        detail = f"{node}  {ms:.1f} ms" if isinstance(ms, int | float) else str(node)
    elif name == "node.failed":
        detail = f"{node}  {fields.get('error')}"
    elif name == "output":
        detail = f"{fields.get('name')} = {_shown(fields)}"
    elif name == "llm.delta":
        detail = f"{node}  {json.dumps(fields.get('text'), ensure_ascii=False)}"
    elif name == RUN_FINISHED:
        detail = _ending(fields)
    else:
        detail = _clip(json.dumps(data, ensure_ascii=False))
    return _one_line(f"{name:<14} {detail}".rstrip())


def _one_line(text: str) -> str:
    """A node's error message may hold line breaks: shown escaped, an event stays a line."""
    return text.replace("\r", "\\r").replace("\n", "\\n")


def _shown(fields: dict[str, Any]) -> str:
    if fields.get("truncated"):
        return "(too large to show: see runs get)"
    return _clip(json.dumps(fields.get("value"), ensure_ascii=False))


def _clip(text: str) -> str:
    return text if len(text) <= SHOWN_VALUE_CHARS else text[: SHOWN_VALUE_CHARS - 3] + "..."


def _ending(record: dict[str, Any]) -> str:
    """How a run ended, from its record: status (code) in N ms, and its error if any."""
    text = f"{record.get('status')} ({record.get('statusCode')})"
    took = _milliseconds(record.get("startedDate"), record.get("finishedDate"))
    if took is not None:
        text += f" in {took:.0f} ms"
    error = record.get("error")
    if isinstance(error, dict):
        at = f" at node {error['node']}" if error.get("node") else ""
        text += f": {error.get('code')}{at}: {error.get('message')}"
    return text


def _milliseconds(started: Any, finished: Any) -> float | None:
    if not isinstance(started, str) or not isinstance(finished, str):
        return None
    try:
        delta = datetime.fromisoformat(finished) - datetime.fromisoformat(started)
    except ValueError:
        return None
    return delta.total_seconds() * 1000
