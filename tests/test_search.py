"""Search through the public API: hybrid keyword + semantic, isolated per project."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tortoise import Tortoise
from tortoise.migrations.executor import MigrationExecutor, MigrationTarget

from libflow import appkeys
from libflow.db.connection import APP_LABEL, tortoise_config
from libflow.models import Chunk
from tests.conftest import (
    Api,
    ClientFactory,
    Shape,
    base_settings,
    new_project,
    wait_until_processed,
)
from tests.library_helpers import assert_error


@pytest.fixture
def shaped_api(search_api: Api) -> Api:
    """Search runs on each deployment shape and on pgvector's (vectors searched in SQL)."""
    return search_api


async def search(api: Api, q: str, **params: Any) -> list[dict[str, Any]]:
    response = await api.call("GET", "/search", params={"q": q, **params})
    assert response.status == 200, await response.text()
    hits: list[dict[str, Any]] = await response.json()
    return hits


async def upload_text(api: Api, text: str, name: str = "notes.txt", **kwargs: Any) -> str:
    record = await api.upload(text.encode(), name=name, file_type="txt", **kwargs)
    processed = await wait_until_processed(api, record["id"])
    assert processed["processing"]["status"] == "done", processed
    return str(record["id"])


async def test_a_unique_phrase_finds_its_file(shaped_api: Api) -> None:
    file_id = await upload_text(shaped_api, "Minutes. The zephyr quokka alignment was approved.")
    hits = await search(shaped_api, "zephyr quokka alignment")
    assert hits[0]["fileId"] == file_id
    assert hits[0]["name"] == "notes.txt"
    assert "zephyr quokka alignment" in hits[0]["chunk"]
    assert hits[0]["page"] is None
    assert isinstance(hits[0]["score"], float)


@pytest.mark.usefixtures("semantic_search")
async def test_a_paraphrase_sharing_no_keyword_finds_its_file(api: Api) -> None:
    file_id = await upload_text(
        api, "The feline dozed on the rug for the whole afternoon.", name="pets.txt"
    )
    await upload_text(api, "Quarterly revenue grew by eight percent in Europe.", name="sales.txt")
    hits = await search(api, "a cat sleeping on a mat")
    assert hits and hits[0]["fileId"] == file_id


async def test_search_never_crosses_projects(api: Api, start_app: ClientFactory) -> None:
    await upload_text(api, "Secret plan: the marmoset heliotrope protocol.")
    project_id, key = await new_project("other")
    other = Api(api.client, api.shape, project_id, key)
    assert await search(other, "marmoset heliotrope protocol") == []


async def test_prevent_search_writes_no_rows(api: Api) -> None:
    file_id = await upload_text(api, "The ocelot vermilion ledger.", prevent_search=True)
    assert await search(api, "ocelot vermilion ledger") == []
    assert await Chunk.filter(file_id=file_id).count() == 0
    record = await (await api.call("GET", f"/files/{file_id}")).json()
    assert record["searchable"] is False


async def test_a_deleted_file_leaves_the_index(api: Api) -> None:
    file_id = await upload_text(api, "The axolotl saffron memo.")
    response = await api.call("DELETE", f"/files/{file_id}")
    assert response.status == 204
    assert await search(api, "axolotl saffron memo") == []
    assert await Chunk.filter(file_id=file_id).count() == 0


async def test_dir_limits_the_search_to_one_folder(api: Api) -> None:
    folder = await (await api.call("POST", "/dirs", json={"name": "archive"})).json()
    in_folder = await upload_text(api, "The narwhal cobalt treaty, archived.", folder=folder["id"])
    in_root = await upload_text(api, "The narwhal cobalt treaty, current.")
    assert [h["fileId"] for h in await search(api, "narwhal cobalt", dir=folder["id"])] == [
        in_folder
    ]
    assert [h["fileId"] for h in await search(api, "narwhal cobalt", dir="root")] == [in_root]


async def test_limit_caps_the_results(api: Api) -> None:
    for i in range(3):
        await upload_text(api, f"Report {i} about the pangolin quartz survey.", name=f"r{i}.txt")
    assert len(await search(api, "pangolin quartz", limit=2)) == 2


@pytest.mark.usefixtures("semantic_search")
async def test_get_one_shows_steps_and_counts(api: Api) -> None:
    file_id = await upload_text(api, "A short note about the tapir indigo wharf.")
    record = await (await api.call("GET", f"/files/{file_id}")).json()
    processing = record["processing"]
    for step in ("queued", "started", "extracted", "embedded", "indexed", "finished"):
        assert processing["steps"][step].endswith("Z"), step
    assert processing["chunks"] == 1
    assert record["searchable"] is True


async def test_search_without_q_is_400(api: Api) -> None:
    response = await api.call("GET", "/search")
    await assert_error(response, 400, "VALIDATION_ERROR")


async def test_search_with_a_bad_limit_is_400(api: Api) -> None:
    for limit in ("0", "101", "x"):
        response = await api.call("GET", "/search", params={"q": "a", "limit": limit})
        await assert_error(response, 400, "VALIDATION_ERROR")


async def test_search_with_a_q_over_2000_characters_is_400_as_post_is(api: Api) -> None:
    response = await api.call("GET", "/search", params={"q": "a" * 2001})
    error = await assert_error(response, 400, "VALIDATION_ERROR")
    assert error["details"] == [{"field": "q", "problem": "at most 2000 characters"}]
    assert (await api.call("GET", "/search", params={"q": "a" * 2000})).status == 200


async def test_search_with_a_nul_in_q_is_400_on_every_shape(shaped_api: Api) -> None:
    response = await shaped_api.call("GET", "/search", params={"q": "gecko\x00"})
    error = await assert_error(response, 400, "VALIDATION_ERROR")
    assert error["details"][0]["field"] == "q"


async def test_search_mode_keyword_scores_only_keywords(api: Api) -> None:
    file_id = await upload_text(api, "The marten ferry leaves at dawn.")
    hits = await search(api, "marten ferry", mode="keyword")
    assert [hit["fileId"] for hit in hits] == [file_id]
    assert hits[0]["score"] > 0
    # a paraphrase with no shared word finds nothing by keywords alone
    assert await search(api, "weasel boat", mode="keyword") == []


async def test_search_with_an_unknown_mode_is_400_naming_mode(api: Api) -> None:
    response = await api.call("GET", "/search", params={"q": "a", "mode": "fuzzy"})
    error = await assert_error(response, 400, "VALIDATION_ERROR")
    assert error["details"][0]["field"] == "mode"


async def test_search_in_an_unknown_folder_is_404(api: Api) -> None:
    response = await api.call("GET", "/search", params={"q": "a", "dir": "nosuchfolder"})
    await assert_error(response, 404, "NOT_FOUND")


async def test_search_with_another_projects_key_is_403(api: Api) -> None:
    _, other_key = await new_project("other")
    response = await api.call(
        "GET", "/search", params={"q": "a"}, headers={"Authorization": other_key}
    )
    await assert_error(response, 403, "FORBIDDEN")


async def test_search_syntax_in_a_query_is_plain_text(api: Api) -> None:
    file_id = await upload_text(api, "The gecko turquoise inventory.")
    for query in ('"gecko', "gecko AND NOT", "NEAR(gecko turquoise) *", "gecko:* | !!"):
        hits = await search(api, query)
        assert hits and hits[0]["fileId"] == file_id, query


async def test_passages_indexed_before_stemming_are_stemmed_on_upgrade(
    start_app: ClientFactory, embedded: Shape
) -> None:
    client = await start_app(embedded.settings)
    project_id, key = await new_project()
    api = Api(client, embedded, project_id, key)
    file_id = await upload_text(api, "The configuration of the gateway.")
    await client.close()
    # Back to before the stemmed index; the next start makes it from the stored passages.
    config = tortoise_config(embedded.settings.resolved_database_url)
    context = await Tortoise.init(config=config, _create_db=False)
    try:
        executor = MigrationExecutor(context.db(), config["apps"])
        await executor.migrate([MigrationTarget(APP_LABEL, "0010_pgvector")])
    finally:
        await context.close_connections()
    api = Api(await start_app(embedded.settings), embedded, project_id, key)
    response = await api.call("POST", "/search", json={"query": "configure", "mode": "keyword"})
    assert response.status == 200, await response.text()
    assert [hit["fileId"] for hit in await response.json()] == [file_id]


@pytest.mark.usefixtures("semantic_search")
async def test_a_change_of_embedder_re_embeds_the_index(
    start_app: ClientFactory, tmp_path: Path
) -> None:
    # Indexed while search was keyword-only (no embedder): no vectors at all.
    client = await start_app(base_settings(tmp_path, embedder="none"))
    project_id, key = await new_project()
    api = Api(client, Shape("keyword-only", client.app[appkeys.SETTINGS]), project_id, key)
    file_id = await upload_text(api, "The feline dozed on the rug for the whole afternoon.")
    assert await Chunk.filter(file_id=file_id, embedder__isnull=True).count() == 1
    await client.close()

    # Restarted with the local model: start-up re-embeds, semantic search works.
    client = await start_app(base_settings(tmp_path))
    api = Api(client, Shape("semantic", client.app[appkeys.SETTINGS]), project_id, key)
    await api.run_jobs()
    [chunk] = await Chunk.filter(file_id=file_id)
    embedder = client.app[appkeys.EMBEDDER]
    assert embedder is not None
    assert chunk.embedder == embedder.name
    hits = await search(api, "a cat sleeping on a mat")
    assert hits and hits[0]["fileId"] == file_id


@pytest.mark.usefixtures("semantic_search")
@pytest.mark.parametrize(
    ("limit", "value"),
    [
        # A batch of two files a run: five stale files take three runs.
        ("FILES_PER_RUN", 2),
        # No time at all a run: each run takes one file and queues the next itself.
        ("SECONDS_PER_RUN", 0.0),
    ],
)
async def test_re_embedding_finishes_in_one_start_up_however_many_files(
    start_app: ClientFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    limit: str,
    value: float,
) -> None:
    monkeypatch.setattr(f"libflow.library.reembed.{limit}", value)
    client = await start_app(base_settings(tmp_path, embedder="none"))
    project_id, key = await new_project()
    api = Api(client, Shape("keyword-only", client.app[appkeys.SETTINGS]), project_id, key)
    file_ids = [await upload_text(api, f"Passage number {n} about otters.") for n in range(5)]
    await client.close()

    client = await start_app(base_settings(tmp_path))
    api = Api(client, Shape("semantic", client.app[appkeys.SETTINGS]), project_id, key)
    await api.run_jobs()
    embedder = client.app[appkeys.EMBEDDER]
    assert embedder is not None
    chunks = await Chunk.filter(file_id__in=file_ids)
    assert len(chunks) == 5
    assert {chunk.embedder for chunk in chunks} == {embedder.name}


@pytest.mark.usefixtures("semantic_search")
async def test_a_code_only_one_passage_holds_comes_before_weak_look_alikes(api: Api) -> None:
    # The model finds no meaning in a made-up code: the passage holding it is under the
    # vector ranking's cut, and look-alike words elsewhere are a little above it. The
    # keyword ranking, whole at one hit, says the others hold no word of the query.
    prose = " ".join(["the quarterly review of contracts across our regional offices"] * 12)
    code = "vexil067a6f9 orrin067a6f9 plumet067a6f9"
    file_id = await upload_text(api, f"{prose}. Marker for this upload: {code}.", "report.txt")
    for n, text in enumerate(
        [
            "Order vexal-5521 shipped to Orrington, Plumstead warehouse.",
            "A vexillologist studies flags and banners.",
            "The plumber fixed the vexing leak in the orrery room.",
        ]
    ):
        await upload_text(api, text, f"other-{n}.txt")
    hits = await search(api, code)
    assert hits[0]["fileId"] == file_id
    assert hits[0]["scores"]["keyword"] == 1.0
    assert all(hit["scores"]["keyword"] is None for hit in hits[1:])
