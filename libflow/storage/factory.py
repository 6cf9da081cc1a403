"""Open the storage backend the settings name."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from libflow.storage import Storage
from libflow.storage.local import LocalStorage
from libflow.storage.signing import UrlSigner
from settings import Settings


def local_storage(settings: Settings) -> LocalStorage:
    """The local backend, signing URLs that point back at this server."""
    signer = UrlSigner(settings.signing_key(), settings.resolved_public_base_url)
    return LocalStorage(settings.storage_dir, signer)


@asynccontextmanager
async def open_storage(settings: Settings) -> AsyncIterator[Storage]:
    """The configured backend, open for the lifetime of the block."""
    if settings.storage == "s3":
        from libflow.storage.s3 import open_s3_storage

        async with open_s3_storage(
            endpoint_url=settings.s3_endpoint_url,
            bucket=settings.s3_bucket,
            region=settings.s3_region,
        ) as s3:
            yield s3
    else:
        local = local_storage(settings)
        # Uploads cut off by a crash left their temp files: nothing else removes them.
        await asyncio.to_thread(local.remove_stale_temp_files)
        yield local
