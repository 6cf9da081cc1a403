"""A real-HTTP S3 emulator (moto's standalone server) for tests.

Import the fixture into a test module or conftest with
``from tests.s3server import s3_endpoint  # noqa: F401``.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from moto.server import ThreadedMotoServer

TEST_REGION = "us-east-1"

FAKE_AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_SECURITY_TOKEN": "testing",
    "AWS_DEFAULT_REGION": TEST_REGION,
    # Never read the developer's real AWS config or ask the EC2 metadata service.
    "AWS_CONFIG_FILE": "/nonexistent/libflow-tests/aws-config",
    "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/libflow-tests/aws-credentials",
    "AWS_EC2_METADATA_DISABLED": "true",
}


@contextmanager
def fake_aws_credentials() -> Iterator[None]:
    """Point the standard AWS credential chain at fake credentials for the duration."""
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("AWS_PROFILE", raising=False)
        mp.delenv("AWS_DEFAULT_PROFILE", raising=False)
        for name, value in FAKE_AWS_ENV.items():
            mp.setenv(name, value)
        yield


@contextmanager
def moto_s3_server() -> Iterator[str]:
    """Run moto's server on 127.0.0.1 on a free port; yield its ``http://`` endpoint URL."""
    with fake_aws_credentials():
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        try:
            host, port = server.get_host_and_port()
            yield f"http://{host}:{port}"
        finally:
            server.stop()
            # stop() shuts the serve loop down but leaves the listening socket open.
            wsgi_server = server._server
            if wsgi_server is not None:
                wsgi_server.server_close()


def closed_port_url() -> str:
    """An ``http://127.0.0.1:PORT`` URL on which nothing is listening."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """Endpoint URL of a moto S3 server shared by the test session (fake AWS credentials set)."""
    with moto_s3_server() as url:
        yield url
