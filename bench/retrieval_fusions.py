"""Fusion functions compared on the retrieval benchmark's collection, from one server run.

The server (as in ``bench.retrieval_quality``) gets the collection; every query then goes
through ``POST .../library/search`` in keyword mode and in semantic mode, each answering its
whole candidate list (50) with its scores: exactly the two lists hybrid search fuses. Each
fusion function below ranks those same lists here, in this process, and is scored by
nDCG@10 and Recall@10 like the modes are: dozens of settings from one upload, where
restarting the server per setting (``--grid``) costs a minute each. libflow's own function
is ``fuse_rankings`` itself; its figure at the shipped weights equals the hybrid row of
``bench.retrieval_quality``, which checks the method. Passages are told apart by file and
text (the API shows no passage id).

The functions (Bruch et al., "An Analysis of Fusion Functions for Hybrid Retrieval",
2022): convex combinations of the keyword score (BM25 over the query's best) with the raw
cosine, with both min-max normalized over their candidates, with both z-scored, and
libflow's (the cosine between MIN_SIMILARITY and the best, a missing passage at the
ranking's lowest); and reciprocal rank fusion, weighted, with several k. Each at keyword
weights KEYWORD_WEIGHTS (the semantic weight 1 - it). Also shown: whether each setting
keeps the issue's rule on the example of ``tests/test_search_filters.py`` (the keyword
ranking's first hit, absent from the vector ranking, fused first).

Run alone with ``python -m bench.retrieval_fusions [--quick]``.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench import _faq_collection
from bench import retrieval_quality as rq
from bench._common import BenchError, create_project, libflow_env, request_json
from bench._faq_collection import Collection
from libflow.library.search import Fusion, fuse_rankings

Key = tuple[str, str]  # (file name, passage text)
Ranking = list[tuple[Key, float]]
FusionFunction = Callable[[Ranking, Ranking], dict[Key, float]]

KEYWORD_WEIGHTS = (0.05, 0.1, 0.2, 0.3, 0.4, 0.43, 0.5, 0.6)
RRF_KS = (1, 10, 60)
# The example of test_an_exact_hit_first_in_one_ranking_beats_a_middling_hit_in_both.
RULE_KEYWORD: Ranking = [(("1", ""), 1.0), (("3", ""), 0.8), (("2", ""), 0.5), (("4", ""), 0.3)]
RULE_SEMANTIC: Ranking = [(("5", ""), 0.7), (("6", ""), 0.65), (("2", ""), 0.6), (("7", ""), 0.5)]


def candidates(library: rq.Library, query: str, mode: str) -> Ranking:
    hits = request_json(
        "POST",
        f"{library.api}/search",
        body={"query": query, "limit": rq.HITS, "mode": mode},
        api_key=library.key,
        timeout=60,
    )
    return [((hit["name"], hit["chunk"]), float(hit["scores"][mode])) for hit in hits]


def capture(collection: Collection) -> dict[str, tuple[Ranking, Ranking]]:
    """Each query's keyword and semantic candidate lists from a server holding the collection."""
    work = Path(tempfile.mkdtemp(prefix="libflow-bench-fusions-"))
    try:
        env = libflow_env(work / "data")
        library = rq.Library()
        library.project, library.key = create_project(env)
        with rq.running(work, env, library):
            docs = sorted(collection.documents.items())
            with ThreadPoolExecutor(rq.UPLOAD_THREADS) as pool:
                file_ids = list(pool.map(lambda item: rq.upload(library, *item), docs))
            rq.wait_processed(library, len(docs))
            failed = rq.failed_files(library, file_ids)
            if failed:
                raise BenchError(f"{len(failed)} files failed processing, first: {failed[0]}")
            return {
                q: (candidates(library, text, "keyword"), candidates(library, text, "semantic"))
                for q, text in sorted(collection.queries.items())
            }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _min_max(ranking: Ranking) -> dict[Key, float]:
    low = min((s for _, s in ranking), default=0.0)
    high = max((s for _, s in ranking), default=0.0)
    return {k: (s - low) / (high - low) if high > low else 1.0 for k, s in ranking}


def _z(ranking: Ranking) -> dict[Key, float]:
    values = [s for _, s in ranking] or [0.0]
    mean, spread = statistics.mean(values), statistics.pstdev(values) or 1.0
    return {k: (s - mean) / spread for k, s in ranking}


def convex(
    normalize: Callable[[Ranking], dict[Key, float]], weight: float, missing_lowest: bool
) -> FusionFunction:
    def fuse(keyword: Ranking, semantic: Ranking) -> dict[Key, float]:
        k, s = normalize(keyword), normalize(semantic)
        k_missing = min(k.values(), default=0.0) if missing_lowest else 0.0
        s_missing = min(s.values(), default=0.0) if missing_lowest else 0.0
        return {
            key: weight * k.get(key, k_missing) + (1 - weight) * s.get(key, s_missing)
            for key in k.keys() | s.keys()
        }

    return fuse


def rrf(k: int, weight: float) -> FusionFunction:
    def fuse(keyword: Ranking, semantic: Ranking) -> dict[Key, float]:
        scores: dict[Key, float] = {}
        for ranking, w in ((keyword, weight), (semantic, 1 - weight)):
            for rank, (key, _) in enumerate(ranking, start=1):
                scores[key] = scores.get(key, 0.0) + w / (k + rank)
        return scores

    return fuse


def libflow(weight: float) -> FusionFunction:
    """libflow's fuse_rankings, on the lists with passages numbered."""

    def fuse(keyword: Ranking, semantic: Ranking) -> dict[Key, float]:
        ids: dict[Key, int] = {}
        for key, _ in [*keyword, *semantic]:
            ids.setdefault(key, len(ids))
        keys = {i: key for key, i in ids.items()}
        hits = fuse_rankings(
            [(ids[key], s) for key, s in keyword],
            [(ids[key], s) for key, s in semantic],
            Fusion(weight, round(1 - weight, 6)),
        )
        return {keys[hit.chunk_id]: float(len(hits) - rank) for rank, hit in enumerate(hits)}

    return fuse


def functions() -> Iterable[tuple[str, float, FusionFunction]]:
    for w in KEYWORD_WEIGHTS:
        yield "libflow (cosine from MIN_SIMILARITY, missing = lowest)", w, libflow(w)
        yield "raw cosine, missing = 0 (libflow before)", w, convex(dict, w, False)
        yield "min-max over the candidates", w, convex(_min_max, w, False)
        yield "z-score, missing = lowest", w, convex(_z, w, True)
        for k in RRF_KS:
            yield f"RRF k={k}, weighted", w, rrf(k, w)


def ranked(fused: dict[Key, float]) -> list[str]:
    documents: list[str] = []
    for name, _ in sorted(fused, key=lambda key: (-fused[key], key)):
        doc = name.removesuffix(".txt")
        if doc not in documents:
            documents.append(doc)
    return documents


def keeps_rule(fuse: FusionFunction) -> bool:
    fused = fuse(RULE_KEYWORD, RULE_SEMANTIC)
    return sorted(fused, key=lambda key: (-fused[key], key))[0] == ("1", "")


def compare(collection: Collection, lists: dict[str, tuple[Ranking, Ranking]]) -> list[str]:
    def alone(index: int) -> rq.Scores:
        rankings = {q: ranked(dict(pair[index])) for q, pair in lists.items()}
        return rq.score(rankings, collection.qrels)

    keyword, semantic = alone(0), alone(1)
    lines = [
        f"{collection.name}: keyword alone nDCG@10 {keyword.ndcg:.3f} R@10 {keyword.recall:.3f}, "
        f"semantic alone nDCG@10 {semantic.ndcg:.3f} R@10 {semantic.recall:.3f}",
        "function | keyword weight | nDCG@10 | Recall@10 | keeps the exact-hit rule",
    ]
    for label, weight, fuse in functions():
        rankings = {q: ranked(fuse(*pair)) for q, pair in lists.items()}
        s = rq.score(rankings, collection.qrels)
        rule = "yes" if keeps_rule(fuse) else "no"
        lines.append(f"{label} | {weight:g} | {s.ndcg:.3f} | {s.recall:.3f} | {rule}")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the quick sample of the collection")
    args = parser.parse_args(argv)
    collection = _faq_collection.load()
    if args.quick:
        collection = rq.quick_sample(collection)
    try:
        lists = capture(collection)
    except BenchError as err:
        print(f"retrieval_fusions: {err}", file=sys.stderr)
        return 1
    print("\n".join(compare(collection, lists)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
