"""Embedders: the local model offline, the OpenAI wire format, the choice from settings."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from aiohttp.test_utils import unused_port

from libflow.library.embeddings import int8_runtime, local, open_embedder
from libflow.library.embeddings.interface import EmbeddingError, Vectors
from libflow.library.embeddings.local import LocalBackend, LocalEmbedder
from libflow.library.embeddings.onnx_export import exported_model
from libflow.library.embeddings.openai import OpenAIEmbedder
from settings import Settings, SettingsError
from tests import openai_server as fake_openai_api
from tests.conftest import ClientFactory, Shape, new_project
from tests.library_helpers import assert_error
from tests.openai_server import DIMENSIONS, OpenAIServer, hashed_embedding

ROOT = Path(__file__).resolve().parent.parent
README_TEXT = (ROOT / "README.md").read_text(encoding="utf-8")
# The fixture, bound by assignment: an imported name that parameters shadow trips ruff's F811.
openai_server = fake_openai_api.openai_server

# Run in a fresh process, so the model really loads here, with every socket refused.
OFFLINE_LOAD = """
import asyncio, json, os, sys

def no_network(event, args):
    if event in ("socket.connect", "socket.getaddrinfo"):
        raise OSError(f"network used while loading the model: {event} {args}")

sys.addaudithook(no_network)
from libflow.library.embeddings.local import LocalEmbedder

async def main():
    embedder = await LocalEmbedder.open()
    vectors = await embedder.embed(["first text", "second text", "third text"])
    print(json.dumps({
        "name": embedder.name,
        "shape": list(vectors.shape),
        "dtype": str(vectors.dtype),
        "norms": [float(n) for n in (vectors ** 2).sum(axis=1)],
        "offlineVariables": [k for k in os.environ if k.endswith("_OFFLINE")],
    }))

asyncio.run(main())
"""


def unit_rows(vectors: Vectors) -> bool:
    """Whether every row has length 1."""
    return bool(np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5))


def expected_hashed(texts: list[str]) -> Vectors:
    """What the fake server's vectors become once normalized."""
    rows = np.asarray([hashed_embedding(t) for t in texts], dtype=np.float32)
    normalized: Vectors = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    return normalized


async def fake_openai(server: OpenAIServer, batch_size: int = 96) -> OpenAIEmbedder:
    """An embedder for the fake server's hashed-words model."""
    return await OpenAIEmbedder.open(
        server.base_url, server.api_key, "hashed-words", batch_size=batch_size
    )


# --- local ------------------------------------------------------------------------------------


@pytest.mark.usefixtures("semantic_search")
def test_local_embedder_loads_offline_and_gives_unit_float32_rows() -> None:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_OFFLINE")}
    result = subprocess.run(
        [sys.executable, "-W", "error", "-c", OFFLINE_LOAD],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["name"] == "local:all-MiniLM-L6-v2"
    assert report["shape"] == [3, 384]
    assert report["dtype"] == "float32"
    assert np.allclose(report["norms"], 1.0, atol=1e-5)
    # Offline without setting HF_HUB_OFFLINE and friends for the whole process.
    assert report["offlineVariables"] == []
    assert "Loading weights" not in result.stderr


# One process of a deployment: the ONNX int8 embedder on a model cache directory.
ONNX_START = """
import asyncio, json, sys
from pathlib import Path
from libflow.library.embeddings.local import LocalEmbedder

async def main():
    embedder = await LocalEmbedder.open(backend="onnx-int8", cache_dir=Path(sys.argv[1]))
    vectors = await embedder.embed(["first text", "a second, longer text"])
    print(json.dumps({
        "torch": "torch" in sys.modules,
        "vectors": vectors.tolist(),
        "maxTokens": embedder.max_tokens,
        "sizing": embedder.passage_sizing.tokenizer,
    }))

asyncio.run(main())
"""


@pytest.mark.usefixtures("semantic_search")
def test_processes_started_together_export_the_model_once_and_all_start(tmp_path: Path) -> None:
    # --workers N starts its processes at once on one cache directory: the quantizer's
    # scratch file, named after its input, was deleted by one under another, which died.
    # The first process's child exports the model (through PyTorch); the others find it
    # recorded.
    starts = [
        subprocess.Popen(
            [sys.executable, "-W", "error", "-c", ONNX_START, str(tmp_path)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    reports = []
    for start in starts:
        out, err = start.communicate(timeout=300)
        assert start.returncode == 0, err
        reports.append(json.loads(out))
    assert all(np.allclose(r["vectors"], reports[0]["vectors"], atol=1e-6) for r in reports)
    assert len(list(tmp_path.glob("*.int8.onnx"))) == 1
    # None of them loaded PyTorch (about 1 GiB that a process never gives back): the
    # export ran in a child of the first, and the others found it recorded.
    assert not any(report["torch"] for report in reports)
    assert {report["maxTokens"] for report in reports} == {256}
    assert len({report["sizing"] for report in reports}) == 1
    assert Path(reports[0]["sizing"]).is_file()


@pytest.mark.usefixtures("semantic_search")
def test_an_export_record_that_does_not_hold_is_exported_again(tmp_path: Path) -> None:
    for record in tmp_path.glob("exported-*.json"):
        record.unlink()
    embedder = LocalEmbedder(backend="onnx-int8", cache_dir=tmp_path)
    [record] = tmp_path.glob("exported-*.int8.json")
    record.write_text("{not json")
    again = LocalEmbedder(backend="onnx-int8", cache_dir=tmp_path)
    assert again.max_tokens == embedder.max_tokens
    assert json.loads(record.read_text())["maxTokens"] == embedder.max_tokens


@pytest.mark.usefixtures("semantic_search")
async def test_the_model_is_loaded_once_per_process() -> None:
    first, second = await asyncio.gather(LocalEmbedder.open(), LocalEmbedder.open())
    third = await LocalEmbedder.open("sentence-transformers/all-MiniLM-L6-v2")
    assert first.model is second.model is third.model
    assert first.name == third.name == "local:all-MiniLM-L6-v2"


@pytest.mark.usefixtures("semantic_search")
async def test_a_paraphrase_is_closer_than_an_unrelated_sentence() -> None:
    embedder = await LocalEmbedder.open()
    query, paraphrase, unrelated = await embedder.embed(
        [
            "How can I reset a forgotten password?",
            "Locked out: lost login credentials, need new ones",
            "The orchestra tuned before the symphony began.",
        ]
    )
    # No word in common with the query. Rows are unit length: the dot product is the cosine.
    assert float(query @ paraphrase) > float(query @ unrelated) + 0.2


@pytest.mark.usefixtures("semantic_search")
async def test_more_texts_than_a_batch_come_back_in_order() -> None:
    embedder = await LocalEmbedder.open(batch_size=4)
    texts = [f"passage number {i} about topic {i % 3}" for i in range(10)]
    together = await embedder.embed(texts)
    one_by_one = np.concatenate([await embedder.embed([t]) for t in texts])
    assert together.shape == (10, 384)
    assert np.allclose(together, one_by_one, atol=1e-5)


@pytest.mark.usefixtures("semantic_search")
@pytest.mark.parametrize("backend", ["onnx", "onnx-int8", "openvino-int8"])
async def test_texts_of_many_lengths_come_back_in_order_from_an_exported_graph(
    backend: LocalBackend, tmp_path: Path
) -> None:
    # Sorted by length inside (less padding), put back in order outside.
    embedder = await LocalEmbedder.open(backend=backend, batch_size=3, cache_dir=tmp_path)
    texts = [("word " * (7 * i % 40)) + f"passage {i}" for i in range(10)]
    together = await embedder.embed(texts)
    one_by_one = np.concatenate([await embedder.embed([t]) for t in texts])
    assert together.shape == (10, 384)
    # onnx-int8's activations are scaled per batch: a text's batch-mates move its vector a
    # little (down to 0.984 on the benchmark's passages); openvino-int8's scales are fixed.
    closest = 0.98 if backend == "onnx-int8" else 0.999_9
    assert np.min(np.sum(together * one_by_one, axis=1)) > closest


@pytest.mark.usefixtures("semantic_search")
async def test_onnx_runtime_gives_the_vectors_of_pytorch(tmp_path: Path) -> None:
    torch_embedder = await LocalEmbedder.open(backend="torch")
    onnx_embedder = await LocalEmbedder.open(backend="onnx", cache_dir=tmp_path)
    texts = [README_TEXT[i : i + 600] for i in range(0, 6_000, 600)]
    expected, got = await torch_embedder.embed(texts), await onnx_embedder.embed(texts)
    assert np.min(np.sum(expected * got, axis=1)) > 0.9999
    # One vector space: the same name, so nothing is embedded again on a change of backend.
    assert onnx_embedder.name == torch_embedder.name == "local:all-MiniLM-L6-v2"
    assert unit_rows(got)


@pytest.mark.usefixtures("semantic_search")
async def test_int8_vectors_are_close_but_a_space_of_their_own(tmp_path: Path) -> None:
    fp32 = await LocalEmbedder.open(backend="onnx", cache_dir=tmp_path)
    int8 = await LocalEmbedder.open(backend="onnx-int8", cache_dir=tmp_path)
    texts = [README_TEXT[i : i + 600] for i in range(0, 6_000, 600)]
    cosines = np.sum(await fp32.embed(texts) * await int8.embed(texts), axis=1)
    assert np.min(cosines) > 0.97
    assert int8.name == "local:all-MiniLM-L6-v2+int8"


@pytest.mark.usefixtures("semantic_search")
async def test_openvino_int8_vectors_are_close_but_a_space_of_their_own(tmp_path: Path) -> None:
    fp32 = await LocalEmbedder.open(backend="onnx", cache_dir=tmp_path)
    int8 = await LocalEmbedder.open(backend="openvino-int8", cache_dir=tmp_path)
    texts = [README_TEXT[i : i + 600] for i in range(0, 6_000, 600)]
    cosines = np.sum(await fp32.embed(texts) * await int8.embed(texts), axis=1)
    assert np.min(cosines) > 0.97
    assert int8.name == "local:all-MiniLM-L6-v2+openvino-int8"
    assert unit_rows(await int8.embed(texts))


@pytest.mark.usefixtures("semantic_search")
def test_openvino_pads_batches_to_a_few_widths_without_moving_a_vector(tmp_path: Path) -> None:
    from libflow.library.embeddings.openvino_int8 import WIDTH_STEP, OpenVinoSession

    model = LocalEmbedder(backend="torch").model
    path = exported_model(model, tmp_path, kind="openvino-int8")
    feed = {
        name: array.astype(np.int64)
        for name, array in model.tokenizer(
            ["a short passage", "a passage of a few more words than the first"],
            padding=True,
            return_tensors="np",
        ).items()
    }
    width = feed["input_ids"].shape[1]
    assert width % WIDTH_STEP  # the test means a batch that is padded
    exact = OpenVinoSession(path, parallel=1, width_step=1).last_hidden_state(feed)
    padded = OpenVinoSession(path, parallel=1).last_hidden_state(feed)
    assert padded.shape == exact.shape == (2, width, 384)
    real = feed["attention_mask"].astype(bool)
    assert np.allclose(padded[real], exact[real], atol=1e-4)


@pytest.mark.usefixtures("semantic_search")
def test_the_openvino_export_is_written_once_beside_the_onnx_graph(tmp_path: Path) -> None:
    model = LocalEmbedder(backend="torch").model
    path = exported_model(model, tmp_path, kind="openvino-int8")
    assert path.name.endswith(".openvino-int8.xml") and path.with_suffix(".bin").is_file()
    assert len(list(tmp_path.glob("*.onnx"))) == 1  # the fp32 graph it was quantized from
    stamps = {p: p.stat().st_mtime_ns for p in tmp_path.iterdir()}
    assert exported_model(model, tmp_path, kind="openvino-int8") == path
    assert {p: p.stat().st_mtime_ns for p in tmp_path.iterdir()} == stamps
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


@pytest.mark.usefixtures("semantic_search")
def test_an_openvino_export_without_its_weights_is_exported_again(tmp_path: Path) -> None:
    first = LocalEmbedder(backend="openvino-int8", cache_dir=tmp_path)
    [weights] = tmp_path.glob("*.openvino-int8.bin")
    weights.unlink()  # half an export: the .xml alone cannot run
    again = LocalEmbedder(backend="openvino-int8", cache_dir=tmp_path)
    assert weights.is_file()
    assert again.name == first.name


@pytest.mark.usefixtures("semantic_search")
def test_the_onnx_export_is_written_once_into_the_cache_dir(tmp_path: Path) -> None:
    model = LocalEmbedder(backend="torch").model
    path = exported_model(model, tmp_path, kind="int8")
    exported = sorted(p.name for p in tmp_path.glob("*.onnx"))
    assert len(exported) == 2 and exported[0] == path.name and path.name.endswith(".int8.onnx")
    stamps = {p: p.stat().st_mtime_ns for p in tmp_path.glob("*.onnx")}
    # The next start finds the files and exports nothing; no temporary file is left over.
    assert exported_model(model, tmp_path, kind="int8") == path
    assert {p: p.stat().st_mtime_ns for p in tmp_path.glob("*.onnx")} == stamps
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def _operators(path: Path) -> set[str]:
    import onnx

    return {node.op_type for node in onnx.load(path).graph.node}


@pytest.mark.usefixtures("semantic_search")
def test_the_exported_graph_runs_fused_operators(tmp_path: Path) -> None:
    # ONNX Runtime's transformer optimizer before quantization: about 50 nodes, not 300.
    model = LocalEmbedder(backend="torch").model
    operators = _operators(exported_model(model, tmp_path, kind="int8"))
    assert {"QAttention", "EmbedLayerNormalization", "SkipLayerNormalization"} <= operators
    assert "Softmax" not in operators


@pytest.mark.usefixtures("semantic_search")
def test_a_model_type_the_optimizer_does_not_know_keeps_the_plain_graph(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = LocalEmbedder(backend="torch").model
    monkeypatch.setattr(model[0].auto_model.config, "model_type", "not-a-bert")
    operators = _operators(exported_model(model, tmp_path, kind="fp32"))
    assert "Softmax" in operators and "Attention" not in operators


@pytest.mark.usefixtures("semantic_search")
async def test_the_passage_sizing_is_the_models_tokenizer_and_limit(tmp_path: Path) -> None:
    embedder = await LocalEmbedder.open(backend="torch", cache_dir=tmp_path)
    sizing = embedder.passage_sizing
    assert (sizing.max_tokens, sizing.overlap_tokens) == (256, 25)
    assert sizing.tokenizer is not None and Path(sizing.tokenizer).parent == tmp_path
    from tokenizers import Tokenizer

    # The chunker counts with what the model tokenizes with, special tokens included.
    text = README_TEXT[:800]
    assert (
        Tokenizer.from_file(sizing.tokenizer).encode(text).ids
        == (embedder.model.tokenizer(text)["input_ids"])
    )


@pytest.mark.usefixtures("semantic_search")
async def test_no_texts_give_an_empty_matrix_of_the_right_width() -> None:
    embedder = await LocalEmbedder.open()
    vectors = await embedder.embed([])
    assert vectors.shape == (0, 384)
    assert vectors.dtype == np.float32


@pytest.mark.usefixtures("semantic_search")
@pytest.mark.parametrize("backend", ["torch", "onnx-int8", "openvino-int8"])
async def test_a_model_that_cannot_be_found_offline_is_a_settings_error(
    tmp_path: Path, backend: LocalBackend
) -> None:
    # onnx-int8: the child process that exports refuses it; its reason is the error here.
    with pytest.raises(SettingsError, match="LIBFLOW_EMBEDDING_MODEL"):
        await LocalEmbedder.open(
            str(tmp_path / "missing-model"), backend=backend, cache_dir=tmp_path / "models"
        )


# --- openai -----------------------------------------------------------------------------------


async def test_openai_embedder_sends_batches_and_normalizes(openai_server: OpenAIServer) -> None:
    texts = [f"chunk {i} of the annual report" for i in range(7)]
    async with await fake_openai(openai_server, batch_size=3) as embedder:
        probes = len(openai_server.requests)
        vectors = await embedder.embed(texts)
    assert [len(batch) for batch in openai_server.inputs[probes:]] == [3, 3, 1]
    assert vectors.shape == (7, DIMENSIONS)
    assert vectors.dtype == np.float32
    assert np.allclose(vectors, expected_hashed(texts), atol=1e-6)
    assert unit_rows(vectors)


async def test_openai_rows_are_put_in_input_order_by_index(openai_server: OpenAIServer) -> None:
    openai_server.reverse_order = True
    texts = ["apples and pears", "trains and buses", "violins and cellos"]
    async with await fake_openai(openai_server) as embedder:
        vectors = await embedder.embed(texts)
    assert np.allclose(vectors, expected_hashed(texts), atol=1e-6)


async def test_openai_dimension_is_asked_of_the_api_for_unknown_models(
    openai_server: OpenAIServer,
) -> None:
    async with await fake_openai(openai_server) as embedder:
        assert embedder.dimensions == DIMENSIONS
        assert embedder.name == "openai:hashed-words"
    assert len(openai_server.requests) == 1


async def test_openai_requests_carry_the_bearer_key(openai_server: OpenAIServer) -> None:
    async with await fake_openai(openai_server) as embedder:
        await embedder.embed(["hello"])
    assert {r.headers["Authorization"] for r in openai_server.requests} == {
        f"Bearer {openai_server.api_key}"
    }
    assert openai_server.requests[-1].body == {"model": "hashed-words", "input": ["hello"]}


async def test_a_wrong_key_is_a_lasting_error(openai_server: OpenAIServer) -> None:
    with pytest.raises(EmbeddingError, match="HTTP 401: Incorrect API key") as caught:
        await OpenAIEmbedder.open(openai_server.base_url, "sk-wrong", "hashed-words")
    assert caught.value.transient is False


@pytest.mark.parametrize("status", [429, 500, 503])
async def test_rate_limits_and_server_errors_are_transient(
    openai_server: OpenAIServer, status: int
) -> None:
    async with await fake_openai(openai_server) as embedder:
        openai_server.fail_next(status, 1)
        with pytest.raises(EmbeddingError, match=f"HTTP {status}") as caught:
            await embedder.embed(["retry me"])
        assert caught.value.transient is True
        assert caught.value.retry_after == (1.0 if status == 429 else None)
        # The failure was the server's: the next try succeeds.
        assert (await embedder.embed(["retry me"])).shape == (1, DIMENSIONS)


async def test_a_bad_request_is_not_transient(openai_server: OpenAIServer) -> None:
    async with await fake_openai(openai_server) as embedder:
        # OpenAI refuses empty strings with a 400.
        with pytest.raises(EmbeddingError, match=r"HTTP 400: '\$.input' is invalid") as caught:
            await embedder.embed(["fine", ""])
    assert caught.value.transient is False


async def test_an_unreachable_api_is_transient() -> None:
    url = f"http://127.0.0.1:{unused_port()}/v1"
    async with OpenAIEmbedder(url, "sk-x", dimensions=8) as embedder:
        with pytest.raises(EmbeddingError, match="unreachable") as caught:
            await embedder.embed(["anyone there?"])
    assert caught.value.transient is True


async def test_openai_no_texts_send_no_request(openai_server: OpenAIServer) -> None:
    async with await fake_openai(openai_server) as embedder:
        sent = len(openai_server.requests)
        vectors = await embedder.embed([])
    assert vectors.shape == (0, DIMENSIONS)
    assert len(openai_server.requests) == sent


# --- choosing from settings -------------------------------------------------------------------


async def test_embedder_none_means_keyword_only(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, "libflow.embeddings"):
        async with open_embedder(Settings(embedder="none")) as embedder:
            assert embedder is None
    assert "keyword-only" in caplog.text


async def test_embedder_openai_without_url_is_a_settings_error() -> None:
    with pytest.raises(SettingsError, match="LIBFLOW_OPENAI_BASE_URL"):
        async with open_embedder(Settings(embedder="openai", openai_api_key="sk-x")):
            pass


async def test_embedder_openai_uses_the_configured_api(openai_server: OpenAIServer) -> None:
    settings = Settings(
        embedder="openai",
        openai_base_url=openai_server.base_url,
        openai_api_key=openai_server.api_key,
        embedding_model="hashed-words",
        embedding_batch_size=2,
    )
    async with open_embedder(settings) as embedder:
        assert embedder is not None
        vectors = await embedder.embed(["a b", "c d", "e f"])
    assert embedder.name == "openai:hashed-words"
    assert vectors.shape == (3, DIMENSIONS)
    assert [len(batch) for batch in openai_server.inputs[1:]] == [2, 1]


async def test_a_search_the_embedding_service_fails_is_503_unavailable(
    openai_server: OpenAIServer, start_app: ClientFactory, embedded: Shape
) -> None:
    settings = embedded.settings.model_copy(
        update={
            "embedder": "openai",
            "openai_base_url": openai_server.base_url,
            "openai_api_key": openai_server.api_key,
            "embedding_model": "hashed-words",
        }
    )
    client = await start_app(settings)
    project_id, key = await new_project()
    openai_server.fail_next(503, 5)
    response = await client.post(
        f"/api/publicv1/projects/{project_id}/library/search",
        json={"query": "penguins", "mode": "semantic"},
        headers={"Authorization": key},
    )
    body = await assert_error(response, 503, "UNAVAILABLE")
    assert "embedding service" in body["message"]
    assert response.headers["Retry-After"] == "5"


@pytest.mark.usefixtures("semantic_search")
async def test_embedder_local_is_the_default(tmp_path: Path) -> None:
    # Its runtime, auto, is this CPU's int8 one (tests/test_embedding_runtime_choice.py).
    runtime, _why = int8_runtime.for_this_cpu()
    tags = {"openvino-int8": "+openvino-int8", "onnx-int8": "+int8"}
    async with open_embedder(Settings(data_dir=tmp_path)) as embedder:
        assert isinstance(embedder, LocalEmbedder)
        assert (embedder.name, embedder.dimensions) == (
            f"local:all-MiniLM-L6-v2{tags[runtime]}",
            384,
        )
        assert (embedder.backend, embedder.batch_size) == (runtime, 16)


@pytest.mark.usefixtures("semantic_search")
async def test_embedding_backend_threads_and_batch_come_from_settings(tmp_path: Path) -> None:
    settings = Settings(
        data_dir=tmp_path,
        embedding_backend="onnx",
        embedding_threads=1,
        embedding_batch_size=8,
    )
    async with open_embedder(settings) as embedder:
        assert isinstance(embedder, LocalEmbedder)
        assert (embedder.backend, embedder.threads, embedder.batch_size) == ("onnx", 1, 8)
        assert embedder.name == "local:all-MiniLM-L6-v2"
    # The export is kept in the data dir for the next start.
    assert list((tmp_path / "models").glob("*.onnx"))


@pytest.mark.usefixtures("semantic_search")
async def test_without_onnx_runtime_the_local_model_runs_on_pytorch(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    # Threads no other test asks for: a session already open in this process is reused.
    settings = Settings(data_dir=tmp_path, embedding_backend="onnx", embedding_threads=7)
    with caplog.at_level(logging.WARNING, "libflow.embeddings"):
        async with open_embedder(settings) as embedder:
            assert isinstance(embedder, LocalEmbedder)
            assert embedder.backend == "torch"
            assert embedder.name == "local:all-MiniLM-L6-v2"
    assert "embedding with PyTorch instead" in caplog.text


@pytest.mark.usefixtures("semantic_search")
async def test_without_the_openvino_extra_its_backend_falls_back_to_onnx_int8(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "openvino", None)
    settings = Settings(data_dir=tmp_path, embedding_backend="openvino-int8", embedding_threads=5)
    with caplog.at_level(logging.WARNING, "libflow.embeddings"):
        async with open_embedder(settings) as embedder:
            assert isinstance(embedder, LocalEmbedder)
            assert embedder.backend == "onnx-int8"
            assert embedder.name == "local:all-MiniLM-L6-v2+int8"
    assert "LIBFLOW_EMBEDDING_BACKEND=openvino-int8 needs openvino" in caplog.text
    assert "pip install -e '.[semantic]'" in caplog.text


async def test_without_the_semantic_extra_search_is_keyword_only(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    # As if sentence-transformers were not installed (None in sys.modules blocks the import);
    # a model not loaded yet, so the import is attempted.
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    settings = Settings(embedding_model=str(tmp_path))
    with caplog.at_level(logging.WARNING, "libflow.embeddings"):
        async with open_embedder(settings) as embedder:
            assert embedder is None
    assert "keyword-only" in caplog.text
    assert "pip install -e '.[semantic]'" in caplog.text


def test_openai_api_key_stays_out_of_the_settings_repr() -> None:
    assert "sk-secret" not in repr(Settings(openai_api_key="sk-secret"))


@pytest.mark.usefixtures("semantic_search")
async def test_an_export_that_does_not_end_is_stopped_and_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A hung export would hold the model cache's lock, and every process's start, for good.
    monkeypatch.setattr(local, "EXPORT_TIMEOUT_SECONDS", 0.5)  # the child only starts
    with pytest.raises(SettingsError, match=r"did not end within 0\.5 s"):
        await LocalEmbedder.open(backend="onnx", cache_dir=tmp_path)
