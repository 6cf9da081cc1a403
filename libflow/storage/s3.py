"""S3 (or S3-compatible) storage backend on aiobotocore with presigned URLs."""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, cast

from aiobotocore.config import AioConfig
from aiobotocore.session import AioSession
from botocore.exceptions import BotoCoreError, ClientError

from libflow.storage import ObjectInfo, StorageError, content_disposition

if TYPE_CHECKING:
    from types_aiobotocore_s3.client import S3Client
    from types_aiobotocore_s3.literals import BucketLocationConstraintType

__all__ = ["UPLOAD_ROOT", "S3Storage", "make_s3_config", "open_s3_storage"]

logger = logging.getLogger("libflow.storage.s3")

# A presigned PUT cannot be revoked: storageLinks write under this prefix, finalize copies
# the upload to its own key, and no URL that can write ever reaches that copy.
UPLOAD_ROOT = "uploads"
_MISSING_CODES = frozenset({"404", "NoSuchKey", "NotFound", "NoSuchBucket"})
_US_EAST_1 = "us-east-1"


def _is_missing(err: ClientError) -> bool:
    """Whether a ClientError means the object (or bucket) does not exist."""
    code = str(err.response.get("Error", {}).get("Code", ""))
    status = err.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return code in _MISSING_CODES or status == 404


def _error_code(err: ClientError) -> str:
    """The S3 error code of a ClientError, or an empty string."""
    return str(err.response.get("Error", {}).get("Code", ""))


# How long a connection and each read of an answer may take. botocore's defaults (60 s
# each, three attempts) held an API request about four minutes on a store that accepted
# connections and never answered; these bound it to about a minute and a half, after which
# the caller gets 503 UNAVAILABLE. A read is one socket read, not a whole transfer: a large
# object streams as long as bytes keep coming.
S3_CONNECT_TIMEOUT_SECONDS = 5.0
S3_READ_TIMEOUT_SECONDS = 30.0


def make_s3_config(
    *,
    connect_timeout: float = S3_CONNECT_TIMEOUT_SECONDS,
    read_timeout: float = S3_READ_TIMEOUT_SECONDS,
) -> AioConfig:
    """The client configuration libflow uses: SigV4, path-style addressing, standard retries,
    bounded waits."""
    return AioConfig(
        signature_version="s3v4",
        s3={"addressing_style": "path"},
        retries={"max_attempts": 3, "mode": "standard"},
        connect_timeout=connect_timeout,
        read_timeout=read_timeout,
    )


class S3Storage:
    """Storage on one S3 bucket through a shared aiobotocore client."""

    def __init__(self, client: S3Client, bucket: str, region: str) -> None:
        """Wrap an open client; the caller owns (and closes) it."""
        self._client = client
        self._bucket = bucket
        self._region = region

    @property
    def bucket(self) -> str:
        """The bucket this storage writes to."""
        return self._bucket

    async def ensure_bucket(self) -> None:
        """Create the bucket when it does not exist yet (safe against concurrent creators)."""
        try:
            await self._client.head_bucket(Bucket=self._bucket)
            return
        except ClientError as err:
            if not _is_missing(err):
                raise StorageError(f"cannot access bucket {self._bucket!r}: {err}") from err
        except BotoCoreError as err:
            raise StorageError(f"cannot reach S3 for bucket {self._bucket!r}: {err}") from err
        try:
            if self._region == _US_EAST_1:
                await self._client.create_bucket(Bucket=self._bucket)
            else:
                await self._client.create_bucket(
                    Bucket=self._bucket,
                    CreateBucketConfiguration={
                        "LocationConstraint": cast("BucketLocationConstraintType", self._region)
                    },
                )
        except ClientError as err:
            if _error_code(err) != "BucketAlreadyOwnedByYou":
                raise StorageError(f"cannot create bucket {self._bucket!r}: {err}") from err
        except BotoCoreError as err:
            raise StorageError(f"cannot create bucket {self._bucket!r}: {err}") from err

    async def upload_url(self, key: str, content_type: str, expires_in: int) -> str:
        """A presigned PUT URL whose signature binds ``content_type``."""
        return await self._client.generate_presigned_url(
            "put_object",
            Params={"Bucket": self._bucket, "Key": key, "ContentType": content_type},
            ExpiresIn=expires_in,
        )

    def upload_key(self, key: str) -> str:
        """The staging key a storageLink writes to: ``uploads/<key>``, never served."""
        return f"{UPLOAD_ROOT}/{key}"

    async def seal_upload(self, key: str) -> ObjectInfo | None:
        """Copy the staged upload to ``key`` unless an object is there already; its info.

        Only the finalize that claimed the file calls this, so ``key`` is written once; a PUT
        to the storageLink afterwards changes the staging key, which nothing reads.
        """
        sealed = await self.head(key)
        if sealed is not None:
            return sealed  # sealed before, or uploaded before uploads were staged
        staged = self.upload_key(key)
        try:
            await self._client.copy_object(
                Bucket=self._bucket,
                Key=key,
                CopySource={"Bucket": self._bucket, "Key": staged},
                MetadataDirective="COPY",
            )
        except ClientError as err:
            if _is_missing(err) and _error_code(err) != "NoSuchBucket":
                return None
            raise StorageError(f"sealing {key!r} failed: {err}") from err
        except BotoCoreError as err:
            raise StorageError(f"sealing {key!r} failed: {err}") from err
        try:
            await self._delete_key(staged)
        except StorageError as err:
            # The staged bytes only cost space: deleting the file removes them too.
            logger.warning("could not remove the staged upload %s: %s", staged, err)
        return await self.head(key)

    async def download_url(
        self, key: str, *, filename: str, content_type: str, expires_in: int, inline: bool = False
    ) -> str:
        """A presigned GET URL that overrides Content-Disposition and Content-Type."""
        return await self._client.generate_presigned_url(
            "get_object",
            Params={
                "Bucket": self._bucket,
                "Key": key,
                "ResponseContentDisposition": content_disposition(filename, inline=inline),
                "ResponseContentType": content_type,
            },
            ExpiresIn=expires_in,
        )

    async def head(self, key: str) -> ObjectInfo | None:
        """Size and content type of ``key``, or None when it is missing."""
        try:
            resp = await self._client.head_object(Bucket=self._bucket, Key=key)
        except ClientError as err:
            if _is_missing(err):
                return None
            raise StorageError(f"head {key!r} failed: {err}") from err
        except BotoCoreError as err:
            raise StorageError(f"head {key!r} failed: {err}") from err
        return ObjectInfo(
            size=resp["ContentLength"],
            content_type=resp.get("ContentType"),
            content_encoding=resp.get("ContentEncoding"),
        )

    async def read(self, key: str, chunk_size: int = 1024 * 1024) -> AsyncGenerator[bytes, None]:
        """Stream ``key`` in chunks of at most ``chunk_size``; FileNotFoundError when missing."""
        try:
            resp = await self._client.get_object(Bucket=self._bucket, Key=key)
        except ClientError as err:
            if _is_missing(err):
                raise FileNotFoundError(key) from err
            raise StorageError(f"get {key!r} failed: {err}") from err
        except BotoCoreError as err:
            raise StorageError(f"get {key!r} failed: {err}") from err
        try:
            async with resp["Body"] as body:
                while chunk := await body.read(chunk_size):
                    yield chunk
        except BotoCoreError as err:
            raise StorageError(f"reading {key!r} failed: {err}") from err

    async def write(self, key: str, data: bytes, content_type: str) -> None:
        """Store small ``data`` under ``key`` in one request."""
        try:
            await self._client.put_object(
                Bucket=self._bucket, Key=key, Body=data, ContentType=content_type
            )
        except (ClientError, BotoCoreError) as err:
            raise StorageError(f"put {key!r} failed: {err}") from err

    async def delete(self, key: str) -> None:
        """Delete the upload staged for ``key``, then ``key``; missing keys are not errors."""
        # In this order: a seal racing the delete then finds no staged upload to copy.
        await self._delete_key(self.upload_key(key))
        await self._delete_key(key)

    async def _delete_key(self, key: str) -> None:
        try:
            await self._client.delete_object(Bucket=self._bucket, Key=key)
        except ClientError as err:
            if _is_missing(err) and _error_code(err) != "NoSuchBucket":
                return
            raise StorageError(f"delete {key!r} failed: {err}") from err
        except BotoCoreError as err:
            raise StorageError(f"delete {key!r} failed: {err}") from err

    async def check(self) -> None:
        """Raise StorageError unless the bucket answers a HEAD."""
        try:
            await self._client.head_bucket(Bucket=self._bucket)
        except (ClientError, BotoCoreError) as err:
            raise StorageError(f"bucket {self._bucket!r} unavailable: {err}") from err


@asynccontextmanager
async def open_s3_storage(
    *, endpoint_url: str | None, bucket: str, region: str
) -> AsyncIterator[S3Storage]:
    """Open one S3 client for the process, make sure the bucket exists, close it on exit."""
    session = AioSession()
    async with session.create_client(
        "s3", endpoint_url=endpoint_url, region_name=region, config=make_s3_config()
    ) as client:
        storage = S3Storage(client, bucket, region)
        await storage.ensure_bucket()
        yield storage
