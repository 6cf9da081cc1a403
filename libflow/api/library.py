"""Handlers of the file library: folders, files, finalize, download, thumbnails."""

from __future__ import annotations

from urllib.parse import urlencode

from aiohttp import web

from libflow import appkeys
from libflow.api.auth import CALLER
from libflow.api.bodies import (
    CreateFileBody,
    CreateFolderBody,
    FinalizeBody,
    parse_body,
    query_limit,
)
from libflow.api.render import file_detail_json, file_json, folder_json
from libflow.errors import ValidationFailed
from libflow.ids import iso
from libflow.library import files, folders, search

routes = web.RouteTableDef()
PREFIX = "/api/publicv1/projects/{projectId}/library"
MAX_PAGE = 1000
MAX_SEARCH_RESULTS = 100


def _project(request: web.Request) -> str:
    return request.match_info["projectId"]


@routes.get(f"{PREFIX}/dirs")
async def list_folders(request: web.Request) -> web.Response:
    """List the project's folders."""
    return web.json_response(
        [folder_json(f) for f in await folders.list_folders(_project(request))]
    )


@routes.post(f"{PREFIX}/dirs")
async def create_folder(request: web.Request) -> web.Response:
    """Create a folder under root or another folder."""
    body = await parse_body(request, CreateFolderBody)
    folder = await folders.create_folder(_project(request), body.name, body.parent)
    return web.json_response(folder_json(folder), status=201)


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
    )
    return web.json_response(
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
        project_id=_project(request),
        path=body.path,
        prevent_search=body.preventSearch,
    )
    return web.json_response(file_detail_json(file))


@routes.get(f"{PREFIX}/files")
async def list_files(request: web.Request) -> web.Response:
    """List files newest first; a Link header points at the next page."""
    limit = query_limit(request, default=MAX_PAGE, maximum=MAX_PAGE)
    folder_id = request.query.get("dir") or None
    page, next_cursor = await files.list_files(
        _project(request), folder_id=folder_id, limit=limit, cursor=request.query.get("cursor")
    )
    response = web.json_response([file_json(f) for f in page])
    if next_cursor is not None:
        query = {"limit": str(limit), "cursor": next_cursor}
        if folder_id is not None:
            query["dir"] = folder_id
        base = request.app[appkeys.SETTINGS].resolved_public_base_url
        response.headers["Link"] = f'<{base}{request.path}?{urlencode(query)}>; rel="next"'
    return response


@routes.get(f"{PREFIX}/files/{{fileId}}")
async def get_file(request: web.Request) -> web.Response:
    """One file with its processing state."""
    file = await files.get_file(
        request.app[appkeys.READS], _project(request), request.match_info["fileId"]
    )
    return web.json_response(file_detail_json(file))


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
    query = request.query.get("q", "").strip()
    if not query:
        raise ValidationFailed(
            "q is required: the text to search for",
            details=[{"field": "q", "problem": "missing or empty"}],
        )
    limit = query_limit(request, default=10, maximum=MAX_SEARCH_RESULTS)
    project_id = _project(request)
    folder = request.query.get("dir") or None
    if folder is not None:
        await folders.find_folder(project_id, folder)
    hits = await search.search(
        project_id,
        query,
        limit=limit,
        folder=folder,
        embedder=request.app[appkeys.EMBEDDER],
        vectors=request.app[appkeys.VECTOR_INDEX],
    )
    return web.json_response([hit.to_json() for hit in hits])
