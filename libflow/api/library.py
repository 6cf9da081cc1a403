"""Handlers of the file library: folders, files, finalize, download, thumbnails."""

from __future__ import annotations

from aiohttp import web

from libflow import appkeys
from libflow.api.auth import CALLER
from libflow.api.bodies import (
    CreateFileBody,
    CreateFolderBody,
    FinalizeBody,
    SearchBody,
    UpdateFileBody,
    UpdateFolderBody,
    parse_body,
    query_limit,
)
from libflow.api.render import file_detail_json, file_json, folder_json
from libflow.api.responses import json_response, page_response
from libflow.errors import ValidationFailed
from libflow.ids import iso
from libflow.library import file_changes, files, folders, passages, search
from libflow.library.vectors import PassageFilter
from libflow.paging import MAX_PAGE

routes = web.RouteTableDef()
PREFIX = "/api/publicv1/projects/{projectId}/library"
MAX_SEARCH_RESULTS = 100
DEFAULT_CHUNK_PAGE = 100


def _project(request: web.Request) -> str:
    return request.match_info["projectId"]


@routes.get(f"{PREFIX}/dirs")
async def list_folders(request: web.Request) -> web.Response:
    """The project's folders, oldest first; a Link header points at the next page."""
    limit = query_limit(request, default=MAX_PAGE, maximum=MAX_PAGE)
    page, next_cursor = await folders.list_folders(
        _project(request), limit=limit, cursor=request.query.get("cursor")
    )
    return page_response(
        request, [folder_json(f) for f in page], limit=limit, next_cursor=next_cursor
    )


@routes.post(f"{PREFIX}/dirs")
async def create_folder(request: web.Request) -> web.Response:
    """Create a folder under root or another folder."""
    body = await parse_body(request, CreateFolderBody)
    folder = await folders.create_folder(_project(request), body.name, body.parent)
    return json_response(folder_json(folder), status=201)


@routes.get(f"{PREFIX}/dirs/{{dirId}}")
async def get_folder(request: web.Request) -> web.Response:
    """One folder."""
    folder = await folders.get_folder(_project(request), request.match_info["dirId"])
    return json_response(folder_json(folder))


@routes.patch(f"{PREFIX}/dirs/{{dirId}}")
async def update_folder(request: web.Request) -> web.Response:
    """Rename a folder, or move it under root or another folder."""
    body = await parse_body(request, UpdateFolderBody)
    folder = await folders.update_folder(
        _project(request), request.match_info["dirId"], name=body.name, parent_id=body.parent
    )
    return json_response(folder_json(folder))


@routes.delete(f"{PREFIX}/dirs/{{dirId}}")
async def delete_folder(request: web.Request) -> web.Response:
    """Remove an empty folder."""
    await folders.delete_folder(_project(request), request.match_info["dirId"])
    return web.Response(status=204)


@routes.post(f"{PREFIX}/files")
async def create_file(request: web.Request) -> web.Response:
    """Create a file record and return the signed URL its bytes go to."""
    body = await parse_body(request, CreateFileBody)
    caller = request[CALLER]
    settings = request.app[appkeys.SETTINGS]
    file, upload_url = await files.create_file_record(
        request.app[appkeys.STORAGE],
        project_id=caller.project_id,
        name=body.originalname,
        file_type=body.fileType,
        folder_id=body.dir,
        uploader_name=caller.name,
        uploader_email=caller.email,
        url_ttl=settings.upload_url_ttl_seconds,
        metadata=body.metadata,
    )
    return json_response(
        {
            "documentId": file.id,
            "storageLink": upload_url,
            "mimeType": file.mime_type,
            "path": file.storage_key,
            "createdDate": iso(file.created_at),
            "dir": file.folder_id or "root",
        },
        status=201,
    )


@routes.post(f"{PREFIX}/files:complete")
async def finalize_upload(request: web.Request) -> web.Response:
    """Finalize an upload: check the stored bytes and queue processing."""
    body = await parse_body(request, FinalizeBody)
    file = await files.finalize_upload(
        request.app[appkeys.STORAGE],
        request.app[appkeys.JOBS],
        request.app[appkeys.READS],
        project_id=_project(request),
        path=body.path,
        prevent_search=body.preventSearch,
        max_bytes=request.app[appkeys.SETTINGS].max_upload_bytes,
    )
    return json_response(file_detail_json(file))


@routes.get(f"{PREFIX}/files")
async def list_files(request: web.Request) -> web.Response:
    """List files newest first; a Link header points at the next page."""
    limit = query_limit(request, default=MAX_PAGE, maximum=MAX_PAGE)
    folder_id = request.query.get("dir") or None
    page, next_cursor = await files.list_files(
        request.app[appkeys.READS],
        _project(request),
        folder_id=folder_id,
        limit=limit,
        cursor=request.query.get("cursor"),
    )
    return page_response(
        request, [file_json(f) for f in page], limit=limit, next_cursor=next_cursor
    )


@routes.get(f"{PREFIX}/files/{{fileId}}")
async def get_file(request: web.Request) -> web.Response:
    """One file with its processing state."""
    file = await files.get_file_record(
        request.app[appkeys.READS], _project(request), request.match_info["fileId"]
    )
    return json_response(file_detail_json(file))


@routes.patch(f"{PREFIX}/files/{{fileId}}")
async def update_file(request: web.Request) -> web.Response:
    """Rename, move or relabel a file; the search index follows before the answer."""
    body = await parse_body(request, UpdateFileBody)
    file = await file_changes.update_file(
        _project(request),
        request.match_info["fileId"],
        name=body.name,
        folder_id=body.dir,
        metadata=body.metadata,
    )
    return json_response(file_detail_json(file))


@routes.get(f"{PREFIX}/files/{{fileId}}/chunks")
async def list_chunks(request: web.Request) -> web.Response:
    """The file's passages as indexed, in file order; a Link header points at the next page."""
    limit = query_limit(request, default=DEFAULT_CHUNK_PAGE, maximum=MAX_PAGE)
    page, next_cursor = await passages.list_passages(
        _project(request),
        request.match_info["fileId"],
        limit=limit,
        cursor=request.query.get("cursor"),
    )
    return page_response(request, page, limit=limit, next_cursor=next_cursor)


@routes.post(f"{PREFIX}/files/{{fileId}}/reprocess")
async def reprocess_file(request: web.Request) -> web.Response:
    """Queue the file's processing again: 202 with the record (``updating`` until done)."""
    file = await file_changes.reprocess_file(
        request.app[appkeys.JOBS], _project(request), request.match_info["fileId"]
    )
    return json_response(file_detail_json(file), status=202)


@routes.delete(f"{PREFIX}/files/{{fileId}}")
async def delete_file(request: web.Request) -> web.Response:
    """Delete a file, its bytes and its thumbnail."""
    await files.delete_file(
        request.app[appkeys.STORAGE],
        request.app[appkeys.READS],
        _project(request),
        request.match_info["fileId"],
    )
    return web.Response(status=204)


@routes.get(f"{PREFIX}/files/{{fileId}}/download")
async def download_file(request: web.Request) -> web.Response:
    """Redirect to a short-lived signed URL of the bytes."""
    url = await files.download_url(
        request.app[appkeys.STORAGE],
        request.app[appkeys.READS],
        _project(request),
        request.match_info["fileId"],
        request.app[appkeys.SETTINGS].download_url_ttl_seconds,
    )
    return web.Response(status=302, headers={"Location": url, "Cache-Control": "no-store"})


@routes.get(f"{PREFIX}/files/{{fileId}}/thumbnail")
async def download_thumbnail(request: web.Request) -> web.Response:
    """Redirect to a signed URL of the WEBP thumbnail; 404 until one exists."""
    url = await files.thumbnail_url(
        request.app[appkeys.STORAGE],
        request.app[appkeys.READS],
        _project(request),
        request.match_info["fileId"],
        request.app[appkeys.SETTINGS].download_url_ttl_seconds,
    )
    return web.Response(status=302, headers={"Location": url, "Cache-Control": "no-store"})


@routes.get(f"{PREFIX}/search")
async def search_library(request: web.Request) -> web.Response:
    """Hybrid keyword and semantic search over the project's documents."""
    # As POST's ``query`` is checked: the same text is the same search either way.
    query = search.checked_query(request.query.get("q", ""), "q")
    limit = query_limit(request, default=10, maximum=MAX_SEARCH_RESULTS)
    where = PassageFilter(request.query.get("dir") or None)
    hits = await _search(request, query, limit, where, _search_mode(request))
    return json_response([hit.to_json() for hit in hits])


def _search_mode(request: web.Request) -> search.SearchMode:
    """The ``mode`` query parameter: hybrid when absent."""
    raw = request.query.get("mode", search.SearchMode.HYBRID.value)
    try:
        return search.SearchMode(raw)
    except ValueError:
        modes = ", ".join(mode.value for mode in search.SearchMode)
        raise ValidationFailed(
            f"mode must be one of {modes}",
            details=[{"field": "mode", "problem": f"not one of {modes}"}],
        ) from None


@routes.post(f"{PREFIX}/search")
async def search_library_filtered(request: web.Request) -> web.Response:
    """Search with metadata filters and a mode; each hit carries its file's metadata."""
    body = await parse_body(request, SearchBody)
    where = PassageFilter(body.dir, dict(body.filter))
    hits = await _search(request, body.query, body.limit, where, search.SearchMode(body.mode))
    return json_response([hit.to_json(with_metadata=True) for hit in hits])


async def _search(
    request: web.Request,
    query: str,
    limit: int,
    where: PassageFilter,
    mode: search.SearchMode = search.SearchMode.HYBRID,
) -> list[search.SearchHit]:
    project_id = _project(request)
    if where.folder is not None:
        await folders.find_folder(project_id, where.folder)
    return await search.search(
        project_id,
        query,
        limit=limit,
        where=where,
        mode=mode,
        embedder=request.app[appkeys.EMBEDDER],
        vectors=request.app[appkeys.VECTOR_INDEX],
    )
