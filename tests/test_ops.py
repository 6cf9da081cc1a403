"""Operations endpoints and cross-cutting middleware: health, readiness, metrics, logs."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import io
import json
import logging
import re
import shutil
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from yarl import URL

from libflow.app import create_app
from libflow.jobs import ArqJobQueue
from libflow.logs import JsonFormatter
from libflow.metrics import HttpMetrics
from libflow.resources import open_resources
from tests.conftest import (
    Api,
    ClientFactory,
    Shape,
    base_settings,
    create_record,
    new_project,
    put_bytes,
)
from tests.private_redis import PrivateRedis
from workers.worker import LibflowWorker, worker_settings

FILE_ROUTE = "/api/publicv1/projects/{projectId}/library/files/{fileId}"


@pytest.fixture
def log_stream() -> Iterator[io.StringIO]:
    """Everything libflow logs during the test, formatted as the server formats it."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("libflow")
    previous = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield stream
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)


def _metric_samples(text: str, name: str) -> list[Any]:
    return [
        sample
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    ]


async def test_healthz_answers_ok(api: Api) -> None:
    response = await api.client.get("/healthz")
    assert response.status == 200
    assert await response.json() == {"status": "ok"}


async def test_readyz_checks_database_and_storage_on_embedded_shape(
    start_app: ClientFactory, embedded: Shape
) -> None:
    client = await start_app(embedded.settings)
    response = await client.get("/readyz")
    assert response.status == 200
    assert await response.json() == {
        "status": "ok",
        "checks": {"database": "ok", "storage": "ok"},
    }


async def test_readyz_checks_redis_too_on_scaled_shape(
    start_app: ClientFactory, scaled: Shape
) -> None:
    client = await start_app(scaled.settings)
    response = await client.get("/readyz")
    assert response.status == 200
    assert await response.json() == {
        "status": "ok",
        "checks": {
            "database": "ok",
            "storage": "ok",
            "redis": "ok",
            "workers": "no worker has polled the job queue lately",
        },
    }


async def test_readyz_reports_a_worker_that_polled_redis_lately(
    start_app: ClientFactory, scaled: Shape
) -> None:
    client = await start_app(scaled.settings)

    async def workers() -> str:
        response = await client.get("/readyz")
        assert response.status == 200  # a missing worker is reported, not a failure
        return str((await response.json())["checks"]["workers"])

    worker = LibflowWorker(**worker_settings(scaled.settings), handle_signals=False)
    polling = asyncio.create_task(worker.main(), context=contextvars.Context())
    try:
        deadline = time.monotonic() + 30
        while await workers() != "ok":
            assert time.monotonic() < deadline, "the worker never showed in /readyz"
            await asyncio.sleep(0.1)
    finally:
        polling.cancel()
        await asyncio.gather(polling, return_exceptions=True)
        await asyncio.create_task(worker.close(), context=contextvars.Context())
    # A worker that stops takes its health-check key with it.
    assert await workers() == "no worker has polled the job queue lately"


async def test_readyz_is_503_when_redis_goes_away(
    start_app: ClientFactory, tmp_path: Path, private_redis: PrivateRedis
) -> None:
    # Redis stops under a running app, as when the Redis host fails (a start while it is
    # down is tested in test_jobs).
    client = await start_app(base_settings(tmp_path, redis_url=private_redis.url))
    assert (await client.get("/readyz")).status == 200

    await asyncio.to_thread(private_redis.stop)

    response = await client.get("/readyz")
    assert response.status == 503
    assert response.content_type == "application/json"
    assert response.headers["Retry-After"].isdigit()
    body = await response.json()
    assert body["error"] == "UNAVAILABLE"
    assert "redis" in body["message"]
    assert body["details"]["database"] == "ok"
    assert body["details"]["storage"] == "ok"
    assert body["details"]["redis"].startswith("unavailable")


async def test_readyz_is_503_when_the_storage_dir_is_gone(
    start_app: ClientFactory, embedded: Shape
) -> None:
    # Tests run as root, so a read-only dir would still pass os.access: the data volume
    # losing the objects dir (an unmounted or wiped disk) is the real failure here.
    client = await start_app(embedded.settings)
    shutil.rmtree(embedded.settings.storage_dir)

    response = await client.get("/readyz")
    assert response.status == 503
    assert "Retry-After" in response.headers
    body = await response.json()
    assert body["error"] == "UNAVAILABLE"
    assert body["details"] == {"database": "ok", "storage": "unavailable: StorageError"}


async def test_metrics_count_requests_by_route_template(api: Api) -> None:
    raw_id = "nosuchfile0123456789abcd"
    for _ in range(2):
        response = await api.call("GET", f"/files/{raw_id}")
        assert response.status == 404
    assert (await api.client.get("/no/such/route")).status == 404

    response = await api.client.get("/metrics")
    assert response.status == 200
    assert response.content_type == "text/plain"
    text = await response.text()
    counts = {
        (s.labels["method"], s.labels["route"], s.labels["status"]): s.value
        for s in _metric_samples(text, "libflow_http_requests_total")
    }
    assert counts[("GET", FILE_ROUTE, "404")] == 2
    assert counts[("GET", "unmatched", "404")] == 1
    assert raw_id not in text
    assert api.project_id not in text
    assert "/no/such/route" not in text


async def test_metrics_latency_histogram_is_cumulative_with_bounds_inclusive(api: Api) -> None:
    for _ in range(3):
        assert (await api.client.get("/healthz")).status == 200
    text = await (await api.client.get("/metrics")).text()
    buckets = [
        s
        for s in _metric_samples(text, "libflow_http_request_duration_seconds_bucket")
        if s.labels["route"] == "/healthz"
    ]
    counts = [s.value for s in buckets]
    assert [s.labels["le"] for s in buckets][-1] == "+Inf"
    assert counts == sorted(counts)  # each bucket holds the ones below it
    assert counts[-1] == 3
    (total,) = (
        s.value
        for s in _metric_samples(text, "libflow_http_request_duration_seconds_count")
        if s.labels["route"] == "/healthz"
    )
    assert total == 3


def test_a_latency_on_a_bucket_bound_counts_in_that_bucket() -> None:
    registry = CollectorRegistry()
    HttpMetrics(registry).observe("GET", "/r", 200, 0.005)
    bucket = registry.get_sample_value(
        "libflow_http_request_duration_seconds_bucket",
        {"method": "GET", "route": "/r", "le": "0.005"},
    )
    assert bucket == 1


async def test_metrics_label_storage_urls_without_their_keys(api: Api) -> None:
    created = await create_record(api, name="a.txt", file_type="txt")
    async with put_bytes(api, created, b"hello") as response:
        assert response.status == 200

    text = await (await api.client.get("/metrics")).text()
    routes = {s.labels["route"] for s in _metric_samples(text, "libflow_http_requests_total")}
    assert "/storage/{key}" in routes
    assert created["path"] not in text
    latency = _metric_samples(text, "libflow_http_request_duration_seconds_count")
    assert any(s.labels["route"] == "/storage/{key}" for s in latency)


async def test_every_response_carries_a_request_id(api: Api) -> None:
    record = await api.upload(b"tiny", name="r.txt", file_type="txt")
    download = await api.call("GET", f"/files/{record['id']}/download", allow_redirects=False)
    assert download.status == 302
    responses = [
        download,
        await api.client.get("/healthz"),
        await api.client.get("/metrics"),
        await api.client.get("/api/publicv1/openapi.json"),
        await api.client.get("/api/publicv1/projects/x/library/files"),  # 401
        await api.call("GET", "/files/nosuchfile"),  # 404
        await api.client.get("/no/such/route"),  # unmatched
        await api.client.patch("/healthz"),  # 405
    ]
    async with api.client.session.get(URL(download.headers["Location"], encoded=True)) as got:
        assert got.status == 200
        responses.append(got)
    missing = [(r.status, r.url.path) for r in responses if "X-Request-Id" not in r.headers]
    assert not missing
    ids = [r.headers["X-Request-Id"] for r in responses]
    assert len(set(ids)) == len(ids)


async def test_a_sane_client_request_id_is_echoed(api: Api) -> None:
    response = await api.client.get("/healthz", headers={"X-Request-Id": "client-42.retry_1"})
    assert response.headers["X-Request-Id"] == "client-42.retry_1"


@pytest.mark.parametrize("supplied", ["has space", "<script>", "x" * 65, "id;drop", ""])
async def test_an_insane_client_request_id_is_replaced(api: Api, supplied: str) -> None:
    response = await api.client.get("/healthz", headers={"X-Request-Id": supplied})
    replaced = response.headers["X-Request-Id"]
    assert replaced != supplied
    assert re.fullmatch(r"[0-9a-f]{32}", replaced)


async def test_access_log_is_json_with_the_request_id(api: Api, log_stream: io.StringIO) -> None:
    response = await api.client.get("/healthz", headers={"X-Request-Id": "trace-me-1"})
    assert response.status == 200

    entries = [json.loads(line) for line in log_stream.getvalue().splitlines()]
    [access] = [e for e in entries if e["logger"] == "libflow.access"]
    assert access["requestId"] == "trace-me-1"
    assert access["method"] == "GET"
    assert access["path"] == "/healthz"
    assert access["status"] == 200
    assert access["level"] == "info"
    assert access["time"].endswith("Z")


async def test_a_generated_request_id_is_the_one_logged(api: Api, log_stream: io.StringIO) -> None:
    response = await api.client.get("/healthz")
    entries = [json.loads(line) for line in log_stream.getvalue().splitlines()]
    [access] = [e for e in entries if e["logger"] == "libflow.access"]
    assert access["requestId"] == response.headers["X-Request-Id"]


async def test_logs_written_while_handling_carry_the_request_id(
    start_app: ClientFactory, embedded: Shape, log_stream: io.StringIO
) -> None:
    client = await start_app(embedded.settings)
    shutil.rmtree(embedded.settings.storage_dir)
    response = await client.get("/readyz", headers={"X-Request-Id": "probe-7"})
    assert response.status == 503

    entries = [json.loads(line) for line in log_stream.getvalue().splitlines()]
    [warning] = [e for e in entries if e["logger"] == "libflow.ops"]
    assert warning["level"] == "warning"
    assert "storage" in warning["message"]
    assert warning["requestId"] == "probe-7"


async def test_logs_never_carry_the_api_key_or_a_storage_signature(
    api: Api, log_stream: io.StringIO
) -> None:
    created = await create_record(api, name="secret.txt", file_type="txt")
    async with put_bytes(api, created, b"top secret") as response:
        assert response.status == 200
    finalized = await api.call("POST", "/files:complete", json={"path": created["path"]})
    assert finalized.status == 200
    await api.run_jobs()
    download = await api.call(
        "GET", f"/files/{created['documentId']}/download", allow_redirects=False
    )
    assert download.status == 302
    async with api.client.session.get(URL(download.headers["Location"], encoded=True)) as got:
        assert await got.read() == b"top secret"
    bearer = await api.client.get(
        api.url("/files"), headers={"Authorization": f"Bearer {api.api_key}"}
    )
    assert bearer.status == 200

    text = log_stream.getvalue()
    lines = text.splitlines()
    access = [json.loads(line) for line in lines if '"libflow.access"' in line]
    assert len(access) == 6
    assert all(entry["requestId"] for entry in access)
    signatures = [
        parse_qs(urlsplit(url).query)["sig"][0]
        for url in (created["storageLink"], download.headers["Location"])
    ]
    for secret in (api.api_key, *signatures):
        assert secret not in text
    assert "sig=" not in text


async def test_start_up_objects_are_kept_out_of_the_cyclic_gc(
    start_app: ClientFactory, tmp_path: Path
) -> None:
    # Full collections would otherwise walk the embedding model's objects on every pass.
    gc.unfreeze()
    assert gc.get_freeze_count() == 0

    await start_app(base_settings(tmp_path))

    assert gc.get_freeze_count() > 0


async def test_redis_connections_probe_a_peer_that_may_have_vanished(scaled: Shape) -> None:
    # A blocked read (an event stream's XREAD, the cancel channel) on a Redis host gone
    # without a reset would wait for good: TCP keepalive finds the dead peer instead.
    async with open_resources(scaled.settings) as resources:
        assert resources.redis is not None and isinstance(resources.jobs, ArqJobQueue)
        for client in (resources.redis, resources.jobs.pool):
            await client.ping()
            connection = await client.connection_pool.get_connection()
            try:
                sock = connection._writer.transport.get_extra_info("socket")
                assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
                assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 10
            finally:
                await client.connection_pool.release(connection)


async def test_a_redirect_is_counted_with_its_own_status(api: Api) -> None:
    response = await api.client.get("/", allow_redirects=False)
    assert response.status == 302
    assert "X-Request-Id" in response.headers

    text = await (await api.client.get("/metrics")).text()
    statuses = {
        s.labels["status"]
        for s in _metric_samples(text, "libflow_http_requests_total")
        if s.labels["route"] == "/"
    }
    assert statuses == {"302"}


async def test_a_request_whose_client_left_is_counted_499_not_500(
    aiohttp_client: Any, embedded: Shape
) -> None:
    # As run_server.py serves the app: a client gone cancels its request's handler.
    client = await aiohttp_client(
        create_app(embedded.settings),
        server_kwargs={"port": embedded.settings.port, "handler_cancellation": True},
    )
    project_id, secret = await new_project()
    api = Api(client, embedded, project_id, secret)
    created = await create_record(api, name="cut.txt", file_type="txt")
    link = URL(created["storageLink"])
    _reader, writer = await asyncio.open_connection(link.host, link.port)
    writer.write(
        f"PUT {link.raw_path_qs} HTTP/1.1\r\nHost: {link.host}:{link.port}\r\n"
        f"Content-Type: {created['mimeType']}\r\nContent-Length: 100\r\n\r\nhello".encode()
    )
    await writer.drain()
    await asyncio.sleep(0.2)  # the handler is reading the body
    writer.close()
    await writer.wait_closed()

    statuses: set[str] = set()
    for _ in range(100):
        text = await (await client.get("/metrics")).text()
        statuses = {
            s.labels["status"]
            for s in _metric_samples(text, "libflow_http_requests_total")
            if s.labels["route"] == "/storage/{key}"
        }
        if statuses:
            break
        await asyncio.sleep(0.05)
    assert statuses == {"499"}
