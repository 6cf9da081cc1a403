"""LIBFLOW_EMBEDDING_BACKEND=auto: the int8 runtime for the CPU, one for the whole deployment."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from libflow import appkeys
from libflow.db.connection import open_database
from libflow.db.deployment_choices import chosen_once
from libflow.library.embeddings import int8_runtime, open_embedder, with_agreed_backend
from libflow.library.embeddings.local import LocalEmbedder
from libflow.models import Chunk, DeploymentChoice
from settings import Settings
from tests.conftest import Api, ClientFactory, Shape, new_project
from tests.search_helpers import file_ids, upload_labelled

VNNI = frozenset({"sse4_2", "avx2", "avx512f", "avx512_vnni"})
AVX2_ONLY = frozenset({"sse4_2", "avx2", "fma"})
CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC
flags\t\t: fpu vme sse4_2 avx avx2 fma

processor\t: 1
flags\t\t: fpu vme sse4_2 avx avx2 fma
"""


def on_a_cpu_with(monkeypatch: pytest.MonkeyPatch, flags: frozenset[str]) -> None:
    """This process runs, as far as ``auto`` can tell, on a CPU with ``flags``."""
    monkeypatch.setattr(int8_runtime, "cpu_flags", lambda: flags)


def test_cpu_flags_are_read_from_cpuinfo() -> None:
    assert int8_runtime.cpu_flags(CPUINFO) == {"fpu", "vme", "sse4_2", "avx", "avx2", "fma"}


def test_a_cpuinfo_without_flags_has_none() -> None:
    # An aarch64 kernel says "Features", not "flags".
    assert int8_runtime.cpu_flags("processor\t: 0\nFeatures\t: fp asimd\n") == frozenset()


@pytest.mark.parametrize("flag", ["avx512_vnni", "avx_vnni", "amx_int8"])
def test_a_cpu_with_int8_dot_products_runs_openvino(flag: str) -> None:
    runtime, why = int8_runtime.for_this_cpu(AVX2_ONLY | {flag})
    assert runtime == "openvino-int8"
    assert flag in why


def test_a_cpu_without_int8_dot_products_runs_onnx_runtime() -> None:
    runtime, why = int8_runtime.for_this_cpu(AVX2_ONLY)
    assert runtime == "onnx-int8"
    assert "no int8 dot products" in why


def test_auto_is_the_default_backend() -> None:
    assert Settings().embedding_backend == "auto"


@pytest.mark.usefixtures("semantic_search")
async def test_auto_without_a_database_runs_this_cpus_runtime(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    on_a_cpu_with(monkeypatch, AVX2_ONLY)
    async with open_embedder(Settings(data_dir=tmp_path)) as embedder:
        assert isinstance(embedder, LocalEmbedder)
        assert embedder.backend == "onnx-int8"
        assert embedder.name == "local:all-MiniLM-L6-v2+int8"


@pytest.fixture
async def no_choice_recorded(shape: Shape) -> AsyncIterator[Shape]:
    """``shape`` with no runtime recorded (the scaled shape's database lives for the
    session: the choice a test records is taken away after it)."""

    async def forget() -> None:
        async with open_database(shape.settings.resolved_database_url):
            await DeploymentChoice.filter(name=int8_runtime.CHOICE_NAME).delete()

    await forget()
    yield shape
    await forget()


@pytest.mark.usefixtures("semantic_search")
async def test_a_process_on_another_kind_of_cpu_embeds_in_the_first_ones_space(
    start_app: ClientFactory,
    no_choice_recorded: Shape,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = no_choice_recorded.settings
    on_a_cpu_with(monkeypatch, AVX2_ONLY)
    first = await start_app(settings)
    project_id, key = await new_project()
    api = Api(first, no_choice_recorded, project_id, key)
    file_id = await upload_labelled(api, "The feline dozed on the rug all afternoon.")
    await first.close()

    # A second process on a machine with VNNI, which alone would run OpenVINO.
    on_a_cpu_with(monkeypatch, VNNI)
    with caplog.at_level(logging.WARNING, "libflow.embeddings"):
        second = await start_app(settings)
    api = Api(second, no_choice_recorded, project_id, key)
    await api.run_jobs()
    embedder = second.app[appkeys.EMBEDDER]
    assert isinstance(embedder, LocalEmbedder)
    assert embedder.backend == "onnx-int8"
    assert "the deployment's choice" in caplog.text
    # Nothing was embedded again, and its semantic search finds what the first embedded.
    [chunk] = await Chunk.filter(file_id=file_id)
    assert chunk.embedder == "local:all-MiniLM-L6-v2+int8"
    assert await file_ids(api, "a cat sleeping on a mat", mode="semantic") == [file_id]


async def test_processes_that_propose_at_once_agree(no_choice_recorded: Shape) -> None:
    # Both find no row, both insert: the database keeps one, and both read it back.
    async with open_database(no_choice_recorded.settings.resolved_database_url):
        chosen = await asyncio.gather(
            chosen_once(int8_runtime.CHOICE_NAME, "openvino-int8"),
            chosen_once(int8_runtime.CHOICE_NAME, "onnx-int8"),
        )
        recorded = await DeploymentChoice.get(name=int8_runtime.CHOICE_NAME)
    assert chosen == [recorded.value, recorded.value]


async def test_a_later_process_takes_the_recorded_choice(
    no_choice_recorded: Shape, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = no_choice_recorded.settings
    async with open_database(settings.resolved_database_url):
        on_a_cpu_with(monkeypatch, VNNI)
        first = await with_agreed_backend(settings)
        on_a_cpu_with(monkeypatch, AVX2_ONLY)
        second = await with_agreed_backend(settings)
    assert first.embedding_backend == second.embedding_backend == "openvino-int8"


async def test_a_choice_of_a_later_version_is_not_run(
    no_choice_recorded: Shape,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = no_choice_recorded.settings
    on_a_cpu_with(monkeypatch, AVX2_ONLY)
    async with open_database(settings.resolved_database_url):
        await DeploymentChoice.create(name=int8_runtime.CHOICE_NAME, value="npu-int4")
        with caplog.at_level(logging.WARNING, "libflow.embeddings"):
            chosen = await with_agreed_backend(settings)
    assert chosen.embedding_backend == "onnx-int8"
    assert "'npu-int4', which this version does not know" in caplog.text


@pytest.mark.parametrize("backend", ["onnx-int8", "torch"])
async def test_a_backend_named_in_the_settings_is_not_replaced(
    no_choice_recorded: Shape, backend: str
) -> None:
    settings = no_choice_recorded.settings.model_copy(update={"embedding_backend": backend})
    async with open_database(settings.resolved_database_url):
        assert (await with_agreed_backend(settings)).embedding_backend == backend
        assert not await DeploymentChoice.exists(name=int8_runtime.CHOICE_NAME)
