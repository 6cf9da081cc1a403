"""Folders of a project's library: made, listed, renamed, moved and removed.

A folder's files and subfolders refer to it (foreign keys that restrict its deletion), so
the database itself refuses to remove a folder something was put into meanwhile, and a
file or folder cannot be put into one removed meanwhile. Moving a folder changes only its
own row: its files keep their folder, and the search index's copy of it, as they were.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from tortoise.backends.base.client import BaseDBAsyncClient
from tortoise.exceptions import IntegrityError
from tortoise.transactions import in_transaction

from libflow.errors import FolderNotEmpty, NotFound, ValidationFailed
from libflow.ids import possible_id, utcnow
from libflow.models import Folder, LibraryFile, Project
from libflow.paging import after_cursor, page_and_cursor

ROOT = "root"
# How deep folders nest. It bounds the walk up a folder's parents that a create or a
# move makes (one query a level): without it, one request could walk a chain of any
# length that earlier requests built.
MAX_FOLDER_DEPTH = 64
_IDS_PER_QUERY = 500  # ids in one IN (...): well under SQLite's limit of bound values


async def list_folders(
    project_id: str, *, limit: int, cursor: str | None = None
) -> tuple[list[Folder], str | None]:
    """One page of the project's folders, oldest first, and the next page's cursor if any."""
    query = Folder.filter(project_id=project_id)
    if cursor:
        query = after_cursor(query, cursor, "created_at", oldest_first=True)
    found = await query.order_by("created_at", "id").limit(limit + 1)
    return page_and_cursor(found, limit, lambda folder: folder.created_at)


async def find_folder(
    project_id: str, folder_id: str, connection: BaseDBAsyncClient | None = None
) -> Folder | None:
    """The folder ``folder_id`` of the project; None stands for root."""
    if folder_id == ROOT:
        return None
    folder = None
    if possible_id(folder_id):
        folder = await Folder.get_or_none(id=folder_id, project_id=project_id, using_db=connection)
    if folder is None:
        raise NotFound(f"folder {folder_id!r} not found")
    return folder


async def get_folder(project_id: str, folder_id: str) -> Folder:
    """One folder of the project (root is not a folder record: NOT_FOUND)."""
    folder = await find_folder(project_id, folder_id)  # None: root
    if folder is None:
        raise NotFound(f"folder {folder_id!r} not found: root has no record of its own")
    return folder


@asynccontextmanager
async def into_folder(folder_id: str) -> AsyncIterator[None]:
    """Around a write that puts something into ``folder_id``: if the folder was removed
    after it was found, the database refuses the row, and the caller hears NOT_FOUND."""
    try:
        yield
    except IntegrityError as err:
        raise NotFound(f"folder {folder_id!r} not found: it was removed meanwhile") from err


async def create_folder(project_id: str, name: str, parent_id: str) -> Folder:
    """A folder under ``parent_id`` (``root`` or a folder of the same project)."""
    parent = await find_folder(project_id, parent_id)
    if parent is not None:
        await _ancestors(parent)  # refuses one too deep
    async with into_folder(parent_id):
        return await Folder.create(project_id=project_id, name=name, parent=parent)


async def update_folder(
    project_id: str, folder_id: str, *, name: str | None = None, parent_id: str | None = None
) -> Folder:
    """Rename the folder, or move it under ``parent_id`` (root or another folder).

    A folder cannot go into itself or any folder under it. Moves of one project take
    turns (its row is locked), so two moves made at once cannot close a loop between them.
    """
    folder = await get_folder(project_id, folder_id)
    changes: dict[str, object] = {}
    if name is not None:
        changes["name"] = name
    async with in_transaction() as connection:
        if parent_id is not None:
            await Project.filter(id=project_id).using_db(connection).select_for_update()
            parent = await find_folder(project_id, parent_id, connection)
            if parent is not None:
                await _refuse_loop_or_depth(folder, parent, connection)
            changes["parent_id"] = parent.id if parent else None
        if not changes:
            return folder
        changes["updated_at"] = utcnow()
        async with into_folder(parent_id or ROOT):
            updated = await Folder.filter(id=folder.id).using_db(connection).update(**changes)
    if not updated:
        raise NotFound(f"folder {folder_id!r} not found")  # removed meanwhile
    return await get_folder(project_id, folder.id)


async def _refuse_loop_or_depth(
    folder: Folder, parent: Folder, connection: BaseDBAsyncClient
) -> None:
    """VALIDATION_ERROR when ``parent`` is ``folder`` or lies under it, or when ``folder``
    and the folders under it would nest more than MAX_FOLDER_DEPTH deep under ``parent``."""
    above = await _ancestors(parent, connection)
    if folder.id in above:
        raise ValidationFailed(
            "a folder cannot be moved into itself or into a folder under it",
            details=[{"field": "parent", "problem": "is this folder or one under it"}],
        )
    room = MAX_FOLDER_DEPTH - len(above) - 1  # levels left under the moved folder
    if await _levels_below(folder, connection, room + 1) > room:
        raise _too_deep()


async def _levels_below(folder: Folder, connection: BaseDBAsyncClient, most: int) -> int:
    """How many levels of folders lie under ``folder``, counted up to ``most``: one query a
    level (in pieces, for a wide level), at most ``most`` levels."""
    level, levels = [folder.id], 0
    while level and levels < most:
        below: list[str] = []
        for start in range(0, len(level), _IDS_PER_QUERY):
            piece = level[start : start + _IDS_PER_QUERY]
            found = await (
                Folder.filter(parent_id__in=piece).using_db(connection).values_list("id", flat=True)
            )
            below += [str(folder_id) for folder_id in found]
        if not below:
            break
        level, levels = below, levels + 1
    return levels


async def _ancestors(folder: Folder, connection: BaseDBAsyncClient | None = None) -> set[str]:
    """``folder`` and the folders above it; VALIDATION_ERROR when a folder put into it
    would be more than MAX_FOLDER_DEPTH deep (at most that many steps are walked)."""
    chain: set[str] = set()
    current: Folder | None = folder
    while current is not None and current.id not in chain and len(chain) < MAX_FOLDER_DEPTH:
        chain.add(current.id)
        current = (
            await Folder.get_or_none(id=current.parent_id, using_db=connection)
            if current.parent_id
            else None
        )
    if len(chain) >= MAX_FOLDER_DEPTH:
        raise _too_deep()
    return chain


def _too_deep() -> ValidationFailed:
    return ValidationFailed(
        f"folders nest at most {MAX_FOLDER_DEPTH} deep: this would nest them deeper",
        details=[{"field": "parent", "problem": f"more than {MAX_FOLDER_DEPTH} folders deep"}],
    )


async def delete_folder(project_id: str, folder_id: str) -> None:
    """Remove an empty folder; one holding files or folders is FOLDER_NOT_EMPTY."""
    folder = await get_folder(project_id, folder_id)
    files = await LibraryFile.filter(folder_id=folder.id).count()
    folders = await Folder.filter(parent_id=folder.id).count()
    if files or folders:
        raise _not_empty(folder.name, files, folders)
    try:
        await Folder.filter(id=folder.id).delete()
    except IntegrityError as err:  # something was put into it since the counts
        raise _not_empty(folder.name, None, None) from err


def _not_empty(name: str, files: int | None, folders: int | None) -> FolderNotEmpty:
    holds = "files or folders" if files is None else f"{files} file(s) and {folders} folder(s)"
    return FolderNotEmpty(
        f"the folder {name!r} holds {holds}: move or delete them first",
        details={"files": files, "folders": folders},
    )
