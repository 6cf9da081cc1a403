"""The local storage backend's signed URLs: PUT receives one upload, GET serves it."""

from __future__ import annotations

import asyncio
import os
import stat

from aiohttp import hdrs, web
from aiohttp.http import HttpVersion11

from libflow import appkeys
from libflow.api.errors import error_response
from libflow.errors import (
    EmptyUpload,
    Forbidden,
    LengthRequired,
    LibflowError,
    NotFound,
    PayloadTooLarge,
    ValidationFailed,
)
from libflow.library import files
from libflow.library.filetypes import same_content_type
from libflow.storage.local import AlreadyStored, InvalidKey, LocalStorage, ShortBody
from libflow.storage.signing import STORAGE_PREFIX, SignatureInvalid, SignedGrant

routes = web.RouteTableDef()
ROUTE = STORAGE_PREFIX + "{key:.+}"
# The stored bytes must be the file itself: its size limit, sha256, processing and
# downloads all describe them. A compressed body would need a second budget for what
# it inflates to (a gzip bomb), so any other Content-Encoding is refused.
ACCEPTED_ENCODINGS = frozenset({"", "identity"})


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


async def _admit_upload(request: web.Request) -> tuple[LocalStorage, SignedGrant, int]:
    """Every check an upload passes before a byte of its body is read."""
    storage, grant = _verify(request, "PUT")
    content_type = request.headers.get(hdrs.CONTENT_TYPE)
    if not same_content_type(content_type, grant.content_type):
        raise Forbidden(f"Content-Type must be {grant.content_type!r}, as signed")
    encoding = request.headers.get(hdrs.CONTENT_ENCODING, "").strip().lower()
    if encoding not in ACCEPTED_ENCODINGS:
        raise ValidationFailed(
            f"Content-Encoding {encoding!r} is not accepted: PUT the file's own bytes"
        )
    length = request.content_length
    if length is None:
        raise LengthRequired("Content-Length is required: send the file size in bytes")
    if length == 0:
        raise EmptyUpload("the upload is empty", status=400)
    limit = request.app[appkeys.SETTINGS].max_upload_bytes
    if length > limit:
        raise PayloadTooLarge(f"the file is {length} bytes, over the limit of {limit}")
    await files.check_upload_open(grant.key)
    if await storage.head(grant.key) is not None:
        raise Forbidden("this storageLink already received its upload: finalize it")
    return storage, grant, length


def _refuse(err: LibflowError) -> web.Response:
    """An upload refused before its body was read: closing is how the body is never read."""
    response = error_response(err.code, err.message, details=err.details, status=err.status)
    response.force_close()
    return response


async def expect_upload(request: web.Request) -> web.StreamResponse | None:
    """Answer ``Expect: 100-continue`` with a refusal instead of 100, so no body is sent."""
    if request.headers.get(hdrs.EXPECT, "").lower() != "100-continue":
        return _refuse(ValidationFailed("only Expect: 100-continue is understood", status=417))
    try:
        await _admit_upload(request)
    except LibflowError as err:
        return _refuse(err)
    except Exception:
        # No 100: the handler runs the same checks, and the error middleware (which an
        # expect handler bypasses) reports whatever broke (a database outage: 503).
        return None
    if request.version == HttpVersion11:
        await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        request.writer.output_size = 0  # the 100 is not part of the response's size
    return None


@routes.put(ROUTE, expect_handler=expect_upload)
async def receive_upload(request: web.Request) -> web.Response:
    """Stream the body to a temp file; it becomes the object only once every byte arrived.

    A storageLink takes one complete upload: once an object is stored, or the file is
    finalized or deleted, every PUT is 403 FORBIDDEN and the object is never replaced.
    """
    try:
        storage, grant, length = await _admit_upload(request)
    except LibflowError as err:
        return _refuse(err)
    try:
        await storage.store_stream(
            grant.key, grant.content_type, request.content.iter_any(), length
        )
    except ShortBody as err:
        raise ValidationFailed(f"{err}: nothing was stored") from err
    except AlreadyStored as err:
        raise Forbidden("this storageLink already received its upload: finalize it") from err
    if not await files.upload_still_wanted(grant.key):
        # The file was deleted while its bytes arrived; the delete may have run before
        # they became an object, so what it missed is removed here.
        await storage.delete(grant.key)
        raise Forbidden("this storageLink is dead: its file was deleted during the upload")
    return web.Response(status=200)


def _unsatisfiable(request: web.Request, found: os.stat_result) -> str | None:
    """Why the request's Range cannot be served from this object, or None when it can."""
    if hdrs.RANGE not in request.headers:
        return None
    if_range = request.if_range
    if if_range is not None and found.st_mtime > if_range.timestamp():
        return None  # a stale If-Range: the whole object is served, the Range ignored
    try:
        wanted = request.http_range
    except ValueError as err:
        return f"the Range header is not one byte range this server serves: {err}"
    if wanted.start is not None and wanted.start >= found.st_size:
        return f"the Range starts at byte {wanted.start}, past the {found.st_size} bytes stored"
    return None


@routes.get(ROUTE)
async def serve_object(request: web.Request) -> web.StreamResponse:
    """Serve the object with Range support and the signed Content-Disposition."""
    storage, grant = _verify(request, "GET")
    path = storage.path_for(grant.key)
    try:
        found = await asyncio.to_thread(path.stat)
    except (FileNotFoundError, NotADirectoryError):
        found = None
    if found is None or not stat.S_ISREG(found.st_mode):
        raise NotFound("no object is stored at this URL")
    reason = _unsatisfiable(request, found)
    if reason is not None:
        response = error_response("VALIDATION_ERROR", reason, status=416)
        response.headers[hdrs.CONTENT_RANGE] = f"bytes */{found.st_size}"
        return response
    headers = {"Content-Type": grant.content_type, "Cache-Control": "private, no-cache"}
    if grant.disposition:
        headers["Content-Disposition"] = grant.disposition
    return web.FileResponse(path, headers=headers)
