"""A typed Python client of libflow's public API (async, with a thin blocking wrapper).

    from libflow.client import LibflowClient

    async with LibflowClient("http://127.0.0.1:8080", api_key, project_id) as libflow:
        record = await libflow.library.upload("report.pdf", progress=print)
        hits = await libflow.library.search("quarterly revenue")
        run = await libflow.workflows.start(workflow_id, {"question": "..."})
        async for event in libflow.runs.events(run["runId"]):
            print(event.name, event.json_data())

It imports nothing of the server: only aiohttp and yarl.
"""

from libflow.client.client import DEFAULT_URL, LibflowClient
from libflow.client.errors import ApiError, LibflowError, NotAnApiAnswer, RateLimitedError
from libflow.client.events import ServerSentEvent
from libflow.client.library import UploadFailed
from libflow.client.sync import SyncLibflowClient

__all__ = [
    "DEFAULT_URL",
    "ApiError",
    "LibflowClient",
    "LibflowError",
    "NotAnApiAnswer",
    "RateLimitedError",
    "ServerSentEvent",
    "SyncLibflowClient",
    "UploadFailed",
]
