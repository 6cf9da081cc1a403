"""Hybrid search: keyword and vector rankings of a project's passages, fused by their scores.

Each ranking gives its hits a score in 0..1 that means something on its own: the keyword
score is the passage's BM25 (ts_rank_cd on PostgreSQL) divided by the best one of this
query, the semantic score is the cosine similarity of the passage and the query. The fused
score is a convex combination of the two put on one scale (Bruch et al., "An Analysis of
Fusion Functions for Hybrid Retrieval", 2022): each between its theoretical least (0 for
the keyword score, MIN_SIMILARITY for the cosine, under which the vector ranking returns
nothing) and this query's best, so each ranking's first hit has 1.0; a best cosine under
CONFIDENT_SIMILARITY is scaled against that instead, since a query whose nearest passage is
that far has found nothing it means. A passage one ranking did not return gets that
ranking's lowest returned score, the most it can have had, but for a keyword ranking that
returned fewer than its candidates: that was every passage holding a word of the query, so
one it lacks has none of them, and 0. (A passage under MIN_SIMILARITY may still be the one:
the model finds no meaning in a code or a made-up name, which the keyword ranking matches.)
The retrieval benchmarks (bench/retrieval_fusions.py) chose this, and the weights, over
raw cosines, min-max over the candidates, z-scores and (weighted) reciprocal rank fusion.
Unlike reciprocal rank fusion, a passage that one ranking puts first (the exact words) is
not beaten by one in the middle of both.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from tortoise.connection import get_connection

from libflow.errors import Unavailable, ValidationFailed
from libflow.json_text import UNSTORABLE_PROBLEM, holds_unstorable
from libflow.library.embeddings.interface import EmbeddingError
from libflow.library.vectors import (
    MIN_SIMILARITY,
    MetadataValue,
    PassageFilter,
    QueryEmbedder,
    VectorSearch,
    typed_value,
)
from libflow.models import Chunk, LibraryFile

# The fusion's parameters (the retrieval-quality benchmark chose them): the weight of each
# ranking's score, on the common scale, in the fused score. The cosine weighs more: on the
# benchmark's collection the vector ranking finds the answer far more often than BM25 (the
# README's "Retrieval quality"). Keyword 0.43 keeps the keyword ranking's first hit, absent
# from the vector ranking, above a passage in the middle of both (tests/test_search_filters.py's
# example holds from about 0.37 on), and is the middle of the weights (0.42 to 0.44) where
# hybrid search beat both rankings alone by nDCG@10 in three runs, by Recall@10 in two
# (the third a tie: the margin is one answer of 174).
FUSION_KEYWORD_WEIGHT = 0.43
FUSION_SEMANTIC_WEIGHT = 0.57
CANDIDATES = 50  # how many hits each ranking contributes to the fusion (at least the limit)
# A best cosine under this is not stretched to 1 on the fused scale. Without it, passages a
# little above MIN_SIMILARITY (made-up words, codes: all-MiniLM finds no meaning in them)
# outranked the one passage holding the query's exact code. About the tenth percentile of
# the best cosines on both retrieval collections: on the two it moved nDCG@10 by -0.0004
# (FAQ) and +0.0011 (man pages), Recall@10 not at all.
CONFIDENT_SIMILARITY = 0.5
MAX_QUERY_TERMS = 32
MAX_QUERY_CHARS = 2000  # a search's text: GET's ``q``, POST's ``query``, library_search's
# The last word of a query also matches as a prefix ("renovat" finds "renovation"), from
# this length on: a one- or two-letter prefix matches most of the index.
PREFIX_MIN_CHARS = 3
_WORD = re.compile(r"\w+", re.UNICODE)


@dataclass(frozen=True, slots=True)
class Fusion:
    """How the two rankings' scores make the fused one: the weight of each.

    The one place to change the weights: ``search(..., fusion=Fusion(0.5, 0.5))``, or
    ``DEFAULT_FUSION`` for every search of the process.
    """

    keyword_weight: float = FUSION_KEYWORD_WEIGHT
    semantic_weight: float = FUSION_SEMANTIC_WEIGHT


DEFAULT_FUSION = Fusion()


class SearchMode(StrEnum):
    """Which rankings a search runs."""

    HYBRID = "hybrid"
    KEYWORD = "keyword"
    SEMANTIC = "semantic"


@dataclass(frozen=True, slots=True)
class SearchHit:
    """One passage that matched, with its file, its scores and its file's metadata."""

    file_id: str
    name: str
    chunk: str
    score: float
    keyword_score: float | None
    semantic_score: float | None
    page: int | str | None
    metadata: Mapping[str, MetadataValue]

    def to_json(self, *, with_metadata: bool = False) -> dict[str, Any]:
        """The hit as the API and the library_search node show it."""
        hit: dict[str, Any] = {
            "fileId": self.file_id,
            "name": self.name,
            "chunk": self.chunk,
            "score": self.score,
            "scores": {"keyword": self.keyword_score, "semantic": self.semantic_score},
            "page": self.page,
        }
        if with_metadata:
            hit["metadata"] = dict(self.metadata)
        return hit


def checked_query(query: str, field: str = "query") -> str:
    """The query without its outer spaces; VALIDATION_ERROR when that is empty, longer
    than MAX_QUERY_CHARS or holds what text cannot store (a NUL)."""
    query = query.strip()
    if not query:
        message, problem = f"{field} is empty: a search needs text to search for", "empty"
    elif len(query) > MAX_QUERY_CHARS:
        message = f"{field} is longer than {MAX_QUERY_CHARS} characters"
        problem = f"at most {MAX_QUERY_CHARS} characters"
    elif holds_unstorable(query):
        message, problem = f"{field} {UNSTORABLE_PROBLEM}", UNSTORABLE_PROBLEM
    else:
        return query
    raise ValidationFailed(message, details=[{"field": field, "problem": problem}])


def _terms(query: str) -> list[str]:
    return list(dict.fromkeys(t.lower() for t in _WORD.findall(query)))[:MAX_QUERY_TERMS]


def _prefix(terms: list[str]) -> str | None:
    """The query's last word, when long enough to match as a prefix."""
    return terms[-1] if terms and len(terms[-1]) >= PREFIX_MIN_CHARS else None


def _metadata_sql(where: PassageFilter, sqlite: bool, params: list[Any], column: str) -> list[str]:
    """SQL conditions for the filter's metadata, by JSON equality; values go to ``params``.

    SQLite's json_extract gives true as 1 and "1" as '1': its json_type tells them apart.
    """
    clauses = []
    for key, values in where.metadata.items():
        alternatives = []
        for value in values:
            kind, _ = typed_value(value)
            if sqlite:
                params.append(f'$."{key}"')
                path = "?"
                if kind == "boolean":
                    alternatives.append(f"json_type({column}, {path}) = ?")
                    params.append("true" if value else "false")
                elif kind == "number":
                    alternatives.append(
                        f"(json_type({column}, {path}) IN ('integer', 'real')"
                        f" AND json_extract({column}, ?) = ?)"
                    )
                    params.extend([f'$."{key}"', value])
                else:
                    alternatives.append(
                        f"(json_type({column}, {path}) = 'text' AND json_extract({column}, ?) = ?)"
                    )
                    params.extend([f'$."{key}"', value])
            else:
                params.extend([key, json.dumps(value)])
                key_at, value_at = len(params) - 1, len(params)
                alternatives.append(f"{column} -> ${key_at}::text = ${value_at}::text::jsonb")
        clauses.append(f"({' OR '.join(alternatives)})")
    return clauses


async def keyword_ranking(
    project_id: str, query: str, where: PassageFilter, n: int
) -> list[tuple[int, float]]:
    """(chunk id, keyword score) of the chunks matching any term, best first.

    Two indexes score each chunk and the scores add up: the exact one (any language: words
    as written, case ignored; the last word as a prefix) and the stemmed one (English:
    "configure" finds "configuration"). A word matched as written counts in both, so it
    ranks before another form of it, and a whole word before a longer one it begins.
    The score is BM25 on SQLite, ts_rank_cd on PostgreSQL, divided by the best of the
    query's hits (so the first has 1.0).
    """
    terms = _terms(query)
    if not terms:
        return []
    prefix = _prefix(terms)
    exact = terms[:-1] if prefix else terms  # whole words; a last word long enough is a prefix
    connection = get_connection("default")
    sqlite = connection.capabilities.dialect == "sqlite"
    # Only the fixed fragments below are interpolated; every value is a parameter.
    if sqlite:
        # A phrase per term: FTS5 syntax in a query is plain text.
        exact_match = [f'"{t}"' for t in exact] + ([f'"{prefix}"*'] if prefix else [])
        params: list[Any] = [
            " OR ".join(exact_match),
            " OR ".join(f'"{t}"' for t in terms),
            project_id,
        ]
        clauses = ["c.project_id = ?"]
        if where.folder is not None:
            clauses.append("c.folder_id IS ?")
            params.append(None if where.folder == "root" else where.folder)
        clauses += _metadata_sql(where, True, params, "c.metadata")
        params.append(n)
        sql = (
            "SELECT c.id, m.score FROM (SELECT id, sum(score) AS score FROM ("  # noqa: S608
            " SELECT rowid AS id, -bm25(library_chunks_fts) AS score FROM library_chunks_fts"
            " WHERE library_chunks_fts MATCH ?"
            " UNION ALL SELECT rowid, -bm25(library_chunks_fts_stemmed)"
            " FROM library_chunks_fts_stemmed WHERE library_chunks_fts_stemmed MATCH ?"
            " ) GROUP BY id) m JOIN library_chunks c ON c.id = m.id"
            f" WHERE {' AND '.join(clauses)} ORDER BY m.score DESC, c.id LIMIT ?"
        )
    else:
        exact_match = list(exact) + ([f"{prefix}:*"] if prefix else [])
        # The 'english' configuration drops English stop words: a query of nothing else
        # matches by the exact index alone. ts_rank_cd weighs every word alike (no IDF,
        # unlike BM25): normalization 32, rank / (rank + 1), keeps a passage dense in
        # common words from ranking far above the rest; it ranked better alone and fused
        # on the retrieval benchmark's collection.
        params = [" | ".join(exact_match), " | ".join(terms), project_id]
        clauses = [
            "(to_tsvector('simple', text) @@ query OR to_tsvector('english', text) @@ stemmed)",
            "project_id = $3",
        ]
        if where.folder is not None:
            params.append(None if where.folder == "root" else where.folder)
            clauses.append(f"folder_id IS NOT DISTINCT FROM ${len(params)}")
        clauses += _metadata_sql(where, False, params, "metadata")
        params.append(n)
        sql = (
            "SELECT id, ts_rank_cd(to_tsvector('simple', text), query, 32)"  # noqa: S608
            " + ts_rank_cd(to_tsvector('english', text), stemmed, 32) AS score"
            " FROM library_chunks, to_tsquery('simple', $1) query,"
            " to_tsquery('english', $2) stemmed"
            f" WHERE {' AND '.join(clauses)} ORDER BY score DESC, id LIMIT ${len(params)}"
        )
    rows = await connection.execute_query_dict(sql, params)
    best = max((float(row["score"]) for row in rows), default=0.0)
    return [(int(row["id"]), float(row["score"]) / best if best > 0 else 1.0) for row in rows]


@dataclass(frozen=True, slots=True)
class FusedHit:
    """A chunk's fused score and the component scores it came from."""

    chunk_id: int
    score: float
    keyword: float | None
    semantic: float | None


def _on_one_scale(
    ranking: Sequence[tuple[int, float]], least: float, top: float = 0.0
) -> dict[int, float]:
    """Each score between ``least`` (0) and the ranking's best or ``top``, the higher (1)."""
    best = max(max((score for _, score in ranking), default=least), top)
    if best <= least:
        return {chunk_id: 1.0 for chunk_id, _ in ranking}
    return {chunk_id: (score - least) / (best - least) for chunk_id, score in ranking}


def fuse_rankings(
    keyword: Sequence[tuple[int, float]] | None,
    semantic: Sequence[tuple[int, float]] | None,
    fusion: Fusion = DEFAULT_FUSION,
    *,
    asked: int = CANDIDATES,
) -> list[FusedHit]:
    """The rankings that ran (None: did not run) fused, best first (see the module's doc).

    Both ran: the weighted mean of the keyword score (already 0..1 from 0) and the cosine
    put between MIN_SIMILARITY and the best (at least CONFIDENT_SIMILARITY). A passage a
    ranking did not return gets its lowest score there, or keyword 0 when the keyword
    ranking returned fewer than the ``asked`` hits (it matched no word); at equal fused
    scores one both returned goes first. One ran: its own score, so a keyword search scores
    by its keyword score, a semantic one by cosine.
    """
    keyword_scores = dict(keyword or ())
    semantic_scores = dict(semantic or ())
    ids = keyword_scores.keys() | semantic_scores.keys()
    if keyword is None or semantic is None:
        own = keyword_scores if keyword is not None else semantic_scores
        hits = [
            FusedHit(
                chunk_id, own[chunk_id], keyword_scores.get(chunk_id), semantic_scores.get(chunk_id)
            )
            for chunk_id in ids
        ]
        return sorted(hits, key=lambda hit: (-hit.score, hit.chunk_id))
    scaled = [
        (_on_one_scale(keyword, 0.0), fusion.keyword_weight),
        (_on_one_scale(semantic, MIN_SIMILARITY, CONFIDENT_SIMILARITY), fusion.semantic_weight),
    ]
    lowest = [min(scores.values(), default=0.0) for scores, _ in scaled]
    if len(keyword) < asked:
        lowest[0] = 0.0
    total = fusion.keyword_weight + fusion.semantic_weight
    fused = []
    for chunk_id in ids:
        score = sum(
            weight * scores.get(chunk_id, low)
            for (scores, weight), low in zip(scaled, lowest, strict=True)
        )
        missing = sum(chunk_id not in scores for scores, _ in scaled)
        hit = FusedHit(
            chunk_id,
            score / total if total > 0 else 0.0,
            keyword_scores.get(chunk_id),
            semantic_scores.get(chunk_id),
        )
        fused.append((hit, missing))
    fused.sort(key=lambda item: (-item[0].score, item[1], item[0].chunk_id))
    return [hit for hit, _ in fused]


async def search(
    project_id: str,
    query: str,
    *,
    limit: int,
    where: PassageFilter,
    embedder: QueryEmbedder | None,
    vectors: VectorSearch,
    mode: SearchMode = SearchMode.HYBRID,
    fusion: Fusion | None = None,
) -> list[SearchHit]:
    """The passages of the project best matching ``query``, by keywords and meaning.

    Hybrid without an embedder is keyword search; semantic without one is refused.
    """
    if mode == SearchMode.SEMANTIC and embedder is None:
        raise ValidationFailed(
            "semantic search is not available: this server has no embedder "
            "(LIBFLOW_EMBEDDER=none, or the semantic extra is not installed)",
            details=[{"field": "mode", "problem": "no embedder for semantic search"}],
        )
    candidates = max(CANDIDATES, limit)
    keyword = None
    if mode != SearchMode.SEMANTIC:
        keyword = await keyword_ranking(project_id, query, where, candidates)
    semantic = None
    if mode != SearchMode.KEYWORD and embedder is not None:
        # The model reads a query's first max_tokens; the keyword ranking reads all of it.
        try:
            [query_vector] = await embedder.embed([query], truncate=True)
        except EmbeddingError as err:
            # The embedding service (OpenAI-compatible) refused or timed out: the search may
            # be asked again, as when the database is away (503, Retry-After).
            raise Unavailable(f"the embedding service did not answer the query: {err}") from err
        semantic = await vectors.nearest(project_id, embedder.name, query_vector, where, candidates)
    fused = fuse_rankings(keyword, semantic, fusion or DEFAULT_FUSION, asked=candidates)[:limit]
    if not fused:
        return []
    # By primary key alone, the project checked here: with project_id in the query
    # SQLite may pick the project index and scan every chunk of the project.
    chunks = {
        row["id"]: row
        for row in await Chunk.filter(id__in=[hit.chunk_id for hit in fused]).values(
            "id", "project_id", "file_id", "text", "page", "page_name", "metadata"
        )
        if row["project_id"] == project_id
    }
    names = dict(
        await LibraryFile.filter(
            id__in={row["file_id"] for row in chunks.values()}, project_id=project_id
        ).values_list("id", "name")
    )
    return [
        SearchHit(
            file_id=row["file_id"],
            name=names[row["file_id"]],
            chunk=row["text"],
            score=round(hit.score, 6),
            keyword_score=None if hit.keyword is None else round(hit.keyword, 6),
            semantic_score=None if hit.semantic is None else round(hit.semantic, 6),
            page=row["page_name"] if row["page_name"] is not None else row["page"],
            metadata=row["metadata"] or {},
        )
        for hit in fused
        if (row := chunks.get(hit.chunk_id)) is not None and row["file_id"] in names
    ]
