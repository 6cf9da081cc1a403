"""``run_server.py`` with the search fusion chosen by the retrieval benchmark (bench only).

``LIBFLOW_BENCH_FUSION`` is either a JSON object of ``Fusion`` fields, which replace those
of ``DEFAULT_FUSION`` for every search of this process (``{"keyword_weight": 0.5,
"semantic_weight": 0.5}``), or ``rrf:K``: reciprocal rank fusion with constant K over the
same two candidate lists, the comparison the benchmark reports. Unset: libflow as shipped.
Run as ``python -m bench._retrieval_server --port P --data-dir D`` from the repository root.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from collections.abc import Callable, Sequence

import run_server
from libflow.library import search

FUSION_ENV = "LIBFLOW_BENCH_FUSION"
Ranking = Sequence[tuple[int, float]] | None


def reciprocal_rank_fusion(k: int) -> Callable[..., list[search.FusedHit]]:
    """fuse_rankings' shape, scoring by 1 / (k + rank) summed over the rankings that ran."""

    def fuse(
        keyword: Ranking, semantic: Ranking, fusion: object = None, *, asked: int = 0
    ) -> list[search.FusedHit]:
        scores: dict[int, float] = {}
        for ranking in (keyword, semantic):
            for rank, (chunk_id, _) in enumerate(ranking or (), start=1):
                scores[chunk_id] = scores.get(chunk_id, 0.0) + 1.0 / (k + rank)
        keyword_scores = dict(keyword or ())
        semantic_scores = dict(semantic or ())
        hits = [
            search.FusedHit(
                chunk_id, score, keyword_scores.get(chunk_id), semantic_scores.get(chunk_id)
            )
            for chunk_id, score in scores.items()
        ]
        return sorted(hits, key=lambda hit: (-hit.score, hit.chunk_id))

    return fuse


def apply(spec: str) -> None:
    """Set this process's fusion from ``spec`` (see the module's doc)."""
    if spec.startswith("rrf:"):
        # search() looks fuse_rankings up at each call: replacing the module's attribute is
        # enough, and libflow itself carries no benchmark switch.
        setattr(search, "fuse_rankings", reciprocal_rank_fusion(int(spec.removeprefix("rrf:"))))  # noqa: B010
    elif spec:
        search.DEFAULT_FUSION = dataclasses.replace(search.DEFAULT_FUSION, **json.loads(spec))


if __name__ == "__main__":
    apply(os.environ.get(FUSION_ENV, ""))
    sys.exit(run_server.main(sys.argv[1:]))
