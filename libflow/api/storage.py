"""The local storage backend's signed URLs: PUT receives bytes, GET serves them."""

from __future__ import annotations

from aiohttp import web

from libflow import appkeys
from libflow.errors import (
    EmptyUpload,
    Forbidden,
    LengthRequired,
    NotFound,
    PayloadTooLarge,
    ValidationFailed,
)
from libflow.library.filetypes import same_content_type
from libflow.storage.local import InvalidKey, LocalStorage, ShortBody
from libflow.storage.signing import STORAGE_PREFIX, SignatureInvalid, SignedGrant

routes = web.RouteTableDef()
ROUTE = STORAGE_PREFIX + "{key:.+}"


def _verify(request: web.Request, method: str) -> tuple[LocalStorage, SignedGrant]:
    storage = request.app[appkeys.LOCAL_STORAGE]
    if storage is None:
        raise NotFound("this server does not serve storage URLs")
    key = request.match_info["key"]
    try:
        grant = storage.signer.verify(method, key, request.query)
        storage.path_for(key)
    except (SignatureInvalid, InvalidKey) as err:
        raise Forbidden(str(err)) from err
    return storage, grant


@routes.put(ROUTE)
async def receive_upload(request: web.Request) -> web.Response:
    """Stream the body to a temp file; it becomes the object only once every byte arrived."""
    storage, grant = _verify(request, "PUT")
    content_type = request.headers.get("Content-Type")
    if not same_content_type(content_type, grant.content_type):
        raise Forbidden(f"Content-Type must be {grant.content_type!r}, as signed")
    length = request.content_length
    if length is None:
        raise LengthRequired("Content-Length is required: send the file size in bytes")
    if length == 0:
        raise EmptyUpload("the upload is empty", status=400)
    limit = request.app[appkeys.SETTINGS].max_upload_bytes
    if length > limit:
        raise PayloadTooLarge(f"the file is {length} bytes, over the limit of {limit}")
    try:
        await storage.store_stream(
            grant.key, grant.content_type, request.content.iter_any(), length
        )
    except ShortBody as err:
        raise ValidationFailed(f"{err}: nothing was stored") from err
    return web.Response(status=200)


@routes.get(ROUTE)
async def serve_object(request: web.Request) -> web.StreamResponse:
    """Serve the object with Range support and the signed Content-Disposition."""
    storage, grant = _verify(request, "GET")
    path = storage.path_for(grant.key)
    if not path.is_file():
        raise NotFound("no object is stored at this URL")
    headers = {"Content-Type": grant.content_type, "Cache-Control": "private, no-cache"}
    if grant.disposition:
        headers["Content-Disposition"] = grant.disposition
    return web.FileResponse(path, headers=headers)
