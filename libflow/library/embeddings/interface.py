"""What every embedder is: the Embedder protocol, its Vectors, EmbeddingError, batching helpers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt

Vectors = npt.NDArray[np.float32]


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


def empty_vectors(dimensions: int) -> Vectors:
    """No rows: the answer to embedding no texts."""
    return np.zeros((0, dimensions), dtype=np.float32)


def batches(texts: Sequence[str], size: int) -> list[Sequence[str]]:
    """``texts`` cut into consecutive batches of at most ``size``."""
    return [texts[i : i + size] for i in range(0, len(texts), size)]
