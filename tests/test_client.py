"""libflow.client: every route through the typed client, against a live server on both shapes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from libflow.client import ApiError, LibflowClient, SyncLibflowClient
from tests.conftest import Api, fixture_bytes, jobs_running
from tests.webhook_helpers import deliver, echo, event_body, standard_headers
from tests.workflow_helpers import chain, output


@pytest.fixture
async def libflow(shaped_api: Api) -> AsyncIterator[LibflowClient]:
    """A client of the test server's project; on the scaled shape a worker runs meanwhile."""
    url = str(shaped_api.client.make_url("/"))
    async with (
        jobs_running(shaped_api.shape),
        LibflowClient(url, shaped_api.api_key, shaped_api.project_id) as client,
    ):
        yield client


async def test_upload_lists_gets_and_downloads_a_file(
    libflow: LibflowClient, tmp_path: Path
) -> None:
    source = tmp_path / "notes.txt"
    source.write_bytes(b"The emperor penguin breeds in the Antarctic winter.\n" * 40)
    seen: list[tuple[int, int]] = []
    record = await libflow.library.upload(
        source, progress=lambda sent, size: seen.append((sent, size))
    )
    assert record["name"] == "notes.txt" and record["updating"] is True
    assert seen[-1] == (source.stat().st_size, source.stat().st_size)

    done = await libflow.library.wait_processed(record["id"])
    assert done.get("processing", {}).get("status") == "done"
    assert [f["id"] for f in await libflow.library.files()] == [record["id"]]
    target = tmp_path / "back.txt"
    assert await libflow.library.download(record["id"], target) == source.stat().st_size
    assert target.read_bytes() == source.read_bytes()
    as_text = str(tmp_path / "named.txt")  # a path given as text, as upload takes it
    assert await libflow.library.download(record["id"], as_text) == source.stat().st_size


async def test_uploads_bytes_into_a_folder_and_pages_through_the_files(
    libflow: LibflowClient,
) -> None:
    folder = await libflow.library.create_folder("reports")
    assert folder["id"] in {f["id"] for f in await libflow.library.folders()}
    for n in range(3):
        await libflow.library.upload(f"file {n}".encode(), name=f"f{n}.txt", dir=folder["id"])
    paged = [f["name"] async for f in libflow.library.iter_files(dir=folder["id"], page_size=2)]
    assert paged == ["f2.txt", "f1.txt", "f0.txt"]


async def test_renames_moves_and_deletes_a_folder(libflow: LibflowClient) -> None:
    year = await libflow.library.create_folder("2026")
    folder = await libflow.library.create_folder("reprots")
    renamed = await libflow.library.update_folder(folder["id"], name="reports", parent=year["id"])
    assert (renamed["name"], renamed["parent"]) == ("reports", year["id"])
    assert await libflow.library.folder(folder["id"]) == renamed
    with pytest.raises(ApiError) as refused:
        await libflow.library.delete_folder(year["id"])
    assert (refused.value.status, refused.value.code) == (409, "FOLDER_NOT_EMPTY")
    await libflow.library.delete_folder(folder["id"])
    assert [f["id"] for f in await libflow.library.folders()] == [year["id"]]


async def test_searches_and_deletes_a_file(libflow: LibflowClient) -> None:
    record = await libflow.library.upload(fixture_bytes("report.pdf"), name="report.pdf")
    await libflow.library.wait_processed(record["id"])
    hits = await libflow.library.search("zephyr quokka alignment", limit=3)
    assert hits and hits[0]["fileId"] == record["id"]
    await libflow.library.delete_file(record["id"])
    with pytest.raises(ApiError) as refused:
        await libflow.library.file(record["id"])
    assert (refused.value.status, refused.value.code) == (404, "NOT_FOUND")


async def test_an_error_answer_is_an_api_error_with_its_code(libflow: LibflowClient) -> None:
    with pytest.raises(ApiError) as refused:
        await libflow.library.create_file("virus.exe")
    assert refused.value.status == 400
    assert refused.value.code in {"VALIDATION_ERROR", "UNSUPPORTED_FILE_TYPE"}


async def test_runs_a_workflow_in_every_way(libflow: LibflowClient) -> None:
    definition = chain(output("greeting", "hello {{ inputs.name }}"))
    workflow = await libflow.workflows.create("greet", definition)
    workflow_id = workflow["workflowId"]
    assert await libflow.workflows.get(workflow_id)
    await libflow.workflows.publish(workflow_id, definition)
    assert [w["workflowId"] for w in await libflow.workflows.list()] == [workflow_id]
    assert (await libflow.workflows.version(workflow_id, "1"))["definition"] == definition
    assert (await libflow.workflows.rename(workflow_id, "greeter"))["name"] == "greeter"

    answer = await libflow.workflows.runsync(workflow_id, {"name": "Ada"})
    assert answer["success"] and answer["result"]["outputs"] == {"greeting": "hello Ada"}

    events = [e async for e in libflow.workflows.runsync_events(workflow_id, {"name": "Bo"})]
    assert events[-1].name == "run.finished"
    assert events[-1].json_data()["outputs"] == {"greeting": "hello Bo"}

    queued = await libflow.workflows.start(workflow_id, {"name": "Cy"})
    assert queued["status"] == "queued"
    finished = await libflow.runs.wait(queued["runId"])
    assert finished["status"] == "succeeded" and finished["outputs"] == {"greeting": "hello Cy"}
    assert (await libflow.runs.get(queued["runId"]))["status"] == "succeeded"
    listed = await libflow.runs.list(workflow_id=workflow_id, trigger="api_async")
    assert [r["runId"] for r in listed] == [queued["runId"]]
    with pytest.raises(ApiError) as refused:
        await libflow.runs.cancel(queued["runId"])
    assert refused.value.code == "RUN_FINISHED"


@pytest.mark.parametrize("status", [422, 429])  # 429: the run's own, not the rate limiter's
async def test_a_failed_runsync_is_a_result_not_an_error(
    libflow: LibflowClient, status: int
) -> None:
    failing = chain({"id": "boom", "type": "fail", "message": "no luck", "statusCode": status})
    workflow = await libflow.workflows.create("fails", failing)
    answer = await libflow.workflows.runsync(workflow["workflowId"])
    assert (answer["success"], answer["statusCode"]) == (False, status)
    with pytest.raises(ApiError) as refused:
        await libflow.workflows.runsync("0" * 32)
    assert refused.value.status == 404


async def test_cancels_a_running_run(libflow: LibflowClient) -> None:
    slow = chain({"id": "wait", "type": "delay", "seconds": 20}, output("done", "yes"))
    workflow = await libflow.workflows.create("slow", slow)
    run = await libflow.workflows.start(workflow["workflowId"])
    names = []
    async for event in libflow.runs.events(run["runId"]):
        names.append(event.name)
        if event.name == "node.started" and event.json_data()["node"] == "wait":
            assert (await libflow.runs.cancel(run["runId"]))["runId"] == run["runId"]
    assert names[-1] == "run.finished"
    assert (await libflow.runs.get(run["runId"]))["status"] == "cancelled"


async def test_schedules_a_workflow(libflow: LibflowClient) -> None:
    workflow = await libflow.workflows.create(
        "nightly", chain(output("ok", "yes"), event="schedule")
    )
    workflow_id = workflow["workflowId"]
    schedule = await libflow.workflows.create_schedule(workflow_id, "0 3 * * *", timezone="UTC")
    assert (await libflow.workflows.schedule(workflow_id, schedule["scheduleId"]))[
        "cron"
    ] == "0 3 * * *"
    assert len(await libflow.workflows.schedules(workflow_id)) == 1
    await libflow.workflows.delete_schedule(workflow_id, schedule["scheduleId"])
    assert await libflow.workflows.schedules(workflow_id) == []


async def test_webhooks_deliveries_and_replay(libflow: LibflowClient, shaped_api: Api) -> None:
    workflow = await libflow.workflows.create("hook", echo())
    hook = await libflow.webhooks.create(workflow["workflowId"])
    assert hook["secret"] and (await libflow.webhooks.get(hook["webhookId"]))["url"]
    assert [h["webhookId"] for h in await libflow.webhooks.list(workflow["workflowId"])] == [
        hook["webhookId"]
    ]
    body = event_body(n=1)
    response = await deliver(
        shaped_api, hook["webhookId"], body, standard_headers(hook["secret"], body)
    )
    assert response.status == 200
    deliveries: list[Any] = []
    for _ in range(200):
        deliveries = await libflow.webhooks.deliveries(hook["webhookId"])
        if deliveries and deliveries[0]["status"] in {"succeeded", "failed"}:
            break
        await asyncio.sleep(0.05)
    assert deliveries[0]["status"] == "succeeded"
    replayed = await libflow.webhooks.replay(hook["webhookId"], deliveries[0]["deliveryId"])
    assert (await libflow.runs.wait(replayed["runId"]))["trigger"] == "replay"
    rotated = await libflow.webhooks.rotate(hook["webhookId"])
    assert rotated["secret"] != hook["secret"]
    await libflow.webhooks.delete(hook["webhookId"])
    assert await libflow.webhooks.list(workflow["workflowId"]) == []


async def test_secrets_by_name(libflow: LibflowClient) -> None:
    await libflow.secrets.put("TOKEN", "s3cr3t")
    assert [s["name"] for s in await libflow.secrets.list()] == ["TOKEN"]
    await libflow.secrets.delete("TOKEN")
    assert await libflow.secrets.list() == []


async def test_the_sync_client_blocks_and_iterates(api: Api) -> None:
    url = str(api.client.make_url("/"))

    def use_it() -> tuple[list[str], list[str]]:
        with SyncLibflowClient(url, api.api_key, api.project_id) as lf:
            workflow = lf.workflows.create("sync", chain(output("n", "1")))
            run = lf.workflows.start(workflow["workflowId"])
            names = [event.name for event in lf.runs.events(run["runId"])]
            return names, [w["name"] for w in lf.workflows.list()]

    names, workflows = await asyncio.to_thread(use_it)
    assert names[0] == "run.queued" and names[-1] == "run.finished"
    assert workflows == ["sync"]


async def test_updates_a_file_reads_its_passages_and_reprocesses_it(
    libflow: LibflowClient,
) -> None:
    folder = await libflow.library.create_folder("birds")
    record = await libflow.library.upload(
        b"Penguins huddle together through the polar night.", name="night.txt"
    )
    await libflow.library.wait_processed(record["id"])
    moved = await libflow.library.update_file(
        record["id"], name="huddle.txt", dir=folder["id"], metadata={"topic": "birds"}
    )
    assert (moved["name"], moved["dir"], moved["metadata"]) == (
        "huddle.txt",
        folder["id"],
        {"topic": "birds"},
    )
    [passage] = [chunk async for chunk in libflow.library.iter_chunks(record["id"])]
    assert passage["index"] == 0 and "polar night" in passage["text"]
    hits = await libflow.library.search("polar", filter={"topic": "birds"}, mode="keyword")
    assert [hit["fileId"] for hit in hits] == [record["id"]]
    assert await libflow.library.search("polar", filter={"topic": "fish"}) == []

    again = await libflow.library.reprocess(record["id"])
    assert again["updating"] is True
    assert (await libflow.library.wait_processed(record["id"]))["processing"]["status"] == "done"


async def test_health_reports_the_server_ready(libflow: LibflowClient) -> None:
    assert (await libflow.health())["status"] == "ok"
