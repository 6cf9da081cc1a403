"""Workflows through the API: definitions and versions, runs (sync, queued, watched), schedules."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import Any, cast

from libflow.client.errors import ApiError, NotAnApiAnswer
from libflow.client.events import RUN_FINISHED, EventStreamParser, ServerSentEvent, follow_events
from libflow.client.paging import pages
from libflow.client.records import JSON, Run, RunSyncResult, Schedule, Workflow
from libflow.client.transport import Transport, answer_error, json_body


def _run_body(
    inputs: Mapping[str, JSON] | None, event: str | None, version: str | None
) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if inputs is not None:
        body["inputs"] = dict(inputs)
    if event is not None:
        body["runEvent"] = event
    if version is not None:
        body["version"] = version
    return body


class Workflows:
    """One project's workflows and their versions, and running them."""

    def __init__(self, transport: Transport, project_id: str) -> None:
        self._t = transport
        self._base = f"/projects/{project_id}/workflows"

    async def create(self, name: str, definition: JSON) -> Workflow:
        """A new workflow; its definition is version 1."""
        body = {"name": name, "definition": definition}
        answer = await self._t.call("POST", self._t.api_url(self._base), json=body)
        return cast(Workflow, answer.body)

    async def get(self, workflow_id: str) -> Workflow:
        """A workflow with its latest definition and its versions."""
        url = self._t.api_url(f"{self._base}/{workflow_id}")
        return cast(Workflow, (await self._t.call("GET", url)).body)

    async def version(self, workflow_id: str, version: str) -> Workflow:
        """One version ("1", "2", ...) with the definition it was published with."""
        url = self._t.api_url(f"{self._base}/{workflow_id}/versions/{version}")
        return cast(Workflow, (await self._t.call("GET", url)).body)

    async def rename(self, workflow_id: str, name: str) -> Workflow:
        """Give the workflow another name."""
        url = self._t.api_url(f"{self._base}/{workflow_id}")
        return cast(Workflow, (await self._t.call("PATCH", url, json={"name": name})).body)

    async def publish(self, workflow_id: str, definition: JSON) -> Workflow:
        """A new version of the workflow (versions are immutable)."""
        url = self._t.api_url(f"{self._base}/{workflow_id}/versions")
        return cast(
            Workflow, (await self._t.call("POST", url, json={"definition": definition})).body
        )

    async def runsync(
        self,
        workflow_id: str,
        inputs: Mapping[str, JSON] | None = None,
        *,
        event: str | None = None,
        version: str | None = None,
    ) -> RunSyncResult:
        """Run the workflow and wait for its answer ``{success, result: {outputs}, statusCode}``.

        A run that fails answers with its own status code: that is a result, not an error.
        """
        url = self._t.api_url(f"{self._base}/{workflow_id}/runsync")
        answer = await self._t.call(
            "POST", url, json=_run_body(inputs, event, version), check=False
        )
        # A run that failed answers {success: false, ...}: a result. A refused call
        # (unknown workflow, invalid inputs) answers {error, message}: an ApiError.
        if isinstance(answer.body, dict) and "success" in answer.body:
            return cast(RunSyncResult, answer.body)
        if isinstance(answer.body, dict) and "error" in answer.body:
            raise ApiError(f"POST {url}", answer.status, answer.body)
        raise NotAnApiAnswer(f"POST {url}", answer.status, None)

    async def runsync_events(
        self,
        workflow_id: str,
        inputs: Mapping[str, JSON] | None = None,
        *,
        event: str | None = None,
        version: str | None = None,
    ) -> AsyncIterator[ServerSentEvent]:
        """Run the workflow, its events streamed as they happen, the last ``run.finished``."""
        url = self._t.api_url(f"{self._base}/{workflow_id}/runsync")
        headers = {"Authorization": self._t.api_key, "Accept": "text/event-stream"}
        async with self._t.session.post(
            url, json=_run_body(inputs, event, version), headers=headers
        ) as response:
            if response.status >= 400 or not response.content_type.startswith("text/"):
                raise answer_error(f"POST {url}", response, await json_body(response))
            parser = EventStreamParser()
            async for piece in response.content.iter_any():
                for sse in parser.feed(piece):
                    yield sse
                    if sse.name == RUN_FINISHED:
                        return

    async def start(
        self,
        workflow_id: str,
        inputs: Mapping[str, JSON] | None = None,
        *,
        event: str | None = None,
        version: str | None = None,
    ) -> Run:
        """Queue a run; its record (``status: "queued"``) comes back at once."""
        url = self._t.api_url(f"{self._base}/{workflow_id}/runs")
        answer = await self._t.call("POST", url, json=_run_body(inputs, event, version))
        return cast(Run, answer.body)

    async def create_schedule(
        self,
        workflow_id: str,
        cron: str,
        *,
        timezone: str | None = None,
        event: str | None = None,
        inputs: Mapping[str, JSON] | None = None,
    ) -> Schedule:
        """Run the workflow on a five-field cron schedule."""
        body: dict[str, Any] = {"cron": cron}
        if timezone is not None:
            body["timezone"] = timezone
        if event is not None:
            body["event"] = event
        if inputs is not None:
            body["inputs"] = dict(inputs)
        url = self._t.api_url(f"{self._base}/{workflow_id}/schedules")
        return cast(Schedule, (await self._t.call("POST", url, json=body)).body)

    async def schedules(self, workflow_id: str) -> list[Schedule]:
        """The workflow's schedules."""
        url = self._t.api_url(f"{self._base}/{workflow_id}/schedules")
        return cast(list[Schedule], (await self._t.call("GET", url)).body)

    async def schedule(self, workflow_id: str, schedule_id: str) -> Schedule:
        """One schedule, with its next run's date."""
        url = self._t.api_url(f"{self._base}/{workflow_id}/schedules/{schedule_id}")
        return cast(Schedule, (await self._t.call("GET", url)).body)

    async def delete_schedule(self, workflow_id: str, schedule_id: str) -> None:
        """Stop a schedule."""
        url = self._t.api_url(f"{self._base}/{workflow_id}/schedules/{schedule_id}")
        await self._t.call("DELETE", url, expect_json=False)

    async def list(self) -> list[Workflow]:
        """Every workflow of the project, newest first, with its latest version (all pages)."""
        return [workflow async for workflow in pages(self._t, self._t.api_url(self._base))]


class Runs:
    """One project's runs: history, one run's record, its events, cancel."""

    def __init__(self, transport: Transport, project_id: str) -> None:
        self._t = transport
        self._project = f"/projects/{project_id}"

    def iter(
        self,
        *,
        workflow_id: str | None = None,
        status: str | None = None,
        trigger: str | None = None,
        version: str | None = None,
        started_after: str | None = None,
        started_before: str | None = None,
        page_size: int = 100,
    ) -> AsyncIterator[Run]:
        """Runs, newest first, filtered; pages are fetched as they are read."""
        params = {"limit": str(page_size)}
        for name, value in (
            ("workflowId", workflow_id),
            ("status", status),
            ("trigger", trigger),
            ("version", version),
            ("startedAfter", started_after),
            ("startedBefore", started_before),
        ):
            if value is not None:
                params[name] = value
        return cast(
            AsyncIterator[Run], pages(self._t, self._t.api_url(f"{self._project}/runs"), params)
        )

    async def list(self, *, limit: int = 100, **filters: str) -> list[Run]:
        """At most ``limit`` runs, newest first (filters as ``iter``)."""
        found: list[Run] = []
        async for run in self.iter(page_size=min(max(limit, 1), 1000), **filters):
            found.append(run)
            if len(found) >= limit:
                break
        return found

    async def get(self, run_id: str) -> Run:
        """A run's record."""
        url = self._t.api_url(f"{self._project}/runs/{run_id}")
        return cast(Run, (await self._t.call("GET", url)).body)

    async def cancel(self, run_id: str) -> Run:
        """Ask a queued or running run to stop; RUN_FINISHED (409) if it already ended."""
        url = self._t.api_url(f"{self._project}/runs/{run_id}/cancel")
        return cast(Run, (await self._t.call("POST", url)).body)

    def events(
        self, run_id: str, *, last_event_id: str | None = None
    ) -> AsyncIterator[ServerSentEvent]:
        """The run's events from the first (or after ``last_event_id``) to run.finished."""
        url = self._t.api_url(f"{self._project}/runs/{run_id}/events")
        return follow_events(self._t, url, last_event_id)

    async def wait(self, run_id: str) -> Run:
        """The run's final record, once it has finished (followed through its events)."""
        async for sse in self.events(run_id):
            if sse.name == RUN_FINISHED:
                return cast(Run, json.loads(sse.data))
        return await self.get(run_id)
