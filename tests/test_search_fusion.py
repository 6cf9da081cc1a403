"""How hybrid search fuses its two rankings' scores (libflow.library.search.fuse_rankings)."""

from __future__ import annotations

import pytest

from libflow.library.search import Fusion, fuse_rankings
from libflow.library.vectors import MIN_SIMILARITY


def test_each_rankings_first_hit_scores_one_on_its_scale() -> None:
    keyword = [(1, 1.0), (2, 0.25)]
    semantic = [(2, 0.6), (1, 0.4)]
    fused = {hit.chunk_id: hit.score for hit in fuse_rankings(keyword, semantic, Fusion(0.5, 0.5))}
    # The cosine is put between MIN_SIMILARITY (0) and the query's best (1).
    cosine_1 = (0.4 - MIN_SIMILARITY) / (0.6 - MIN_SIMILARITY)
    assert fused[1] == pytest.approx(0.5 * 1.0 + 0.5 * cosine_1)
    assert fused[2] == pytest.approx(0.5 * 0.25 + 0.5 * 1.0)


def test_a_passage_one_ranking_missed_gets_its_lowest_score() -> None:
    # Both rankings cut at the two hits asked for: a passage missing may have had up to the
    # lowest returned score.
    keyword = [(1, 1.0), (2, 0.5)]
    semantic = [(1, 0.8), (3, 0.5)]
    fused = {
        hit.chunk_id: hit for hit in fuse_rankings(keyword, semantic, Fusion(0.4, 0.6), asked=2)
    }
    lowest_cosine = (0.5 - MIN_SIMILARITY) / (0.8 - MIN_SIMILARITY)
    assert fused[2].score == pytest.approx(0.4 * 0.5 + 0.6 * lowest_cosine)
    assert fused[3].score == pytest.approx(0.4 * 0.5 + 0.6 * lowest_cosine)
    # The components stay what each ranking said: null where it did not return the passage.
    assert (fused[2].keyword, fused[2].semantic) == (0.5, None)


def test_at_equal_scores_a_passage_both_rankings_returned_goes_first() -> None:
    keyword = [(1, 1.0), (2, 0.5)]
    semantic = [(2, 0.9)]
    assert [hit.chunk_id for hit in fuse_rankings(keyword, semantic, Fusion(0.0, 1.0))] == [2, 1]


def test_a_semantic_search_scores_by_cosine() -> None:
    only_semantic = fuse_rankings(None, [(1, 0.7), (2, 0.3)])
    assert [(hit.chunk_id, hit.score) for hit in only_semantic] == [(1, 0.7), (2, 0.3)]
