"""Vector search in PostgreSQL with pgvector: a vector column, an HNSW index, search in SQL.

Through the public API on the ``pgvector`` shape (the scaled shape on a PostgreSQL with the
extension, see tests/pgvector_server.py); the machine's plain PostgreSQL keeps the in-memory
exact search, with a warning at start-up.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tortoise.connection import get_connection

from libflow import appkeys
from libflow.library.pgvector import (
    PgVectorSearch,
    ensure_hnsw_index,
    index_name,
    nearest_query,
)
from libflow.library.search_index import write_file_index
from libflow.library.vectors import PassageFilter, VectorIndex
from libflow.models import Chunk, LibraryFile
from tests.conftest import (
    Api,
    ClientFactory,
    Shape,
    base_settings,
    new_project,
    put_bytes,
    wait_until_processed,
)

CAT = "The feline dozed on the rug for the whole afternoon."
SALES = "Quarterly revenue grew by eight percent in Europe."
CAT_QUERY = "a cat sleeping on a mat"  # no word in common with CAT


@pytest.fixture
async def pgvector_api(start_app: ClientFactory, pgvector: Shape) -> Api:
    """A project on the pgvector shape."""
    client = await start_app(pgvector.settings)
    project_id, secret = await new_project()
    return Api(client, pgvector, project_id, secret)


async def upload_text(
    api: Api, text: str, *, folder: str = "root", metadata: dict[str, Any] | None = None
) -> str:
    """The three-step upload of a txt file with ``metadata``, processed."""
    if metadata is None:
        record = await api.upload(text.encode(), name="notes.txt", file_type="txt", folder=folder)
    else:
        body = {"originalname": "notes.txt", "fileType": "txt", "dir": folder, "metadata": metadata}
        response = await api.call("POST", "/files", json=body)
        assert response.status == 201, await response.text()
        created = await response.json()
        async with put_bytes(api, created, text.encode()) as put:
            assert put.status == 200
        done = await api.call("POST", "/files:complete", json={"path": created["path"]})
        assert done.status == 200, await done.text()
        record = await done.json()
    processed = await wait_until_processed(api, record["id"])
    assert processed["processing"]["status"] == "done", processed
    return str(processed["id"])


async def semantic(api: Api, query: str, **body: Any) -> list[str]:
    """File ids of a semantic-only POST search, best first."""
    response = await api.call("POST", "/search", json={"query": query, "mode": "semantic", **body})
    assert response.status == 200, await response.text()
    return [hit["fileId"] for hit in await response.json()]


async def column_vectors(file_id: str) -> list[dict[str, Any]]:
    """The file's chunks as the database holds them: bytes, vector column, embedder."""
    return await get_connection("default").execute_query_dict(
        "SELECT embedding IS NULL AS no_bytes, vector_dims(embedding_vector) AS dims, embedder"
        " FROM library_chunks WHERE file_id = $1",
        [file_id],
    )


@pytest.mark.usefixtures("semantic_search")
async def test_vectors_live_in_the_vector_column_and_search_finds_by_meaning(
    pgvector_api: Api,
) -> None:
    cat = await upload_text(pgvector_api, CAT)
    await upload_text(pgvector_api, SALES)
    assert isinstance(pgvector_api.client.app[appkeys.VECTOR_INDEX], PgVectorSearch)
    [row] = await column_vectors(cat)
    assert row["no_bytes"] is True and row["dims"] == 384
    hits = await semantic(pgvector_api, CAT_QUERY)
    assert hits and hits[0] == cat
    response = await pgvector_api.call("GET", "/search", params={"q": CAT_QUERY})
    assert (await response.json())[0]["fileId"] == cat


@pytest.mark.usefixtures("semantic_search")
async def test_search_by_meaning_never_crosses_projects_or_folders(pgvector_api: Api) -> None:
    folder = await (await pgvector_api.call("POST", "/dirs", json={"name": "pets"})).json()
    in_folder = await upload_text(pgvector_api, CAT, folder=folder["id"])
    in_root = await upload_text(pgvector_api, CAT)
    other_id, other_key = await new_project("other")
    other = Api(pgvector_api.client, pgvector_api.shape, other_id, other_key)
    elsewhere = await upload_text(other, CAT)

    assert set(await semantic(pgvector_api, CAT_QUERY)) == {in_folder, in_root}
    assert await semantic(pgvector_api, CAT_QUERY, dir=folder["id"]) == [in_folder]
    assert await semantic(pgvector_api, CAT_QUERY, dir="root") == [in_root]
    assert await semantic(other, CAT_QUERY) == [elsewhere]


@pytest.mark.usefixtures("semantic_search")
async def test_metadata_filters_admit_only_equal_json_values(pgvector_api: Api) -> None:
    red = await upload_text(pgvector_api, CAT, metadata={"colour": "red", "n": 1})
    blue = await upload_text(pgvector_api, CAT, metadata={"colour": "blue", "n": "1"})
    await upload_text(pgvector_api, CAT, metadata={"colour": "green", "n": True})
    other_id, other_key = await new_project("other")
    other = Api(pgvector_api.client, pgvector_api.shape, other_id, other_key)
    await upload_text(other, CAT, metadata={"colour": "red", "n": 1})

    assert await semantic(pgvector_api, CAT_QUERY, filter={"colour": "red"}) == [red]
    assert set(
        await semantic(pgvector_api, CAT_QUERY, filter={"colour": {"in": ["red", "blue"]}})
    ) == {red, blue}
    assert await semantic(pgvector_api, CAT_QUERY, filter={"n": 1}) == [red]
    assert await semantic(pgvector_api, CAT_QUERY, filter={"n": "1"}) == [blue]
    assert await semantic(pgvector_api, CAT_QUERY, filter={"colour": "red", "n": "1"}) == []


@pytest.mark.usefixtures("semantic_search")
async def test_a_deleted_file_leaves_the_vector_index(pgvector_api: Api) -> None:
    cat = await upload_text(pgvector_api, CAT)
    assert await semantic(pgvector_api, CAT_QUERY) == [cat]
    response = await pgvector_api.call("DELETE", f"/files/{cat}")
    assert response.status == 204
    assert await semantic(pgvector_api, CAT_QUERY) == []
    assert await column_vectors(cat) == []


@pytest.mark.usefixtures("semantic_search")
async def test_a_change_of_embedder_re_embeds_into_the_vector_column(
    start_app: ClientFactory, tmp_path: Path, pgvector_url: str
) -> None:
    # Indexed while search was keyword-only: no vectors at all.
    settings = base_settings(tmp_path, database_url=pgvector_url, embedder="none")
    client = await start_app(settings)
    project_id, key = await new_project()
    api = Api(client, Shape("keyword-only", settings), project_id, key)
    cat = await upload_text(api, CAT)
    assert await column_vectors(cat) == [{"no_bytes": True, "dims": None, "embedder": None}]
    await client.close()

    # Restarted with the local model: start-up re-embeds into the column.
    settings = base_settings(tmp_path, database_url=pgvector_url)
    client = await start_app(settings)
    api = Api(client, Shape("semantic", settings), project_id, key)
    embedder = client.app[appkeys.EMBEDDER]
    assert embedder is not None
    deadline = time.monotonic() + 120
    while (await column_vectors(cat))[0]["embedder"] is None:
        assert time.monotonic() < deadline, "not re-embedded"
        await api.run_jobs()  # the start-up job is queued by a timer of the app's
        await asyncio.sleep(0.1)
    [row] = await column_vectors(cat)
    assert row == {"no_bytes": True, "dims": 384, "embedder": embedder.name}
    assert await semantic(api, CAT_QUERY) == [cat]


async def test_the_query_uses_the_embedders_hnsw_index(
    start_app: ClientFactory, pgvector: Shape
) -> None:
    # An embedder of 16 dimensions (no model needed) and enough rows in one project that
    # walking its graph beats reading them all.
    client = await start_app(pgvector.settings.model_copy(update={"embedder": "none"}))
    project_id, _ = await new_project()
    embedder, dimensions = "test:explain", 16
    connection = get_connection("default")
    await ensure_hnsw_index(connection, embedder, dimensions)
    rng = np.random.default_rng(7)
    vectors = rng.standard_normal((3000, dimensions), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    file = await LibraryFile.create(
        project_id=project_id,
        name="many.txt",
        file_type="txt",
        mime_type="text/plain",
        storage_key=f"x/{project_id}/many",
        indexed=True,
    )
    passages = [_Passage(f"passage {i}", i) for i in range(len(vectors))]
    await write_file_index(file, passages, vectors, embedder)
    await connection.execute_script("ANALYZE library_chunks")

    for where in (PassageFilter(), PassageFilter("root", {"k": ("v", 1)})):
        sql, params = nearest_query(project_id, embedder, vectors[0], where, 50)
        rows = await connection.execute_query_dict(f"EXPLAIN {sql}", params)
        plan = "\n".join(row["QUERY PLAN"] for row in rows)
        assert f"Index Scan using {index_name(embedder, dimensions)}" in plan, plan

    found = await PgVectorSearch().nearest(project_id, embedder, vectors[0], PassageFilter(), 10)
    assert len(found) == 10
    assert found[0] == (int((await Chunk.get(file_id=file.id, seq=0)).id), pytest.approx(1.0))
    await client.close()


async def test_the_hnsw_graph_is_built_denser_than_pgvectors_default_and_replaces_it(
    start_app: ClientFactory, pgvector: Shape
) -> None:
    # A database whose index was built with pgvector's defaults (ef_construction 64) gets
    # the product's graph in its place: one index of that vector space, with its settings.
    client = await start_app(pgvector.settings.model_copy(update={"embedder": "none"}))
    connection = get_connection("default")
    embedder, dimensions = "test:graph", 8
    first = (
        "library_chunks_hnsw_"
        + hashlib.sha256(f"{embedder}\0{dimensions}".encode()).hexdigest()[:16]
    )
    await connection.execute_script(
        f"CREATE INDEX {first} ON library_chunks USING hnsw"
        f" ((embedding_vector::vector({dimensions})) vector_cosine_ops)"
        f" WHERE embedder = '{embedder}' AND vector_dims(embedding_vector) = {dimensions}"
    )

    await ensure_hnsw_index(connection, embedder, dimensions)

    rows = await connection.execute_query_dict(
        "SELECT relname, reloptions FROM pg_class WHERE relname LIKE 'library_chunks_hnsw_%'"
        " AND relname = ANY($1::text[])",
        [[first, index_name(embedder, dimensions)]],
    )
    assert [(row["relname"], sorted(row["reloptions"])) for row in rows] == [
        (index_name(embedder, dimensions), ["ef_construction=128", "m=16"])
    ]
    await client.close()


async def test_without_the_extension_search_is_in_memory_with_a_warning(
    start_app: ClientFactory, scaled: Shape, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="libflow.search"):
        client = await start_app(scaled.settings.model_copy(update={"embedder": "none"}))
    assert isinstance(client.app[appkeys.VECTOR_INDEX], VectorIndex)
    assert any("without the vector extension" in r.getMessage() for r in caplog.records)


class _Passage:
    def __init__(self, text: str, seq: int) -> None:
        self.text = text
        self.seq = seq
        self.page: int | None = None
        self.page_name: str | None = None
        self.tokens: int | None = None
