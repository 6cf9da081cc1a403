"""The OpenAI embedder: any OpenAI-compatible ``POST {base_url}/embeddings`` API."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np
from aiohttp import ClientError, ClientSession, ClientTimeout

from libflow.library.embeddings.interface import (
    ESTIMATED_SIZING,
    EmbeddingError,
    PassageSizing,
    Vectors,
    batches,
    empty_vectors,
)

DEFAULT_OPENAI_MODEL = "text-embedding-3-small"
KNOWN_OPENAI_DIMENSIONS = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
}
# Tokens each of them reads of one text (more is a 400); a model not known here: this, unless
# LIBFLOW_EMBEDDING_MAX_TOKENS says.
OPENAI_MAX_TOKENS = 8191
# Room for special tokens an OpenAI-compatible server may add to each text.
_SPECIAL_TOKENS_ROOM = 8


def openai_sizing(max_tokens: int) -> PassageSizing:
    """Passages of about 500 estimated tokens, and never more UTF-8 bytes than the model reads.

    No tokenizer of the model is at hand, so the count must never be under the real one: BPE
    and WordPiece tokens each cover at least one byte, so a passage of ``max_tokens`` bytes
    (less room for special tokens) always fits. The estimate counts at least one token per
    ``min_bytes_per_token`` bytes to keep to that.
    """
    room = max_tokens - _SPECIAL_TOKENS_ROOM
    size = min(ESTIMATED_SIZING.max_tokens, room)
    return PassageSizing(
        max_tokens=size,
        overlap_tokens=size // 10,
        min_bytes_per_token=max(1, room // size),
    )


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
        max_tokens: int = OPENAI_MAX_TOKENS,
    ) -> None:
        """Use ``session`` if given, else a session of its own that ``close`` closes."""
        self.name = f"openai:{model}"
        self.dimensions = dimensions
        self.max_tokens = max_tokens
        self.passage_sizing = openai_sizing(max_tokens)
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
        max_tokens: int | None = None,
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
            max_tokens=max_tokens or OPENAI_MAX_TOKENS,
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

    async def embed(self, texts: Sequence[str], *, truncate: bool = False) -> Vectors:
        """Embed ``texts`` in requests of ``batch_size`` inputs, one request at a time.

        ``truncate`` (a search query) sends at most as many bytes as the model surely reads;
        passages are cut to fit already, and the API refuses a text longer than it reads.
        """
        if not texts:
            return empty_vectors(self.dimensions)
        if truncate:
            room = self.max_tokens - _SPECIAL_TOKENS_ROOM
            texts = [t.encode()[:room].decode(errors="ignore") or t[:1] for t in texts]
        parts = [await self._request(batch) for batch in batches(texts, self.batch_size)]
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
