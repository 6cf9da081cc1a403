"""POST .../library/search: metadata filters, modes, scores and the answer's fields."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from libflow import appkeys
from libflow.library.search import FUSION_SEMANTIC_WEIGHT, Fusion, fuse_rankings
from libflow.models import Chunk
from tests.conftest import Api, ClientFactory, Shape, base_settings, new_project
from tests.library_helpers import assert_error, detail_fields
from tests.search_helpers import file_ids, search_post, upload_labelled


@pytest.fixture
def shaped_api(search_api: Api) -> Api:
    """Search runs on each deployment shape and on pgvector's (vectors searched in SQL)."""
    return search_api


async def test_hits_carry_their_files_metadata(shaped_api: Api) -> None:
    labels = {"team": "finance", "year": 2024, "final": True}
    file_id = await upload_labelled(shaped_api, "The cerulean wombat budget.", labels)
    [hit] = await search_post(shaped_api, "cerulean wombat")
    assert hit["fileId"] == file_id
    assert hit["metadata"] == labels
    assert set(hit) == {"fileId", "name", "chunk", "score", "scores", "page", "metadata"}


async def test_get_search_answers_without_metadata(api: Api) -> None:
    await upload_labelled(api, "The cerulean wombat budget.", {"team": "finance"})
    [hit] = await (await api.call("GET", "/search", params={"q": "cerulean wombat"})).json()
    assert set(hit) == {"fileId", "name", "chunk", "score", "scores", "page"}


async def test_a_filter_keeps_the_files_whose_metadata_matches(shaped_api: Api) -> None:
    finance = await upload_labelled(
        shaped_api, "Budget for the walrus harbour.", {"team": "finance"}
    )
    legal = await upload_labelled(shaped_api, "Contract for the walrus harbour.", {"team": "legal"})
    unlabelled = await upload_labelled(shaped_api, "Notes on the walrus harbour.")
    assert await file_ids(shaped_api, "walrus harbour", filter={"team": "finance"}) == [finance]
    both = await file_ids(
        shaped_api, "walrus harbour", filter={"team": {"in": ["finance", "legal"]}}
    )
    assert sorted(both) == sorted([finance, legal])
    everything = await file_ids(shaped_api, "walrus harbour")
    assert sorted(everything) == sorted([finance, legal, unlabelled])


async def test_every_key_of_a_filter_must_match(shaped_api: Api) -> None:
    both = await upload_labelled(shaped_api, "Heron ledger.", {"team": "finance", "year": 2024})
    await upload_labelled(shaped_api, "Heron ledger.", {"team": "finance", "year": 2023})
    await upload_labelled(shaped_api, "Heron ledger.", {"team": "legal", "year": 2024})
    hits = await file_ids(shaped_api, "heron ledger", filter={"team": "finance", "year": 2024})
    assert hits == [both]


async def test_filters_compare_json_values_by_type(shaped_api: Api) -> None:
    # SQLite's json_extract reads true as 1: true, 1 and "1" must stay three values.
    as_true = await upload_labelled(shaped_api, "Ibis quarry memo.", {"flag": True})
    as_one = await upload_labelled(shaped_api, "Ibis quarry memo.", {"flag": 1})
    as_text = await upload_labelled(shaped_api, "Ibis quarry memo.", {"flag": "1"})
    as_false = await upload_labelled(shaped_api, "Ibis quarry memo.", {"flag": False})
    as_zero = await upload_labelled(shaped_api, "Ibis quarry memo.", {"flag": 0})
    assert await file_ids(shaped_api, "ibis quarry", filter={"flag": True}) == [as_true]
    assert await file_ids(shaped_api, "ibis quarry", filter={"flag": 1}) == [as_one]
    assert await file_ids(shaped_api, "ibis quarry", filter={"flag": 1.0}) == [as_one]
    assert await file_ids(shaped_api, "ibis quarry", filter={"flag": "1"}) == [as_text]
    assert await file_ids(shaped_api, "ibis quarry", filter={"flag": False}) == [as_false]
    assert await file_ids(shaped_api, "ibis quarry", filter={"flag": 0}) == [as_zero]


async def test_a_filter_on_a_key_a_file_lacks_excludes_it(api: Api) -> None:
    await upload_labelled(api, "Jackal orchard survey.", {"team": "finance"})
    assert await file_ids(api, "jackal orchard", filter={"region": "north"}) == []


async def test_a_filter_never_reaches_another_project(shaped_api: Api) -> None:
    await upload_labelled(shaped_api, "The kestrel vault plan.", {"team": "finance"})
    project_id, key = await new_project("other")
    other = Api(shaped_api.client, shaped_api.shape, project_id, key)
    assert await file_ids(other, "kestrel vault", filter={"team": "finance"}) == []
    assert await file_ids(other, "kestrel vault", filter={"team": {"in": ["finance"]}}) == []


async def test_a_filter_with_dir_never_reaches_another_folder(shaped_api: Api) -> None:
    folder = await (await shaped_api.call("POST", "/dirs", json={"name": "archive"})).json()
    in_folder = await upload_labelled(
        shaped_api, "The lemur compass plan.", {"team": "finance"}, folder=folder["id"]
    )
    in_root = await upload_labelled(shaped_api, "The lemur compass plan.", {"team": "finance"})
    where = {"team": "finance"}
    assert await file_ids(shaped_api, "lemur compass", dir=folder["id"], filter=where) == [
        in_folder
    ]
    assert await file_ids(shaped_api, "lemur compass", dir="root", filter=where) == [in_root]


@pytest.mark.usefixtures("semantic_search")
async def test_semantic_mode_filters_by_meaning_and_metadata(api: Api) -> None:
    pets = await upload_labelled(
        api, "The feline dozed on the rug for the whole afternoon.", {"kind": "pets"}
    )
    other_pets = await upload_labelled(
        api, "The feline dozed on the rug for the whole afternoon.", {"kind": "archive"}
    )
    folder = await (await api.call("POST", "/dirs", json={"name": "elsewhere"})).json()
    await upload_labelled(
        api,
        "The feline dozed on the rug for the whole afternoon.",
        {"kind": "pets"},
        folder=folder["id"],
    )
    project_id, key = await new_project("other")
    other = Api(api.client, api.shape, project_id, key)
    await upload_labelled(
        other, "The feline dozed on the rug for the whole afternoon.", {"kind": "pets"}
    )
    hits = await search_post(
        api, "a cat sleeping on a mat", mode="semantic", filter={"kind": "pets"}, dir="root"
    )
    assert [hit["fileId"] for hit in hits] == [pets]
    [hit] = hits
    assert hit["scores"]["keyword"] is None
    assert 0.2 <= hit["scores"]["semantic"] <= 1
    assert hit["score"] == hit["scores"]["semantic"]
    assert other_pets not in [
        h["fileId"]
        for h in await search_post(
            api, "a cat sleeping on a mat", mode="semantic", filter={"kind": {"in": ["pets"]}}
        )
    ]


@pytest.mark.usefixtures("semantic_search")
async def test_hybrid_scores_hold_both_components(api: Api) -> None:
    file_id = await upload_labelled(api, "The feline dozed on the rug in the sunny afternoon.")
    [hit] = await search_post(api, "feline dozed afternoon")
    assert hit["fileId"] == file_id
    keyword, semantic = hit["scores"]["keyword"], hit["scores"]["semantic"]
    assert keyword == 1.0  # the best keyword hit of the query
    assert 0.2 <= semantic <= 1
    # First in both rankings: each score, put between its least and the query's best, is 1.
    assert hit["score"] == pytest.approx(1.0, abs=1e-5)


async def test_keyword_mode_scores_only_keywords(shaped_api: Api) -> None:
    best = await upload_labelled(shaped_api, "Marten marten marten ferry timetable.")
    second = await upload_labelled(shaped_api, "A ferry timetable, and a word on a marten.")
    hits = await search_post(shaped_api, "marten ferry", mode="keyword")
    assert [hit["fileId"] for hit in hits] == [best, second]
    assert hits[0]["scores"] == {"keyword": 1.0, "semantic": None}
    assert hits[0]["score"] == 1.0
    assert 0 < hits[1]["scores"]["keyword"] < 1
    assert hits[1]["score"] == hits[1]["scores"]["keyword"]


async def test_the_last_word_of_a_query_matches_as_a_prefix(shaped_api: Api) -> None:
    file_id = await upload_labelled(shaped_api, "The renovation of the east wing starts in May.")
    assert await file_ids(shaped_api, "east wing renovat", mode="keyword") == [file_id]
    assert await file_ids(shaped_api, "renovat", mode="keyword") == [file_id]
    hits = await (await shaped_api.call("GET", "/search", params={"q": "renovat"})).json()
    assert [hit["fileId"] for hit in hits] == [file_id]


async def test_only_the_last_word_matches_as_a_prefix(api: Api) -> None:
    await upload_labelled(api, "The renovation of the east wing starts in May.")
    assert await file_ids(api, "renovat zzzz", mode="keyword") == []


async def test_an_exact_word_outranks_its_prefix_matches(shaped_api: Api) -> None:
    longer = await upload_labelled(shaped_api, "The planner.")
    exact = await upload_labelled(shaped_api, "The plan.")
    assert await file_ids(shaped_api, "plan", mode="keyword") == [exact, longer]


async def test_another_form_of_a_word_matches_after_the_form_asked(shaped_api: Api) -> None:
    other_form = await upload_labelled(shaped_api, "The configuration of the gateway.")
    asked_form = await upload_labelled(shaped_api, "How to configure the gateway.")
    assert await file_ids(shaped_api, "configure", mode="keyword") == [asked_form, other_form]
    both = await file_ids(shaped_api, "configuring", mode="keyword")
    assert sorted(both) == sorted([asked_form, other_form])
    # English stop words alone match too (PostgreSQL's stemmed query has no word left).
    assert await file_ids(shaped_api, "how to", mode="keyword") == [asked_form]


async def test_chunk_is_the_whole_passage(api: Api) -> None:
    filler = " ".join(["the harbour master counted the boats again"] * 8)
    file_id = await upload_labelled(api, f"Ocelot prelude. {filler}. The ocelot coda.")
    [hit] = await search_post(api, "ocelot")
    passages = await (await api.call("GET", f"/files/{file_id}/chunks")).json()
    assert hit["chunk"] in [passage["text"] for passage in passages]
    assert len(hit["chunk"]) > 300
    assert "ocelot" in hit["chunk"].lower()


async def test_page_is_the_sheet_name_where_pages_have_names(shaped_api: Api) -> None:
    file_id = await upload_labelled(shaped_api, "Revenue of the puffin fleet.")
    # As xlsx processing writes it: the sheet's name beside no page number.
    await Chunk.filter(file_id=file_id).update(page=None, page_name="Q3 2024")
    [hit] = await search_post(shaped_api, "puffin fleet")
    assert hit["page"] == "Q3 2024"
    [got] = await (await shaped_api.call("GET", "/search", params={"q": "puffin fleet"})).json()
    assert got["page"] == "Q3 2024"


async def test_semantic_mode_without_an_embedder_is_400(
    start_app: ClientFactory, tmp_path: Path
) -> None:
    client = await start_app(base_settings(tmp_path, embedder="none"))
    project_id, key = await new_project()
    api = Api(client, Shape("keyword-only", client.app[appkeys.SETTINGS]), project_id, key)
    response = await api.call("POST", "/search", json={"query": "cats", "mode": "semantic"})
    body = await assert_error(response, 400, "VALIDATION_ERROR")
    assert detail_fields(body) == {"mode"}
    assert "embedder" in body["message"]


async def test_hybrid_without_an_embedder_is_keyword_search(
    start_app: ClientFactory, tmp_path: Path
) -> None:
    client = await start_app(base_settings(tmp_path, embedder="none"))
    project_id, key = await new_project()
    api = Api(client, Shape("keyword-only", client.app[appkeys.SETTINGS]), project_id, key)
    file_id = await upload_labelled(api, "The quetzal beacon.")
    [hit] = await search_post(api, "quetzal beacon")
    assert hit["fileId"] == file_id
    assert hit["scores"] == {"keyword": 1.0, "semantic": None}
    assert hit["score"] == 1.0


BAD_SEARCHES: list[tuple[dict[str, Any], str]] = [
    ({}, "query"),
    ({"query": ""}, "query"),
    ({"query": "   "}, "query"),
    ({"query": 5}, "query"),
    ({"query": "x" * 2001}, "query"),
    ({"query": "a", "limit": 0}, "limit"),
    ({"query": "a", "limit": 101}, "limit"),
    ({"query": "a", "limit": "5"}, "limit"),
    ({"query": "a", "mode": "fuzzy"}, "mode"),
    ({"query": "a", "dir": 5}, "dir"),
    ({"query": "a", "filter": []}, "filter"),
    ({"query": "a", "filter": {"bad key": 1}}, "filter.bad key.[key]"),
    ({"query": "a", "filter": {"k": None}}, "filter.k"),
    ({"query": "a", "filter": {"k": [1, 2]}}, "filter.k"),
    ({"query": "a", "filter": {"k": {"in": []}}}, "filter.k"),
    ({"query": "a", "filter": {"k": {"in": list(range(101))}}}, "filter.k"),
    ({"query": "a", "filter": {"k": {"in": [[1]]}}}, "filter.k"),
    ({"query": "a", "filter": {"k": {"in": [1], "not": [2]}}}, "filter.k"),
    ({"query": "a", "filter": {"k": {"eq": 1}}}, "filter.k"),
    ({"query": "a", "filter": {"k": 2**53}}, "filter.k"),
    ({"query": "a", "filter": {f"k{i}": 1 for i in range(33)}}, "filter"),
]


async def test_post_search_refuses_a_bad_body(api: Api) -> None:
    for body, field in BAD_SEARCHES:
        response = await api.call("POST", "/search", json=body)
        error = await assert_error(response, 400, "VALIDATION_ERROR")
        assert field in detail_fields(error), body


async def test_post_search_that_is_not_json_is_400(api: Api) -> None:
    response = await api.call("POST", "/search", data=b"query=cats")
    await assert_error(response, 400, "INVALID_JSON")


async def test_post_search_in_an_unknown_folder_is_404(api: Api) -> None:
    response = await api.call("POST", "/search", json={"query": "a", "dir": "nosuchfolder"})
    await assert_error(response, 404, "NOT_FOUND")


async def test_post_search_with_another_projects_key_is_403(api: Api) -> None:
    _, other_key = await new_project("other")
    response = await api.call(
        "POST", "/search", json={"query": "a"}, headers={"Authorization": other_key}
    )
    await assert_error(response, 403, "FORBIDDEN")


def test_an_exact_hit_first_in_one_ranking_beats_a_middling_hit_in_both() -> None:
    # Chunk 1 holds the exact words (the keyword ranking's first, no vector near enough);
    # chunk 2 is in the middle of both rankings. Reciprocal rank fusion would put 2 first.
    keyword = [(1, 1.0), (3, 0.8), (2, 0.5), (4, 0.3)]
    semantic = [(5, 0.7), (6, 0.65), (2, 0.6), (7, 0.5)]
    fused = fuse_rankings(keyword, semantic)
    assert fused[0].chunk_id == 1
    assert (fused[0].keyword, fused[0].semantic) == (1.0, None)
    middling = next(hit for hit in fused if hit.chunk_id == 2)
    assert (middling.keyword, middling.semantic) == (0.5, 0.6)


def test_a_passage_the_whole_keyword_ranking_lacks_holds_no_word_of_the_query() -> None:
    # One keyword hit of fifty asked is every passage with a word of the query: chunk 2 has
    # none (keyword 0 in the fusion), where a ranking cut at its candidates leaves it the
    # lowest keyword score returned, the most it can have had.
    keyword = [(1, 1.0)]
    semantic = [(2, 0.9), (1, 0.3)]
    whole = {hit.chunk_id: hit.score for hit in fuse_rankings(keyword, semantic)}
    assert whole[2] == pytest.approx(FUSION_SEMANTIC_WEIGHT)
    cut = {hit.chunk_id: hit.score for hit in fuse_rankings(keyword, semantic, asked=1)}
    assert cut[2] == pytest.approx(1.0)


def test_a_weak_best_cosine_is_not_stretched_to_the_top_of_the_scale() -> None:
    keyword = [(1, 1.0)]
    weak = {hit.chunk_id: hit for hit in fuse_rankings(keyword, [(2, 0.35)])}
    # 0.35 is half way from MIN_SIMILARITY (0.2) to CONFIDENT_SIMILARITY (0.5).
    assert weak[2].score == pytest.approx(FUSION_SEMANTIC_WEIGHT * 0.5)
    assert weak[1].score > weak[2].score
    strong = {hit.chunk_id: hit for hit in fuse_rankings(keyword, [(2, 0.8)])}
    assert strong[2].score == pytest.approx(FUSION_SEMANTIC_WEIGHT)


def test_fusion_weights_can_be_changed_in_one_place() -> None:
    keyword = [(1, 1.0), (2, 0.5)]
    semantic = [(2, 0.9)]
    assert fuse_rankings(keyword, semantic, Fusion(1.0, 0.0))[0].chunk_id == 1
    assert fuse_rankings(keyword, semantic, Fusion(0.0, 1.0))[0].chunk_id == 2
    only_keyword = fuse_rankings(keyword, None, Fusion(0.3, 0.7))
    assert [hit.score for hit in only_keyword] == [1.0, 0.5]
