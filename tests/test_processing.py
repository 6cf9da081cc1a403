"""Processing through the public API: every document type to search, thumbnails, re-runs."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from libflow import appkeys
from libflow.library.processing import isolation
from libflow.library.processing.prepare import Prepared
from libflow.library.search import search as search_index
from libflow.library.vectors import PassageFilter, QueryEmbedder, Vector, VectorIndex
from libflow.models import Chunk, LibraryFile, ProcessingStatus
from tests.conftest import Api, ClientFactory, base_settings, fixture_bytes, wait_until_processed
from tests.library_helpers import assert_error
from tests.processing_helpers import (
    job_context,
    process_fixture,
    search,
    thumbnail_image,
)
from workers.library import process_file


@dataclass(frozen=True)
class Document:
    """A document fixture, the phrases only it holds, and their page or slide."""

    name: str
    phrases: Sequence[tuple[str, int | None]]
    pages: int | None
    # Text that proves the characters were decoded right (txt and csv).
    exact: str | None = None

    def __str__(self) -> str:
        return self.name


DOCUMENTS = {
    doc.name: doc
    for doc in (
        Document(
            "report.docx",
            [("zephyr quokka alignment", None), ("Header velvet heron almanac", None)],
            pages=None,
        ),
        Document(
            "deck.pptx",
            [
                ("nebula pangolin ferry", 1),
                ("crimson llama whisper", 1),
                ("juniper otter cascade", 3),
            ],
            pages=3,
        ),
        Document(
            "report.pdf", [("zephyr quokka alignment", 1), ("saffron tapir overture", 2)], pages=2
        ),
        Document(
            "deck.pdf", [("obsidian badger sonnet", 2), ("juniper otter cascade", 3)], pages=3
        ),
        Document(
            "pages.pdf",
            [("amber falcon quilt", 1), ("silver yak harbor", 2), ("indigo moose carnival", 3)],
            pages=3,
        ),
        Document("hundred_pages.pdf", [("emerald squid parliament", 73)], pages=100),
        Document(
            "cp1252.txt",
            [("plum walrus tango", None)],
            pages=None,
            exact="Le café naïve coûte €100, “quotes” — plum walrus tango.",
        ),
        Document(
            "utf16.txt",
            [("quartz ibis meadow", None)],
            pages=None,
            exact="Grüße aus Köln ✓ quartz ibis meadow 日本語のテキスト",
        ),
        Document("table.csv", [("ochre tortoise bazaar", None)], pages=None, exact="Zürich"),
    )
}
# The scaled shape (PostgreSQL, S3, an arq worker) runs one of each reader.
SCALED_DOCUMENTS = ("report.docx", "deck.pptx", "report.pdf", "utf16.txt")
STEPS = ("queued", "started", "downloaded", "extracted", "embedded", "indexed", "finished")


def document_cases() -> list[object]:
    """Every document on the embedded shape, one of each type on the scaled one."""
    cases: list[object] = [
        pytest.param("embedded", doc, id=f"embedded-{doc}") for doc in DOCUMENTS.values()
    ]
    cases += [
        pytest.param("scaled", DOCUMENTS[name], id=f"scaled-{name}") for name in SCALED_DOCUMENTS
    ]
    return cases


@pytest.mark.parametrize(("shape", "document"), document_cases(), indirect=["shape"])
async def test_a_processed_document_is_found_by_its_phrases_on_their_pages(
    shaped_api: Api, document: Document
) -> None:
    api = shaped_api
    record = await process_fixture(api, document.name)
    assert record["processing"]["status"] == "done", record
    assert record["processing"]["error"] is None
    assert record["updating"] is None
    assert record["searchable"] is True

    for phrase, page in document.phrases:
        hits = await search(api, phrase)
        assert hits, phrase
        top = hits[0]
        assert top["fileId"] == record["id"], (phrase, hits)
        assert top["name"] == document.name
        assert phrase.lower() in " ".join(top["chunk"].split()).lower(), (phrase, top)
        assert top["page"] == page, (phrase, top)
    if document.exact is not None:
        [phrase, _] = document.phrases[0]
        assert document.exact in (await search(api, phrase))[0]["chunk"]

    # Get-one tells how it went: each step in order, and what was found.
    processing = record["processing"]
    steps = [processing["steps"][step] for step in STEPS]
    assert all(moment.endswith("Z") for moment in steps), processing
    assert steps == sorted(steps), processing
    assert ("thumbnailed" in processing["steps"]) == document.name.endswith(".pdf")
    assert processing["pages"] == document.pages
    pages = [chunk.page for chunk in await Chunk.filter(file_id=record["id"])]
    assert processing["chunks"] == len(pages) >= (document.pages or 1)
    if document.pages is not None:  # every page or slide has text, and keeps its number
        assert set(pages) == set(range(1, document.pages + 1))
    data = fixture_bytes(document.name)
    assert record["sha256"] == hashlib.sha256(data).hexdigest()
    assert record["size"] == len(data)


async def test_an_image_only_pdf_is_done_with_no_text_and_a_thumbnail(shaped_api: Api) -> None:
    api = shaped_api
    record = await process_fixture(api, "image_only.pdf")
    assert record["processing"]["status"] == "done", record
    assert record["processing"]["error"] is None
    assert record["updating"] is None
    assert record["processing"]["pages"] == 2
    assert record["processing"]["chunks"] == 0
    assert await Chunk.filter(file_id=record["id"]).count() == 0
    assert await search(api, "image page picture") == []
    assert record["thumbnail"] is True
    image, _ = await thumbnail_image(api, record["id"])
    assert image.format == "WEBP"
    assert max(image.size) == 256


# --- thumbnails --------------------------------------------------------------------------------

# (fixture, expected size): the longest side is 256, smaller images are never upscaled.
THUMBNAILS = [
    ("thumb_photo.jpg", (256, 171)),
    ("thumb_wide.png", (256, 64)),
    ("thumb_small.png", (40, 30)),
    ("thumb_animated.gif", (120, 90)),
    ("thumb_animated.webp", (120, 90)),
    ("thumb_page.pdf", (182, 256)),
    ("report.pdf", (182, 256)),
]


@pytest.mark.parametrize(("name", "size"), THUMBNAILS, ids=[name for name, _ in THUMBNAILS])
async def test_processing_makes_a_webp_thumbnail(
    api: Api, name: str, size: tuple[int, int]
) -> None:
    record = await process_fixture(api, name)
    assert record["processing"]["status"] == "done", record
    assert record["thumbnail"] is True
    assert record["processing"]["steps"]["thumbnailed"].endswith("Z")
    image, data = await thumbnail_image(api, record["id"])
    assert data[:4] == b"RIFF" and data[8:12] == b"WEBP"
    assert image.format == "WEBP"
    assert image.size == size


@pytest.mark.parametrize(
    ("name", "colour"),
    [("thumb_animated.gif", (220, 30, 30)), ("thumb_animated.webp", (30, 60, 220))],
)
async def test_an_animation_thumbnail_is_its_first_frame(
    api: Api, name: str, colour: tuple[int, int, int]
) -> None:
    record = await process_fixture(api, name)
    image, _ = await thumbnail_image(api, record["id"])
    assert getattr(image, "n_frames", 1) == 1
    pixel = image.convert("RGB").getpixel((60, 45))
    assert isinstance(pixel, tuple)
    assert all(abs(got - want) <= 8 for got, want in zip(pixel, colour, strict=True)), pixel


async def test_an_exif_rotated_jpeg_thumbnail_is_upright(shaped_api: Api) -> None:
    api = shaped_api
    record = await process_fixture(api, "thumb_exif_rotated.jpg")
    assert record["processing"]["status"] == "done", record
    image, _ = await thumbnail_image(api, record["id"])
    assert image.size == (128, 256)  # stored 320 x 160 landscape, EXIF says turn it
    rgb = image.convert("RGB")
    top, bottom = rgb.getpixel((64, 20)), rgb.getpixel((64, 236))
    assert isinstance(top, tuple) and isinstance(bottom, tuple)
    assert top[0] > 200 and top[2] < 60, top  # red on top
    assert bottom[2] > 200 and bottom[0] < 60, bottom  # blue below


@pytest.mark.parametrize("name", ["report.docx", "cp1252.txt", "table.csv", "deck.pptx"])
async def test_a_document_other_than_pdf_has_no_thumbnail(api: Api, name: str) -> None:
    record = await process_fixture(api, name)
    assert record["processing"]["status"] == "done", record
    assert record["thumbnail"] is False
    assert "thumbnailed" not in record["processing"]["steps"]
    response = await api.call("GET", f"/files/{record['id']}/thumbnail", allow_redirects=False)
    await assert_error(response, 404, "NOT_FOUND")


# --- where a file is prepared -------------------------------------------------------------------


async def test_small_plain_text_is_prepared_without_a_child_and_larger_text_with_one(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    prepared_in_children: list[str] = []
    in_child = isolation.prepare_in_child

    async def counted(path: Path, file_type: str, **kwargs: Any) -> Prepared:
        prepared_in_children.append(file_type)
        return await in_child(path, file_type, **kwargs)

    monkeypatch.setattr(isolation, "prepare_in_child", counted)
    note = ("A note on the saffron ibex caravan. " * 500)[: isolation.IN_PROCESS_BYTES]
    small = await api.upload(note.encode(), name="note.txt", file_type="txt")
    longer = "Minutes of the cobalt marmot guild. " * 500  # 18,000 bytes
    large = await api.upload(longer.encode(), name="minutes.md", file_type="md")

    for record in (small, large):
        done = await wait_until_processed(api, record["id"])
        assert done["processing"]["status"] == "done", done
        assert done["processing"]["chunks"] >= 1
    assert prepared_in_children == ["md"]
    assert [hit["fileId"] for hit in await search(api, "saffron ibex caravan")][:1] == [small["id"]]
    assert [hit["fileId"] for hit in await search(api, "cobalt marmot guild")][:1] == [large["id"]]


async def test_small_plain_text_read_from_memory_is_hashed_and_stepped_like_any_file(
    shaped_api: Api,
) -> None:
    data = b"A memo on the amber tapir ledger.\n" * 20
    record = await shaped_api.upload(data, name="memo.txt", file_type="txt")
    done = await wait_until_processed(shaped_api, record["id"])
    assert done["processing"]["status"] == "done", done
    assert done["sha256"] == hashlib.sha256(data).hexdigest()
    assert done["size"] == len(data)
    steps = done["processing"]["steps"]
    order = ("started", "downloaded", "extracted", "embedded", "indexed", "finished")
    assert [steps[name] for name in order] == sorted(steps[name] for name in order)
    chunks = await shaped_api.call("GET", f"/files/{record['id']}/chunks")
    assert chunks.status == 200, await chunks.text()
    assert "amber tapir ledger" in (await chunks.json())[0]["text"]


async def test_an_object_larger_than_its_record_says_is_not_read_into_memory(api: Api) -> None:
    from libflow.library.processing.pipeline import _read_whole

    assert api.client.app is not None
    storage = api.client.app[appkeys.STORAGE]
    key = f"libraryDocuments/{api.project_id}/guard/object.txt"
    await storage.write(key, b"x" * 101, "text/plain")
    assert await _read_whole(storage, key, 101) == b"x" * 101
    assert await _read_whole(storage, key, 100) is None


async def test_a_file_that_fails_to_prepare_keeps_what_its_download_found(api: Api) -> None:
    data = b"PK\x03\x04 the start of a zip and nothing after it"
    record = await api.upload(data, name="broken.docx", file_type="docx")
    failed = await wait_until_processed(api, record["id"])
    assert failed["processing"]["status"] == "failed", failed
    assert failed["sha256"] == hashlib.sha256(data).hexdigest()
    steps = failed["processing"]["steps"]
    assert steps["started"] <= steps["downloaded"] <= steps["finished"]
    assert "extracted" not in steps


# --- preventSearch and re-processing -----------------------------------------------------------


async def test_prevent_search_on_a_docx_indexes_nothing(shaped_api: Api) -> None:
    api = shaped_api
    record = await process_fixture(api, "report.docx", prevent_search=True)
    assert record["processing"]["status"] == "done", record
    assert record["updating"] is None
    assert record["searchable"] is False
    assert record["processing"]["chunks"] is None
    assert "indexed" not in record["processing"]["steps"]
    assert await search(api, "zephyr quokka alignment") == []
    assert await Chunk.filter(file_id=record["id"]).count() == 0


async def test_processing_a_file_again_replaces_its_index_rows(api: Api) -> None:
    record = await process_fixture(api, "pages.pdf")
    before = await Chunk.filter(file_id=record["id"]).order_by("seq").values_list("seq", "text")
    hits_before = await search(api, "silver yak harbor")

    # Processing it again, as a redelivered job does after a status reset.
    await LibraryFile.filter(id=record["id"]).update(status=ProcessingStatus.PENDING, updating=True)
    await process_file({**job_context(api), "job_try": 1}, record["id"])
    again = await wait_until_processed(api, record["id"])

    assert again["processing"]["status"] == "done", again
    after = await Chunk.filter(file_id=record["id"]).order_by("seq").values_list("seq", "text")
    assert after == before
    assert len({seq for seq, _ in after}) == len(after)
    assert again["processing"]["chunks"] == len(after)
    assert await search(api, "silver yak harbor") == hits_before
    assert (await LibraryFile.get(id=record["id"])).attempts == 2


# --- vector spaces -----------------------------------------------------------------------------


class StoredVectorEmbedder:
    """A query embedder that answers every query with one given vector, under a given name."""

    def __init__(self, name: str, vector: Vector) -> None:
        self.name = name
        self.vector = vector

    async def embed(self, texts: Sequence[str], *, truncate: bool = False) -> Vector:
        """The stored vector for each text."""
        return np.stack([self.vector] * len(texts))


async def test_vectors_of_another_embedder_are_never_searched(api: Api) -> None:
    record = await process_fixture(api, "cp1252.txt")
    [chunk] = await Chunk.filter(file_id=record["id"])
    assert chunk.embedding is not None and chunk.embedder is not None
    stored = np.frombuffer(chunk.embedding, dtype="<f4").astype(np.float32)
    index = VectorIndex()

    # The exact vector of the chunk, but named for another model: not a neighbour.
    assert await index.nearest(api.project_id, "other:model", stored, PassageFilter(), 10) == []
    [(nearest, similarity)] = await index.nearest(
        api.project_id, chunk.embedder, stored, PassageFilter(), 10
    )
    assert nearest == chunk.id and similarity > 0.99

    # Through the hybrid search, with a query that shares no keyword with the text.
    async def hits(embedder: QueryEmbedder) -> list[str]:
        found = await search_index(
            api.project_id,
            "unrelated words",
            limit=10,
            where=PassageFilter(),
            embedder=embedder,
            vectors=index,
        )
        return [hit.file_id for hit in found]

    assert await hits(StoredVectorEmbedder("other:model", stored)) == []
    assert await hits(StoredVectorEmbedder(chunk.embedder, stored)) == [record["id"]]
    app_embedder = api.client.app[appkeys.EMBEDDER] if api.client.app else None
    assert app_embedder is not None and chunk.embedder == app_embedder.name


async def test_the_embedded_server_starts_its_preparation_server_as_it_starts(
    start_app: ClientFactory, tmp_path: Path
) -> None:
    # As a worker does: the first file does not wait for the preparation server's start.
    isolation.stop_preparation_server()
    assert not isolation.preparation_server_running()
    await start_app(base_settings(tmp_path))
    assert isolation.preparation_server_running()


async def test_a_preparation_server_that_hangs_mid_greeting_fails_to_start() -> None:
    # It wrote part of its "ready" line and stopped: the start fails rather than waiting.
    server = isolation._PreparationServer(module="tests.stalled_preparation_server")
    try:
        with pytest.raises(isolation.ChildCrashed, match="did not start"):
            await asyncio.wait_for(asyncio.to_thread(server.socket_path), 30)
    finally:
        server.stop()
