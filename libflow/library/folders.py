"""Folders of a project's library."""

from __future__ import annotations

from libflow.errors import NotFound
from libflow.ids import possible_id
from libflow.models import Folder

ROOT = "root"


async def list_folders(project_id: str) -> list[Folder]:
    """Every folder of the project, oldest first."""
    return await Folder.filter(project_id=project_id).order_by("created_at", "id")


async def find_folder(project_id: str, folder_id: str) -> Folder | None:
    """The folder ``folder_id`` of the project; None stands for root."""
    if folder_id == ROOT:
        return None
    folder = None
    if possible_id(folder_id):
        folder = await Folder.get_or_none(id=folder_id, project_id=project_id)
    if folder is None:
        raise NotFound(f"folder {folder_id!r} not found")
    return folder


async def create_folder(project_id: str, name: str, parent_id: str) -> Folder:
    """A folder under ``parent_id`` (``root`` or a folder of the same project)."""
    parent = await find_folder(project_id, parent_id)
    return await Folder.create(project_id=project_id, name=name, parent=parent)
