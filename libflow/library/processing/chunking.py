"""Split extracted segments into overlapping chunks of about 500 tokens for indexing.

Tokens are estimated, not counted with a model's tokenizer: a token is one CJK character,
one punctuation mark, or up to six letters or digits of a word (so "alignment" counts 2).
For English prose that is about 1.3 tokens per word, close to WordPiece and BPE counts;
it is deterministic and needs no model.
"""

from __future__ import annotations

import re
import unicodedata
from bisect import bisect_left, bisect_right
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import accumulate

from libflow.library.processing.budgets import BudgetExceeded
from libflow.library.processing.extract import Segment

_CJK = "\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0003ffff"
_TOKEN = re.compile(rf"[{_CJK}]|[^\W{_CJK}]{{1,6}}|[^\w\s]")
# After NFKC, so no full-width forms; U+3002 is the ideographic full stop.
_SENTENCE_END = re.compile("[.!?\u3002][\"'\u2019\u201d\u00bb)\\]]*$")
_CLOSERS = frozenset(".!?\u3002\"'\u2019\u201d\u00bb)]")
_MIN_FILL = 0.5  # a chunk may end early at a sentence end, but not before half its budget


@dataclass(frozen=True, slots=True)
class Chunk:
    """A piece of one segment's text, small enough to embed, with its page or slide."""

    text: str
    page: int | None
    seq: int  # 0-based order within the file
    page_name: str | None = None  # a named page: an xlsx sheet
    tokens: int | None = None  # its length in the embedder's word pieces


@dataclass(slots=True)
class _Words:
    """A segment's words with their token costs and where sentences and lines end."""

    text: list[str]
    cost: list[int]
    glued: list[bool]  # a piece of an over-long word: no space before it
    stop: list[int]  # after this word: 2 = sentence end, 1 = line break, 0 = neither


def count_tokens(text: str) -> int:
    """The estimated number of tokens in ``text``."""
    return len(_TOKEN.findall(text))


def chunk_segments(
    segments: Sequence[Segment],
    *,
    max_tokens: int = 500,
    overlap_tokens: int = 50,
    max_chunks: int | None = None,
) -> list[Chunk]:
    """Chunks of at most ``max_tokens``, each sharing up to ``overlap_tokens`` with the last.

    A chunk never crosses segments, so it keeps its page; it breaks only between words
    (except inside a single run of over ``max_tokens`` tokens), preferring a sentence end
    in the second half of its budget; whitespace in its text is collapsed to single spaces.
    More than ``max_chunks`` raise BudgetExceeded as soon as the first one too many is cut.
    """
    if max_tokens < 1 or not 0 <= overlap_tokens < max_tokens:
        raise ValueError("need max_tokens >= 1 and 0 <= overlap_tokens < max_tokens")
    chunks: list[Chunk] = []
    for segment in segments:
        words = _split_words(segment.text, max_tokens)
        for text in _windows(words, max_tokens, overlap_tokens):
            if max_chunks is not None and len(chunks) >= max_chunks:
                raise BudgetExceeded(
                    f"the text makes more than {max_chunks:,} passages, more than one file "
                    "may index"
                )
            chunks.append(Chunk(text, segment.page, len(chunks), page_name=segment.page_name))
    return chunks


def _split_words(text: str, max_tokens: int) -> _Words:
    """``text`` as words, the few longer than ``max_tokens`` cut into glued pieces."""
    # NFKC turns pdf ligatures (U+FB01 "fi") and full-width forms into what people type.
    text = unicodedata.normalize("NFKC", text)
    words = _Words([], [], [], [])
    cache: dict[str, int] = {}
    for line in text.splitlines():
        line_words = line.split()
        if not line_words:
            continue
        costs = [cache.get(w) or cache.setdefault(w, count_tokens(w)) for w in line_words]
        if max(costs) <= max_tokens:
            words.text += line_words
            words.cost += costs
            words.glued += [False] * len(line_words)
            words.stop += [_stop_after(w) for w in line_words]
        else:
            for word, cost in zip(line_words, costs, strict=True):
                _add_long_word(words, word, cost, max_tokens)
        words.stop[-1] = words.stop[-1] or 1
    return words


def _stop_after(word: str) -> int:
    """2 if ``word`` ends a sentence, else 0."""
    return 2 if word[-1] in _CLOSERS and _SENTENCE_END.search(word) else 0


def _add_long_word(words: _Words, word: str, cost: int, max_tokens: int) -> None:
    """Append ``word``, cut into glued pieces of ``max_tokens`` tokens if it is longer."""
    pieces = [word]
    if cost > max_tokens:
        tokens = _TOKEN.findall(word)
        pieces = ["".join(tokens[i : i + max_tokens]) for i in range(0, cost, max_tokens)]
    for index, piece in enumerate(pieces):
        words.text.append(piece)
        words.cost.append(min(max_tokens, cost - index * max_tokens))
        words.glued.append(index > 0)
        words.stop.append(0)
    words.stop[-1] = _stop_after(word)


def _windows(words: _Words, max_tokens: int, overlap_tokens: int) -> Iterator[str]:
    """The chunk texts over ``words``: greedy windows, backed off to a sentence or line end."""
    count = len(words.text)
    prefix = [0, *accumulate(words.cost)]  # prefix[i] = tokens in words[:i]
    start = end = 0
    while start < count:
        previous_end = end
        end = bisect_right(prefix, prefix[start] + max_tokens, lo=start + 1) - 1
        if end < count:
            end = _back_off(words, prefix, start, end, max(start + 1, previous_end + 1))
        yield _join(words, start, end)
        if end >= count:
            break
        # The next window starts as far back as the overlap budget allows, but always
        # past this one's start.
        start = bisect_left(prefix, prefix[end] - overlap_tokens, lo=start + 1, hi=end)


def _back_off(words: _Words, prefix: list[int], start: int, end: int, lowest: int) -> int:
    """Where a full window over ``words[start:end]`` should end: a sentence end, else a line end.

    The window keeps at least half its tokens and ends no earlier than ``lowest``, so
    it always reaches past the previous window.
    """
    floor = prefix[start] + _MIN_FILL * (prefix[end] - prefix[start])
    for strength in (2, 1):
        for stop in range(end, lowest - 1, -1):
            if prefix[stop] < floor:
                break
            if words.stop[stop - 1] == strength:
                return stop
    return end


def _join(words: _Words, start: int, end: int) -> str:
    """Words ``start`` to ``end`` joined by single spaces, glued pieces without one."""
    parts: list[str] = []
    for index in range(start, end):
        if index > start and not words.glued[index]:
            parts.append(" ")
        parts.append(words.text[index])
    return "".join(parts)
