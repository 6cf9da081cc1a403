"""What every embedder is: the Embedder protocol, its Vectors, PassageSizing, EmbeddingError."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

Vectors = npt.NDArray[np.float32]


@dataclass(frozen=True, slots=True)
class PassageSizing:
    """How passages are cut for an embedder: measured as it measures them, never over its limit.

    ``tokenizer`` names a Hugging Face ``tokenizer.json``: passages are counted in its tokens,
    special tokens included, exactly as the model counts them. Without one, tokens are
    estimated (``chunking.estimate_tokens``), and ``min_bytes_per_token`` makes the estimate
    an upper bound for byte-level BPE models (a token covers at least one byte of UTF-8).
    """

    max_tokens: int = 500  # per passage, special tokens included
    overlap_tokens: int = 50  # shared with the passage before
    tokenizer: str | None = None
    min_bytes_per_token: int | None = None

    def __post_init__(self) -> None:
        if self.max_tokens < 1 or not 0 <= self.overlap_tokens < self.max_tokens:
            raise ValueError("need max_tokens >= 1 and 0 <= overlap_tokens < max_tokens")
        if self.min_bytes_per_token is not None and self.min_bytes_per_token < 1:
            raise ValueError("need min_bytes_per_token >= 1")

    def to_json(self) -> dict[str, Any]:
        """As a JSON object (it travels to the process that cuts the passages)."""
        return asdict(self)

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> PassageSizing:
        """The sizing ``to_json`` wrote; ValueError or TypeError if it is not one."""
        return cls(**value)


# Keyword-only search: passages of about 500 estimated tokens, as they always were.
ESTIMATED_SIZING = PassageSizing()


class Embedder(Protocol):
    """Turns texts into vectors of one vector space."""

    name: str
    dimensions: int
    # How passages for this embedder are cut: no passage is longer than it reads.
    passage_sizing: PassageSizing

    async def embed(self, texts: Sequence[str], *, truncate: bool = False) -> Vectors:
        """One L2-normalized float32 row per text: shape ``(len(texts), dimensions)``.

        A text longer than the model reads is an EmbeddingError (a passage cut too long is
        a bug), unless ``truncate`` (a search query): then its start is read.
        """
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
