"""What every job finds in its context, the same in arq workers and in-process."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from libflow.jobs import JobQueue
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


def job_resources(ctx: dict[str, Any]) -> JobResources:
    """The resources the worker or the server put in the job context at start-up."""
    resources = ctx[RESOURCES]
    assert isinstance(resources, JobResources)
    return resources
