"""S3Storage against moto's standalone server over real HTTP."""

from __future__ import annotations

import asyncio
import io
import os
import uuid

import aiohttp
import pytest
from aiobotocore.session import AioSession
from botocore.exceptions import ClientError
from yarl import URL

from libflow.storage import StorageError
from libflow.storage.s3 import S3Storage, make_s3_config, open_s3_storage
from tests.s3server import TEST_REGION, closed_port_url, fake_aws_credentials, s3_endpoint

__all__ = ["s3_endpoint"]  # the fixture is used by name below

MiB = 1024 * 1024


def _bucket() -> str:
    """A fresh bucket name, so tests sharing the session server never collide."""
    return f"libflow-test-{uuid.uuid4().hex[:16]}"


async def _bucket_exists(endpoint: str, bucket: str, region: str = TEST_REGION) -> bool:
    """Ask the server directly, with a client independent of the storage under test."""
    async with AioSession().create_client(
        "s3", endpoint_url=endpoint, region_name=region, config=make_s3_config()
    ) as client:
        try:
            await client.head_bucket(Bucket=bucket)
        except ClientError:
            return False
        return True


async def _put(url: str, data: bytes, content_type: str) -> None:
    """PUT ``data`` to a presigned URL the way a browser or the CLI would."""
    async with (
        aiohttp.ClientSession() as http,
        http.put(
            URL(url, encoded=True), data=io.BytesIO(data), headers={"Content-Type": content_type}
        ) as r,
    ):
        assert r.status == 200, await r.text()


async def test_bucket_created_at_start_up_when_missing(s3_endpoint: str) -> None:
    bucket = _bucket()
    assert not await _bucket_exists(s3_endpoint, bucket)
    async with open_s3_storage(endpoint_url=s3_endpoint, bucket=bucket, region=TEST_REGION) as st:
        assert st.bucket == bucket
        await st.check()
    assert await _bucket_exists(s3_endpoint, bucket)
    # A second start-up finds the bucket and leaves it alone.
    async with open_s3_storage(endpoint_url=s3_endpoint, bucket=bucket, region=TEST_REGION) as st:
        await st.check()


async def test_bucket_created_outside_us_east_1(s3_endpoint: str) -> None:
    bucket = _bucket()
    region = "eu-west-1"
    async with open_s3_storage(endpoint_url=s3_endpoint, bucket=bucket, region=region) as st:
        await st.check()
        await st.write("a.txt", b"hello", "text/plain")
        assert await st.head("a.txt") is not None
    assert await _bucket_exists(s3_endpoint, bucket, region)


async def test_presigned_put_then_head(s3_endpoint: str) -> None:
    async with open_s3_storage(
        endpoint_url=s3_endpoint, bucket=_bucket(), region=TEST_REGION
    ) as st:
        data = b"%PDF-1.7 fake pdf bytes\n" * 100
        url = await st.upload_url("p1/files/doc.pdf", "application/pdf", 900)
        assert "X-Amz-Signature=" in url
        assert "X-Amz-Expires=900" in url
        assert "content-type" in url.lower()  # Content-Type is among the signed headers
        await _put(url, data, "application/pdf")

        info = await st.head("p1/files/doc.pdf")
        assert info is not None
        assert info.size == len(data)
        assert info.content_type == "application/pdf"


async def test_head_missing_key_is_none(s3_endpoint: str) -> None:
    async with open_s3_storage(
        endpoint_url=s3_endpoint, bucket=_bucket(), region=TEST_REGION
    ) as st:
        assert await st.head("no/such/key.pdf") is None


async def test_download_url_serves_bytes_with_utf8_filename(s3_endpoint: str) -> None:
    async with open_s3_storage(
        endpoint_url=s3_endpoint, bucket=_bucket(), region=TEST_REGION
    ) as st:
        data = os.urandom(4096)
        await st.write("p1/files/x", data, "application/pdf")
        url = await st.download_url(
            "p1/files/x", filename="résumé 2026.pdf", content_type="application/pdf", expires_in=300
        )
        async with (
            aiohttp.ClientSession() as http,
            http.get(URL(url, encoded=True)) as resp,
        ):
            assert resp.status == 200
            body = await resp.read()
            disposition = resp.headers["Content-Disposition"]
            content_type = resp.headers["Content-Type"]
        assert body == data
        assert disposition.startswith("attachment;")
        assert "filename*=UTF-8''r%C3%A9sum%C3%A9%202026.pdf" in disposition
        assert 'filename="r_sum_ 2026.pdf"' in disposition
        assert content_type == "application/pdf"

        inline_url = await st.download_url(
            "p1/files/x",
            filename="a.pdf",
            content_type="application/pdf",
            expires_in=300,
            inline=True,
        )
        async with (
            aiohttp.ClientSession() as http,
            http.get(URL(inline_url, encoded=True)) as resp,
        ):
            assert resp.status == 200
            assert resp.headers["Content-Disposition"].startswith("inline;")


async def test_read_streams_large_object_in_chunks(s3_endpoint: str) -> None:
    async with open_s3_storage(
        endpoint_url=s3_endpoint, bucket=_bucket(), region=TEST_REGION
    ) as st:
        data = os.urandom(5 * MiB + 123)
        await _put(
            await st.upload_url("big.bin", "application/octet-stream", 60),
            data,
            "application/octet-stream",
        )

        chunk_size = 256 * 1024
        chunks = [chunk async for chunk in st.read("big.bin", chunk_size=chunk_size)]
        assert len(chunks) > 1
        assert all(0 < len(c) <= chunk_size for c in chunks)
        assert b"".join(chunks) == data


async def test_read_stops_early_without_error(s3_endpoint: str) -> None:
    async with open_s3_storage(
        endpoint_url=s3_endpoint, bucket=_bucket(), region=TEST_REGION
    ) as st:
        await st.write("k", os.urandom(3 * MiB), "application/octet-stream")
        stream = st.read("k", chunk_size=64 * 1024)
        first = await anext(stream)
        assert len(first) > 0
        await stream.aclose()
        # The client is still usable after abandoning a stream half-way.
        assert await st.head("k") is not None


async def test_read_missing_key_raises_file_not_found(s3_endpoint: str) -> None:
    async with open_s3_storage(
        endpoint_url=s3_endpoint, bucket=_bucket(), region=TEST_REGION
    ) as st:
        with pytest.raises(FileNotFoundError):
            async for _ in st.read("missing"):
                pass


async def test_write_then_delete(s3_endpoint: str) -> None:
    async with open_s3_storage(
        endpoint_url=s3_endpoint, bucket=_bucket(), region=TEST_REGION
    ) as st:
        await st.write("thumbs/t.webp", b"RIFF....WEBP", "image/webp")
        info = await st.head("thumbs/t.webp")
        assert info is not None
        assert info.size == 12
        assert info.content_type == "image/webp"
        assert b"".join([c async for c in st.read("thumbs/t.webp")]) == b"RIFF....WEBP"

        await st.delete("thumbs/t.webp")
        assert await st.head("thumbs/t.webp") is None
        await st.delete("thumbs/t.webp")  # deleting a missing key is fine
        await st.delete("never/existed")


async def test_check_raises_when_endpoint_unreachable() -> None:
    with fake_aws_credentials():
        async with AioSession().create_client(
            "s3", endpoint_url=closed_port_url(), region_name=TEST_REGION, config=make_s3_config()
        ) as client:
            st = S3Storage(client, "some-bucket", TEST_REGION)
            with pytest.raises(StorageError):
                await st.check()


async def test_a_store_that_accepts_and_never_answers_is_a_storage_error_not_a_hang() -> None:
    """A stopped store (SIGSTOP) held a request for minutes; the read timeout ends it."""
    done = asyncio.Event()
    writers: list[asyncio.StreamWriter] = []

    async def never_answer(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        await done.wait()

    silent = await asyncio.start_server(never_answer, "127.0.0.1", 0)
    port = silent.sockets[0].getsockname()[1]
    config = make_s3_config(connect_timeout=0.5, read_timeout=0.3)
    try:
        with fake_aws_credentials():
            async with AioSession().create_client(
                "s3",
                endpoint_url=f"http://127.0.0.1:{port}",
                region_name=TEST_REGION,
                config=config,
            ) as client:
                st = S3Storage(client, "some-bucket", TEST_REGION)
                async with asyncio.timeout(30):  # the test's own guard, far above 3 x 0.3 s
                    with pytest.raises(StorageError):
                        await st.head("any/key")
    finally:
        done.set()
        for writer in writers:
            writer.close()
        silent.close()
        await silent.wait_closed()


async def test_open_fails_with_storage_error_when_endpoint_unreachable() -> None:
    with fake_aws_credentials(), pytest.raises(StorageError):
        async with open_s3_storage(
            endpoint_url=closed_port_url(), bucket="some-bucket", region=TEST_REGION
        ):
            pass


async def test_seal_copies_the_staged_upload_to_its_key_and_drops_the_staging(
    s3_endpoint: str,
) -> None:
    async with open_s3_storage(
        endpoint_url=s3_endpoint, bucket=_bucket(), region=TEST_REGION
    ) as st:
        key = "libraryDocuments/p1/doc.pdf"
        assert st.upload_key(key) == f"uploads/{key}"
        url = await st.upload_url(st.upload_key(key), "application/pdf", 60)
        await _put(url, b"%PDF staged", "application/pdf")
        assert await st.head(key) is None  # staged, not served

        sealed = await st.seal_upload(key)
        assert sealed is not None
        assert (sealed.size, sealed.content_type) == (11, "application/pdf")
        assert b"".join([c async for c in st.read(key)]) == b"%PDF staged"
        assert await st.head(st.upload_key(key)) is None


async def test_seal_never_replaces_a_sealed_object(s3_endpoint: str) -> None:
    async with open_s3_storage(
        endpoint_url=s3_endpoint, bucket=_bucket(), region=TEST_REGION
    ) as st:
        key = "libraryDocuments/p1/doc.pdf"
        url = await st.upload_url(st.upload_key(key), "application/pdf", 60)
        await _put(url, b"%PDF first", "application/pdf")
        await st.seal_upload(key)
        await _put(url, b"%PDF the presigned URL still writes", "application/pdf")

        sealed = await st.seal_upload(key)
        assert sealed is not None
        assert sealed.size == len(b"%PDF first")
        assert b"".join([c async for c in st.read(key)]) == b"%PDF first"


async def test_seal_of_nothing_uploaded_is_none(s3_endpoint: str) -> None:
    async with open_s3_storage(
        endpoint_url=s3_endpoint, bucket=_bucket(), region=TEST_REGION
    ) as st:
        assert await st.seal_upload("libraryDocuments/p1/never.pdf") is None


async def test_delete_removes_the_staged_upload_too(s3_endpoint: str) -> None:
    async with open_s3_storage(
        endpoint_url=s3_endpoint, bucket=_bucket(), region=TEST_REGION
    ) as st:
        key = "libraryDocuments/p1/doc.pdf"
        url = await st.upload_url(st.upload_key(key), "application/pdf", 60)
        await _put(url, b"%PDF staged", "application/pdf")
        await st.delete(key)
        assert await st.head(st.upload_key(key)) is None
