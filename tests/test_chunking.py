"""libflow.library.processing.chunking: size bound, overlap, whole words, pages and order.

These cut by the estimate (keyword-only search); tests/test_passage_sizing.py cuts with the
embedding model's own tokenizer.
"""

from __future__ import annotations

import unicodedata
from itertools import pairwise
from pathlib import Path

import pytest

from libflow.library.embeddings.interface import PassageSizing
from libflow.library.processing.budgets import BudgetExceeded
from libflow.library.processing.chunking import Chunk, chunk_segments, estimate_tokens
from libflow.library.processing.extract import Segment, extract_text
from libflow.library.processing.stored_text import join_passages

FIXTURES = Path(__file__).parent / "fixtures"
SMALL = PassageSizing(max_tokens=120, overlap_tokens=20)


@pytest.fixture(scope="module")
def hundred_pages() -> list[Segment]:
    """The 100-page reportlab pdf's segments: about 480 tokens of prose a page."""
    return extract_text(FIXTURES / "hundred_pages.pdf", "pdf").segments


@pytest.fixture(scope="module")
def small_chunks(hundred_pages: list[Segment]) -> list[Chunk]:
    """The 100 pages cut into chunks of 120 tokens with 20 of overlap: several per page."""
    return chunk_segments(hundred_pages, SMALL)


def shared_words(before: Chunk, after: Chunk) -> list[str]:
    """The longest run of words that ends ``before`` and starts ``after``."""
    left, right = before.text.split(), after.text.split()
    for size in range(min(len(left), len(right)), 0, -1):
        if left[-size:] == right[:size]:
            return right[:size]
    return []


def test_no_segments_give_no_chunks() -> None:
    assert chunk_segments([]) == []


def test_blank_segments_are_skipped() -> None:
    assert chunk_segments([Segment("", 1), Segment(" \n\t ", 2)]) == []


def test_short_segment_is_one_chunk_with_spaces_collapsed_and_lines_kept() -> None:
    segment = Segment("  The zephyr\r\n\n quokka\t\talignment.  ", 4)
    assert chunk_segments([segment]) == [Chunk("The zephyr\nquokka alignment.", 4, 0, tokens=6)]


def test_a_csvs_rows_stay_one_a_line() -> None:
    rows = "name,team,city\nAda,engines,London\nGrace,compilers,Arlington\n"
    [chunk] = chunk_segments([Segment(rows, None)])
    assert chunk.text.splitlines() == [
        "name,team,city",
        "Ada,engines,London",
        "Grace,compilers,Arlington",
    ]


def test_chunks_stay_within_the_token_budget(small_chunks: list[Chunk]) -> None:
    assert max(estimate_tokens(c.text) for c in small_chunks) <= 120


def test_default_chunks_hold_a_whole_page_of_about_500_tokens(
    hundred_pages: list[Segment],
) -> None:
    chunks = chunk_segments(hundred_pages)
    assert [c.page for c in chunks] == list(range(1, 101))
    assert all(400 < estimate_tokens(c.text) <= 500 for c in chunks)
    assert [c.tokens for c in chunks] == [estimate_tokens(c.text) for c in chunks]


def test_consecutive_chunks_of_a_page_overlap(small_chunks: list[Chunk]) -> None:
    pairs = [(a, b) for a, b in pairwise(small_chunks) if a.page == b.page]
    assert pairs
    for before, after in pairs:
        overlap = shared_words(before, after)
        assert overlap, (before.text, after.text)
        assert estimate_tokens(" ".join(overlap)) <= 20


def test_chunks_split_only_between_words(
    hundred_pages: list[Segment], small_chunks: list[Chunk]
) -> None:
    words = {word for segment in hundred_pages for word in segment.text.split()}
    assert all(word in words for chunk in small_chunks for word in chunk.text.split())


def test_chunks_keep_their_page_and_never_cross_pages(
    hundred_pages: list[Segment], small_chunks: list[Chunk]
) -> None:
    by_page = {s.page: " ".join(s.text.split()) for s in hundred_pages}
    assert all(" ".join(chunk.text.split()) in by_page[chunk.page] for chunk in small_chunks)
    assert next(c for c in small_chunks if "emerald squid parliament" in c.text).page == 73


def test_seq_counts_chunks_across_the_file_in_order(small_chunks: list[Chunk]) -> None:
    assert [c.seq for c in small_chunks] == list(range(len(small_chunks)))
    assert [c.page for c in small_chunks] == sorted(c.page or 0 for c in small_chunks)


def test_a_chunk_prefers_to_end_at_a_sentence() -> None:
    sentences = " ".join(f"Sentence number {n} says little." for n in range(40))
    chunks = chunk_segments([Segment(sentences, None)], PassageSizing(50, 5))
    assert len(chunks) > 3
    assert all(chunk.text.endswith("little.") for chunk in chunks)


def test_overlong_word_is_cut_into_pieces_within_budget() -> None:
    blob = "a1b2c3" * 100  # 100 estimated tokens with no space to break at
    chunks = chunk_segments([Segment(f"before {blob} after", 2)], PassageSizing(30, 0))
    assert max(estimate_tokens(c.text) for c in chunks) <= 30
    assert "".join(c.text for c in chunks).replace(" ", "") == f"before{blob}after"
    assert all(" " not in c.text for c in chunks[1:-1])


def test_ligatures_are_normalized() -> None:
    assert chunk_segments(
        [Segment("\ufb01nance of\u00a0the \uff46\uff55\uff4c\uff4c width", None)]
    )[0].text == ("finance of the full width")


def test_token_estimate_counts_word_pieces() -> None:
    assert estimate_tokens("track,") == 2
    assert estimate_tokens("alignment") == 2
    assert estimate_tokens("日本語") == 3
    assert estimate_tokens("The zephyr quokka alignment is on track.") == 9


def test_chunking_is_deterministic(hundred_pages: list[Segment]) -> None:
    sizing = PassageSizing(max_tokens=90)
    assert chunk_segments(hundred_pages, sizing) == chunk_segments(hundred_pages, sizing)


@pytest.mark.parametrize(("max_tokens", "overlap_tokens"), [(0, 0), (50, 50), (50, -1)])
def test_bad_budgets_are_refused(max_tokens: int, overlap_tokens: int) -> None:
    with pytest.raises(ValueError, match="max_tokens"):
        PassageSizing(max_tokens=max_tokens, overlap_tokens=overlap_tokens)


def test_more_chunks_than_the_budget_stop_at_the_first_one_over(
    hundred_pages: list[Segment], small_chunks: list[Chunk]
) -> None:
    with pytest.raises(BudgetExceeded, match=f"more than {len(small_chunks) - 1:,} passages"):
        chunk_segments(hundred_pages, SMALL, max_chunks=len(small_chunks) - 1)
    assert chunk_segments(hundred_pages, SMALL, max_chunks=len(small_chunks)) == small_chunks


def test_the_passages_of_a_text_join_back_into_it(hundred_pages: list[Segment]) -> None:
    # What library_file_text answers for a file processed before its text was stored.
    chunks = chunk_segments(hundred_pages, SMALL)
    joined = join_passages([(chunk.text, chunk.page) for chunk in chunks])
    pages = [_lines(segment.text) for segment in hundred_pages if segment.text.strip()]
    assert joined.split("\n\n") == [unicodedata.normalize("NFKC", page) for page in pages]


def _lines(text: str) -> str:
    """``text``'s lines with words one space apart, the empty ones dropped: as passages hold it."""
    return "\n".join(" ".join(words) for line in text.splitlines() if (words := line.split()))
