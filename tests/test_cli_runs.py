"""``libflow runs``, run as a real process against a real server process."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

from libflow.client.events import EventStreamParser
from tests import test_cli
from tests.tcp_proxy import TcpProxy
from tests.test_cli import (
    API,
    ROOT,
    Server,
    assert_one_line_failure,
    clean_env,
    http,
    libflow,
    ok_json,
    running_server,
)

# test_cli's fixtures: a run_server.py process of this module's own, and a project made on
# its database with the CLI.
server = test_cli.server
project = test_cli.project

Project = tuple[str, str]


def slow_greeter(seconds: float = 1, *, greeting: str = "Hi") -> dict[str, Any]:
    """start -> wait (a delay of ``seconds``) -> out: outputs ``greeting: "<greeting> <name>"``.

    A second event node, ``again``, starts the same path.
    """
    return {
        "nodes": [
            {"id": "start", "type": "event", "event": "run"},
            {"id": "again", "type": "event", "event": "again"},
            {"id": "who", "type": "input", "name": "name", "valueType": "string"},
            {"id": "count", "type": "input", "name": "count", "valueType": "number"},
            {"id": "wait", "type": "delay", "seconds": seconds},
            {
                "id": "out",
                "type": "set_output",
                "name": "greeting",
                "value": greeting + " {{ inputs.name }}",
            },
        ],
        "edges": [
            {"from": "start", "to": "wait"},
            {"from": "again", "to": "wait"},
            {"from": "wait", "to": "out"},
        ],
    }


FAILING = {
    "nodes": [
        {"id": "start", "type": "event", "event": "run"},
        {"id": "boom", "type": "fail", "message": "no luck today", "statusCode": 422},
    ],
    "edges": [{"from": "start", "to": "boom"}],
}


def new_workflow(server: Server, project: Project, definition: dict[str, Any]) -> str:
    """A workflow made through the API; its id."""
    project_id, key = project
    body = {"name": "runner", "definition": definition}
    reply = http("POST", f"{server.url}{API}/projects/{project_id}/workflows", key, body)
    assert reply.status == 201, reply.body
    workflow_id: str = reply.json()["workflowId"]
    return workflow_id


def queue_run(server: Server, project: Project, workflow_id: str, **body: Any) -> str:
    """A run queued through the API (POST runs); its id."""
    project_id, key = project
    url = f"{server.url}{API}/projects/{project_id}/workflows/{workflow_id}/runs"
    reply = http("POST", url, key, body)
    assert reply.status == 202, reply.body
    run_id: str = reply.json()["runId"]
    return run_id


def get_run(server: Server, project: Project, run_id: str) -> dict[str, Any]:
    """The run record as the API returns it."""
    project_id, key = project
    reply = http("GET", f"{server.url}{API}/projects/{project_id}/runs/{run_id}", key)
    assert reply.status == 200, reply.body
    record: dict[str, Any] = reply.json()
    return record


def wait_for_status(
    server: Server, project: Project, run_id: str, *statuses: str
) -> dict[str, Any]:
    """Poll the run's record until its status is one of ``statuses``."""
    deadline = time.monotonic() + 30
    while True:
        record = get_run(server, project, run_id)
        if record["status"] in statuses:
            return record
        assert time.monotonic() < deadline, record
        time.sleep(0.05)


def runs(server: Server, project: Project, action: str, *args: str, url: str = "") -> Any:
    """``libflow runs ACTION`` with --url and --api-key: options first, then ``--`` and ids."""
    project_id, key = project
    options = [a for a in args if a.startswith("-")]
    ids = [a for a in args if not a.startswith("-")]
    return libflow(
        server.data_dir,
        *("runs", action, "--url", url or server.url, "--api-key", key, *options),
        *("--", project_id, *ids),
    )


def event_names(stdout: str) -> list[list[str]]:
    """Each human-readable event line as [event, subject], leaving out timings and ids."""
    lines = [line.split() for line in stdout.splitlines()]
    return [line[:1] if line[0].startswith("run.") else line[:2] for line in lines]


# The lines `watch` prints for a run of slow_greeter queued with POST runs, as [event, subject].
SLOW_GREETER_EVENTS = [
    ["run.queued"],
    ["run.started"],
    ["node.started", "start"],
    ["node.finished", "start"],
    ["node.started", "wait"],
    ["node.finished", "wait"],
    ["node.started", "out"],
    ["output", "greeting"],
    ["node.finished", "out"],
    ["run.finished"],
]


async def runs_live(
    server: Server, project: Project, action: str, *options: str, ident: str, url: str = ""
) -> asyncio.subprocess.Process:
    """``libflow runs ACTION`` started as a process whose stdout the test reads as it comes."""
    project_id, key = project
    env = clean_env(server.data_dir)
    # As in a user's shell: stdout to a pipe is block-buffered unless the command flushes.
    env.pop("PYTHONUNBUFFERED", None)
    return await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "libflow", "runs", action, *options),
        *("--url", url or server.url, "--api-key", key, "--", project_id, ident),
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def read_line(process: asyncio.subprocess.Process) -> str:
    """The next line the process prints ("" at its end)."""
    assert process.stdout is not None
    return (await asyncio.wait_for(process.stdout.readline(), 30)).decode()


# runs start


def test_start_queues_a_run_and_prints_its_record(server: Server, project: Project) -> None:
    workflow_id = new_workflow(server, project, slow_greeter(0))

    started = ok_json(runs(server, project, "start", "--input=name=Ada", workflow_id))

    assert started["workflowId"] == workflow_id
    assert (started["status"], started["trigger"]) == ("queued", "api_async")
    assert started["inputs"]["name"] == "Ada"
    finished = wait_for_status(server, project, started["runId"], "succeeded")
    assert finished["outputs"] == {"greeting": "Hi Ada"}


def test_start_with_inputs_json_event_and_version(server: Server, project: Project) -> None:
    project_id, key = project
    workflow_id = new_workflow(server, project, slow_greeter(0, greeting="Hi"))
    url = f"{server.url}{API}/projects/{project_id}/workflows/{workflow_id}/versions"
    reply = http("POST", url, key, {"definition": slow_greeter(0, greeting="Welcome")})
    assert reply.status == 201, reply.body

    started = ok_json(
        runs(
            server,
            project,
            "start",
            '--inputs-json={"name": "Ann", "count": 3}',
            "--input=name=Bo",
            "--event=again",
            "--version=1",
            workflow_id,
        )
    )

    assert (started["version"], started["event"]) == ("1", "again")
    assert started["inputs"] == {"name": "Bo", "count": 3}
    finished = wait_for_status(server, project, started["runId"], "succeeded")
    assert finished["outputs"] == {"greeting": "Hi Bo"}


def test_start_with_watch_prints_the_record_then_each_event(
    server: Server, project: Project
) -> None:
    workflow_id = new_workflow(server, project, slow_greeter(0.2))

    result = runs(server, project, "start", "--watch", "--input=name=Cy", workflow_id)

    assert result.returncode == 0, result.stderr
    record_line, *event_lines = result.stdout.splitlines()
    record = json.loads(record_line)
    assert record["status"] == "queued"
    assert event_names("\n".join(event_lines)) == SLOW_GREETER_EVENTS
    assert event_lines[0].split() == ["run.queued", record["runId"]]
    assert event_lines[-1].startswith("run.finished   succeeded (200) in ")


def test_start_of_an_unknown_event_fails_with_the_api_message(
    server: Server, project: Project
) -> None:
    workflow_id = new_workflow(server, project, slow_greeter(0))
    line = assert_one_line_failure(runs(server, project, "start", "--event=nope", workflow_id))
    assert "400 UNKNOWN_EVENT" in line
    assert "no event node for event 'nope'" in line


def test_start_with_inputs_json_that_is_not_an_object_fails_in_one_line(
    server: Server, project: Project
) -> None:
    result = runs(server, project, "start", "--inputs-json=[1, 2]", "someworkflow")
    assert "--inputs-json must be a JSON object" in assert_one_line_failure(result)


# runs get


def test_get_prints_the_run_record(server: Server, project: Project) -> None:
    workflow_id = new_workflow(server, project, slow_greeter(0))
    run_id = queue_run(server, project, workflow_id, inputs={"name": "Di"})
    record = wait_for_status(server, project, run_id, "succeeded")

    assert ok_json(runs(server, project, "get", run_id)) == record


def test_get_of_an_unknown_run_fails_with_the_api_message(server: Server, project: Project) -> None:
    result = runs(server, project, "get", "nosuchrun")
    line = assert_one_line_failure(result)
    assert "404 NOT_FOUND: run 'nosuchrun' not found" in line
    assert result.stdout == ""


def test_get_reads_url_and_key_from_the_environment(server: Server, project: Project) -> None:
    project_id, key = project
    workflow_id = new_workflow(server, project, slow_greeter(0))
    run_id = queue_run(server, project, workflow_id)
    env = clean_env(server.data_dir, LIBFLOW_URL=server.url, LIBFLOW_API_KEY=key)

    result = libflow(server.data_dir, "runs", "get", "--", project_id, run_id, env=env)

    assert ok_json(result)["runId"] == run_id


def test_get_without_an_api_key_fails_in_one_line(server: Server) -> None:
    result = libflow(server.data_dir, "runs", "get", "--url", server.url, "--", "p", "r")
    assert "API key" in assert_one_line_failure(result)


# runs list


def test_list_prints_one_line_per_run_newest_first(server: Server, project: Project) -> None:
    workflow_id = new_workflow(server, project, slow_greeter(0))
    older = queue_run(server, project, workflow_id)
    wait_for_status(server, project, older, "succeeded")
    newer = queue_run(server, project, workflow_id)
    wait_for_status(server, project, newer, "succeeded")

    result = runs(server, project, "list", f"--workflow={workflow_id}")

    assert result.returncode == 0, result.stderr
    rows = [line.split() for line in result.stdout.splitlines()]
    assert [row[:5] for row in rows] == [
        [newer, "succeeded", workflow_id, "v1", "api_async"],
        [older, "succeeded", workflow_id, "v1", "api_async"],
    ]


def test_list_filters_by_status_and_trigger(server: Server, project: Project) -> None:
    good = new_workflow(server, project, slow_greeter(0))
    bad = new_workflow(server, project, FAILING)
    wait_for_status(server, project, queue_run(server, project, good), "succeeded")
    failed = queue_run(server, project, bad)
    wait_for_status(server, project, failed, "failed")

    listed = ok_json(runs(server, project, "list", "--status=failed", "--json"))
    assert [run["runId"] for run in listed] == [failed]
    assert ok_json(runs(server, project, "list", "--trigger=schedule", "--json")) == []
    empty = runs(server, project, "list", "--trigger=schedule")
    assert (empty.returncode, empty.stdout) == (0, "no runs\n")


def test_list_all_follows_the_next_page_links(server: Server, project: Project) -> None:
    workflow_id = new_workflow(server, project, slow_greeter(0))
    queued = [queue_run(server, project, workflow_id) for _ in range(3)]
    for run_id in queued:
        wait_for_status(server, project, run_id, "succeeded")

    first_page = ok_json(runs(server, project, "list", "--limit=2", "--json"))
    every_page = ok_json(runs(server, project, "list", "--limit=2", "--all", "--json"))

    assert [run["runId"] for run in first_page] == queued[::-1][:2]
    assert [run["runId"] for run in every_page] == queued[::-1]


def test_list_with_a_bad_date_fails_with_the_api_message(server: Server, project: Project) -> None:
    result = runs(server, project, "list", "--started-after=yesterday")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    first, *details = result.stderr.strip().splitlines()
    assert "400 VALIDATION_ERROR: invalid query: startedAfter" in first
    assert details == ["  startedAfter: must be an ISO 8601 date and time"]


# runs watch


async def test_watch_prints_each_event_in_order_as_it_happens(
    server: Server, project: Project
) -> None:
    workflow_id = new_workflow(server, project, slow_greeter(1.5))

    # start --watch: the events are followed from the moment the run is queued.
    process = await runs_live(
        server, project, "start", "--watch", "--input=name=Ed", ident=workflow_id
    )
    record = json.loads(await read_line(process))
    lines: list[tuple[float, str]] = []
    while line := await read_line(process):
        lines.append((time.monotonic(), line.rstrip("\n")))
    assert await process.wait() == 0

    texts = [text for _, text in lines]
    assert texts[0].split() == ["run.queued", record["runId"]]
    assert event_names("\n".join(texts)) == SLOW_GREETER_EVENTS
    assert 'output         greeting = "Hi Ed"' in texts
    wait_finished = next(text for text in texts if text.startswith("node.finished  wait"))
    # The delay's 1.5 s: the loop's clock and the wall clock its duration is read from
    # may disagree by a fraction of a millisecond (1499.8 was seen).
    assert float(wait_finished.split()[2]) >= 1490
    # Printed as they came, not at the end: the delay separates its start from its end.
    arrived = {text.split()[0] + " " + text.split()[1]: at for at, text in lines}
    assert arrived["node.finished wait"] - arrived["node.started wait"] > 1.0


def test_watch_json_prints_one_object_per_event(server: Server, project: Project) -> None:
    workflow_id = new_workflow(server, project, slow_greeter(0.1))
    run_id = queue_run(server, project, workflow_id, inputs={"name": "Flo"})

    result = runs(server, project, "watch", "--json", run_id)

    assert result.returncode == 0, result.stderr
    events = [json.loads(line) for line in result.stdout.splitlines()]
    assert [event["id"] for event in events] == list(range(1, len(SLOW_GREETER_EVENTS) + 1))
    assert [event["event"] for event in events] == [n[0] for n in SLOW_GREETER_EVENTS]
    assert events[5]["data"]["node"] == "wait"
    assert events[5]["data"]["output"] == {"seconds": 0.1}
    assert events[-1]["data"] == get_run(server, project, run_id)
    assert events[-1]["data"]["status"] == "succeeded"


def test_watch_of_a_failed_run_exits_1_with_its_error(server: Server, project: Project) -> None:
    run_id = queue_run(server, project, new_workflow(server, project, FAILING))

    result = runs(server, project, "watch", run_id)

    assert event_names(result.stdout) == [
        ["run.queued"],
        ["run.started"],
        ["node.started", "start"],
        ["node.finished", "start"],
        ["node.started", "boom"],
        ["node.failed", "boom"],
        ["run.finished"],
    ]
    assert "node.failed    boom  no luck today" in result.stdout
    line = assert_one_line_failure(result)
    assert line.startswith(f"libflow: run {run_id} failed (422) in ")
    assert line.endswith(" ms: NODE_FAILED at node boom: no luck today")


def test_watch_of_an_unknown_run_fails_with_the_api_message(
    server: Server, project: Project
) -> None:
    line = assert_one_line_failure(runs(server, project, "watch", "nosuchrun"))
    assert "404 NOT_FOUND: run 'nosuchrun' not found" in line


async def test_watch_resumes_a_broken_stream_without_losing_or_repeating_events(
    server: Server, project: Project
) -> None:
    workflow_id = new_workflow(server, project, slow_greeter(1))
    run_id = queue_run(server, project, workflow_id, inputs={"name": "Gus"})
    port = int(server.url.rsplit(":", 1)[1])
    proxy = TcpProxy("127.0.0.1", port)
    await proxy.start()
    try:
        process = await runs_live(
            server, project, "watch", ident=run_id, url=f"http://127.0.0.1:{proxy.port}"
        )
        lines: list[str] = []
        while not lines or not lines[-1].startswith("node.started   wait"):
            lines.append(await read_line(process))
            assert lines[-1], lines
        await proxy.cut()  # the connection is reset mid-stream, as by a network failure
        await proxy.start()
        while line := await read_line(process):
            lines.append(line)
        assert process.stderr is not None
        assert await process.wait() == 0, await process.stderr.read()
    finally:
        await proxy.cut()

    assert event_names("".join(lines)) == SLOW_GREETER_EVENTS


async def test_ctrl_c_during_watch_exits_130_in_one_line(server: Server, project: Project) -> None:
    project_id, key = project
    run_id = queue_run(server, project, new_workflow(server, project, slow_greeter(60)))
    process = await runs_live(server, project, "watch", ident=run_id)
    try:
        assert (await read_line(process)).startswith("run.queued")

        process.send_signal(signal.SIGINT)

        assert process.stderr is not None
        stderr = (await asyncio.wait_for(process.stderr.read(), 30)).decode()
        assert await process.wait() == 130
        assert stderr.splitlines() == ["libflow: interrupted"]
    finally:
        if process.returncode is None:
            process.kill()
        http("POST", f"{server.url}{API}/projects/{project_id}/runs/{run_id}/cancel", key)


def test_a_stream_cut_inside_an_event_resumes_before_that_event() -> None:
    parser = EventStreamParser()
    whole = parser.feed(b'retry: 2000\n\nid: 5\nevent: node.started\ndata: {"node":"wait"}\n\n')
    assert [(event.id, event.name) for event in whole] == [("5", "node.started")]

    # The connection breaks after event 6's id and name, before its data.
    assert parser.feed(b"id: 6\nevent: node.finished\n") == []

    assert parser.last_id == "5"  # what Last-Event-ID says on reconnecting
    assert parser.retry_seconds == 2.0


# runs cancel


def test_cancel_stops_a_running_run(server: Server, project: Project) -> None:
    workflow_id = new_workflow(server, project, slow_greeter(60))
    run_id = queue_run(server, project, workflow_id)
    wait_for_status(server, project, run_id, "running")

    cancelled = ok_json(runs(server, project, "cancel", run_id))
    assert cancelled["runId"] == run_id

    watched = runs(server, project, "watch", run_id)
    assert watched.returncode == 1
    assert watched.stdout.splitlines()[-1].startswith("run.finished   cancelled")
    assert "CANCELLED" in assert_one_line_failure(watched)
    assert get_run(server, project, run_id)["status"] == "cancelled"


def test_cancel_of_a_finished_run_fails_with_run_finished(server: Server, project: Project) -> None:
    run_id = queue_run(server, project, new_workflow(server, project, slow_greeter(0)))
    wait_for_status(server, project, run_id, "succeeded")

    line = assert_one_line_failure(runs(server, project, "cancel", run_id))

    assert f"409 RUN_FINISHED: run '{run_id}' has already ended" in line


# rate limits


def test_runs_wait_out_the_rate_limit_instead_of_failing(tmp_path: Path) -> None:
    # One request a second, none saved up: every call after the first meets a 429.
    limited = dict(LIBFLOW_RATE_LIMIT="1", LIBFLOW_RATE_LIMIT_BURST="1", LIBFLOW_EMBEDDER="none")
    with running_server(tmp_path / "data", **limited) as started:
        created = ok_json(libflow(started.data_dir, "projects", "create", "demo", "--json"))
        limited_project = (created["projectId"], created["apiKey"])
        workflow_id = new_workflow(started, limited_project, slow_greeter(0))

        # start, then at once its events; list: page after page.
        watched = [runs(started, limited_project, "start", "--watch", workflow_id) for _ in "ab"]
        listed = runs(started, limited_project, "list", "--limit=1", "--all", "--json")

    for result in watched:
        assert result.returncode == 0, result.stderr
        assert event_names("\n".join(result.stdout.splitlines()[1:])) == SLOW_GREETER_EVENTS
    assert [run["status"] for run in ok_json(listed)] == ["succeeded", "succeeded"]
