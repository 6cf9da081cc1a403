"""What the nodes of one run may reach: the run's project's library, and the outside world."""

from __future__ import annotations

from functools import partial
from typing import Any

from aiohttp import ClientSession

from libflow.db.fast_reads import FastReads
from libflow.engine import InvalidInputs, NodeServices, UnknownEvent
from libflow.engine.nodes.state import ModelProvider
from libflow.engine.run_secrets import RunSecrets
from libflow.errors import LibflowError, NotFound
from libflow.library import search
from libflow.library.embeddings.interface import Embedder
from libflow.library.files import file_text
from libflow.library.folders import find_folder
from libflow.library.metadata import parse_filter
from libflow.library.vectors import PassageFilter, VectorSearch
from libflow.secrets.store import open_secret, sealed_secrets
from libflow.storage import Storage
from libflow.workflows.running import RunControl
from libflow.workflows.runs import run_version
from libflow.workflows.versions import find_run_target
from settings import Settings


class SubRunFailed(LibflowError):
    """A workflow called by a node did not succeed: the calling node fails with this."""

    code = "NODE_FAILED"


def run_services(
    project_id: str,
    *,
    settings: Settings,
    http: ClientSession,
    storage: Storage,
    embedder: Embedder | None,
    vectors: VectorSearch,
    reads: FastReads,
    control: RunControl | None = None,
) -> NodeServices:
    """The services of one run of ``project_id``'s workflow: its library, its workflows."""

    async def search_library(
        query: str,
        limit: int,
        *,
        folder: str | None = None,
        metadata_filter: Any = None,
        mode: str = "hybrid",
    ) -> list[dict[str, Any]]:
        # The node's options are checked as POST .../library/search checks its body.
        labels = {} if metadata_filter is None else parse_filter(metadata_filter)
        where = PassageFilter(folder, labels)
        if folder is not None:
            await find_folder(project_id, folder)
        hits = await search.search(
            project_id,
            search.checked_query(query),
            limit=limit,
            where=where,
            mode=search.SearchMode(mode),
            embedder=embedder,
            vectors=vectors,
        )
        return [hit.to_json(with_metadata=True) for hit in hits]

    async def library_file_text(file_id: str) -> dict[str, Any]:
        return await file_text(storage, reads, project_id, file_id)

    async def call_workflow(
        workflow_id: str,
        version: str | None,
        inputs: dict[str, Any],
        *,
        services: NodeServices,
        parent_run_id: str | None,
        depth: int,
    ) -> dict[str, Any]:
        try:
            target = await find_run_target(project_id, workflow_id, version, reads)
            record, result = await run_version(
                target,
                event="run",
                inputs=inputs,
                trigger="call",
                services=services,
                control=control,
                parent_run_id=parent_run_id,
                depth=depth,
            )
        except (NotFound, UnknownEvent, InvalidInputs) as err:  # refused before it ran
            hint = (
                " (a called workflow starts at its run event)"
                if isinstance(err, UnknownEvent)
                else ""
            )
            raise SubRunFailed(f"workflow {workflow_id}: {err.message}{hint}") from err
        if result.error is not None:
            raise SubRunFailed(
                f"sub-run {record.id} of workflow {workflow_id} ended {result.status}:"
                f" {result.error.message}"
            )
        return result.outputs

    return NodeServices(
        http=http,
        allow_private_addresses=settings.http_allow_private,
        # An operator's setting, not a workflow's: not subject to the private-address guard.
        llm=ModelProvider(settings.llm_base_url, settings.llm_api_key, settings.llm_model),
        search_library=search_library,
        file_text=library_file_text,
        call_workflow=call_workflow,
        # Loaded only if a field reads one; sub-runs share it, and so what it redacts.
        secrets=RunSecrets(partial(sealed_secrets, project_id), partial(open_secret, project_id)),
    )
