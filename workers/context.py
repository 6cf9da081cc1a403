"""What every job finds in its context, the same in arq workers and in-process."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiohttp import ClientSession

from libflow.engine import NodeServices
from libflow.file_lookup import FileLookup
from libflow.inline_reads import InlineReads
from libflow.jobs import JobQueue
from libflow.search import VectorIndex
from libflow.storage import Storage
from settings import Settings
from workers.embeddings import Embedder

RESOURCES = "libflow"


@dataclass(frozen=True, slots=True)
class JobResources:
    """The process-wide clients a job may use."""

    settings: Settings
    storage: Storage
    embedder: Embedder | None
    jobs: JobQueue
    http: ClientSession
    vectors: VectorIndex
    file_lookup: FileLookup
    reads: InlineReads

    def node_services(self, project_id: str) -> NodeServices:
        """What the nodes of a workflow run of ``project_id`` may reach."""
        # Imported here: node_services reaches libflow.files, which imports this module.
        from libflow.node_services import node_services

        return node_services(
            project_id,
            settings=self.settings,
            http=self.http,
            storage=self.storage,
            embedder=self.embedder,
            vectors=self.vectors,
            file_lookup=self.file_lookup,
        )


def job_resources(ctx: dict[str, Any]) -> JobResources:
    """The resources the worker or the server put in the job context at start-up."""
    resources = ctx[RESOURCES]
    assert isinstance(resources, JobResources)
    return resources
