"""Deleting the objects a library file has in storage: its bytes, text and thumbnail.

The record is deleted first (it is the source of truth); an object that storage cannot
delete then is left behind, logged, and costs space only: nothing refers to it any more.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from libflow.storage import Storage, StorageError

logger = logging.getLogger(__name__)


async def delete_objects(storage: Storage, file_id: str, keys: Iterable[str | None]) -> None:
    """Delete each key (None: an object the file never had); failures are logged only."""
    for key in keys:
        if key is None:
            continue
        try:
            await storage.delete(key)
        except StorageError:
            logger.warning("could not delete object %s of file %s", key, file_id)
