"""Split extracted segments into overlapping passages that the embedder reads whole.

Passages are measured as the embedder measures them (``PassageSizing``): with a tokenizer, in
its tokens, special tokens included, so that no passage is longer than the model reads (for
all-MiniLM-L6-v2, 256 word pieces with [CLS] and [SEP]); every passage is counted whole with
the tokenizer before it is kept, so even a tokenizer whose counts do not add up word by word
never gets one over its limit. Without a tokenizer (keyword-only search, an OpenAI-style API)
tokens are estimated: a token is one CJK character, one punctuation mark, or up to six letters
or digits of a word (so "alignment" counts 2), about 1.3 a word of English prose, close to
WordPiece and BPE counts.
"""

from __future__ import annotations

import functools
import math
import re
import unicodedata
from bisect import bisect_left, bisect_right
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import accumulate, pairwise
from typing import TYPE_CHECKING, Protocol

from libflow.library.embeddings.interface import ESTIMATED_SIZING, PassageSizing
from libflow.library.processing.budgets import BudgetExceeded
from libflow.library.processing.extract import Segment

if TYPE_CHECKING:
    from tokenizers import Tokenizer

_CJK = "\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0003ffff"
_TOKEN = re.compile(rf"[{_CJK}]|[^\W{_CJK}]{{1,6}}|[^\w\s]")
# After NFKC, so no full-width forms; U+3002 is the ideographic full stop.
_SENTENCE_END = re.compile("[.!?\u3002][\"'\u2019\u201d\u00bb)\\]]*$")
_CLOSERS = frozenset(".!?\u3002\"'\u2019\u201d\u00bb)]")
_MIN_FILL = 0.5  # a chunk may end early at a sentence end, but not before half its budget
_WORD_BY_WORD = frozenset({"BertPreTokenizer", "Whitespace", "WhitespaceSplit"})


# Longer runs of non-space characters are cut before tokenizing (see _bounded).
MAX_WORD_CHARS = 256
# Passages recounted with the tokenizer at once.
RECOUNT_BATCH = 256


@dataclass(frozen=True, slots=True)
class Chunk:
    """A piece of one segment's text, small enough to embed, with its page or slide."""

    text: str
    page: int | None
    seq: int  # 0-based order within the file
    page_name: str | None = None  # a named page: an xlsx sheet
    tokens: int | None = None  # its length in the embedder's tokens (or the estimate)


@dataclass(slots=True)
class _Words:
    """A segment's words with their token costs and where sentences and lines end."""

    text: list[str]
    cost: list[int]
    glued: list[bool]  # a piece of an over-long word: no space before it
    stop: list[int]  # after this word: 2 = sentence end, 1 = line break, 0 = neither
    # Whether a line of the text ends after this word: a passage keeps its lines (a csv's
    # rows, a list's items, a heading above its paragraph) rather than running them together.
    line_end: list[bool]


def estimate_tokens(text: str) -> int:
    """The estimated number of tokens in ``text``."""
    return len(_TOKEN.findall(text))


class _Counter(Protocol):
    """Counts tokens the way one embedder does."""

    special: int  # tokens the model adds to every text
    # Whether a passage counts exactly its words' costs plus the special tokens (as long as
    # no word was cut into glued pieces): then only passages with glued pieces are counted.
    additive: bool

    def word_costs(self, words: Sequence[str]) -> list[int]:
        """Tokens of each word on its own, without special tokens."""
        ...

    def counts(self, texts: Sequence[str]) -> list[int]:
        """Tokens of each whole passage, special tokens included."""
        ...

    def cut_points(self, word: str, budget: int) -> list[int]:
        """Where to cut ``word`` into pieces of about ``budget`` tokens: character offsets."""
        ...


class _Estimate:
    """The estimate, at least one token per ``min_bytes_per_token`` bytes when that is set."""

    special = 0
    # Words never share a token, and a word cut into pieces counts at most their sum.
    additive = True

    def __init__(self, min_bytes_per_token: int | None) -> None:
        self.min_bytes = min_bytes_per_token

    def word_costs(self, words: Sequence[str]) -> list[int]:
        if self.min_bytes is None:
            return [estimate_tokens(word) for word in words]
        # The space that joins a word to the next is counted with it.
        step = self.min_bytes
        return [max(estimate_tokens(w), math.ceil((len(w.encode()) + 1) / step)) for w in words]

    def counts(self, texts: Sequence[str]) -> list[int]:
        return self.word_costs(texts)

    def cut_points(self, word: str, budget: int) -> list[int]:
        # A piece still over by its bytes is halved again by _pieces.
        return _cuts_every(list(accumulate(len(t) for t in _TOKEN.findall(word))), budget)


class _TokenizerCount:
    """A Hugging Face tokenizer's own counts, as the model reads the text."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        self.special = len(tokenizer.encode("", add_special_tokens=True).ids)
        # These split words at whitespace first, and count each word on its own.
        self.additive = type(tokenizer.pre_tokenizer).__name__ in _WORD_BY_WORD

    def word_costs(self, words: Sequence[str]) -> list[int]:
        encoded = self.tokenizer.encode_batch(list(words), add_special_tokens=False)
        return [len(e.ids) for e in encoded]

    def counts(self, texts: Sequence[str]) -> list[int]:
        encoded = self.tokenizer.encode_batch(list(texts), add_special_tokens=True)
        return [len(e.ids) for e in encoded]

    def cut_points(self, word: str, budget: int) -> list[int]:
        encoded = self.tokenizer.encode(word, add_special_tokens=False)
        ends = [end for _start, end in encoded.offsets]
        return _cuts_every(ends, budget)


def _cuts_every(ends: list[int], every: int) -> list[int]:
    """Offsets ending each run of ``every`` tokens (``ends``: where each token ends)."""
    cuts = [ends[i] for i in range(every - 1, len(ends) - 1, every)]
    return sorted({c for c in cuts if c > 0})


@functools.lru_cache(maxsize=4)
def _load_tokenizer(path: str) -> Tokenizer:
    """The tokenizer saved at ``path``, counting every token (no truncation, no padding)."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(path)
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


def _counter(sizing: PassageSizing) -> _Counter:
    if sizing.tokenizer is None:
        return _Estimate(sizing.min_bytes_per_token)
    return _TokenizerCount(_load_tokenizer(sizing.tokenizer))


def preload(sizing: PassageSizing) -> None:
    """Load what cutting passages for ``sizing`` needs, so forked processes start with it."""
    _counter(sizing)


def chunk_segments(
    segments: Sequence[Segment],
    sizing: PassageSizing = ESTIMATED_SIZING,
    *,
    max_chunks: int | None = None,
) -> list[Chunk]:
    """Passages of at most ``sizing.max_tokens``, each sharing up to its overlap with the last.

    A chunk never crosses segments, so it keeps its page; it breaks only between words
    (except inside a single word longer than a passage), preferring a sentence end in the
    second half of its budget; whitespace in its text is collapsed to single spaces. Each
    chunk's ``tokens`` is its count as the embedder counts it. More than ``max_chunks``
    raise BudgetExceeded as soon as the first one too many is cut.
    """
    counter = _counter(sizing)
    budget = sizing.max_tokens - counter.special
    if budget < 1 or sizing.overlap_tokens >= budget:
        raise ValueError(f"{sizing.max_tokens} tokens leave no room beside the special tokens")
    chunks: list[Chunk] = []
    for segment in segments:
        words = _split_words(segment.text, budget, counter)
        for text, tokens in _fitted_windows(words, budget, sizing, counter):
            if max_chunks is not None and len(chunks) >= max_chunks:
                raise BudgetExceeded(
                    f"the text makes more than {max_chunks:,} passages, more than one file "
                    "may index"
                )
            chunks.append(
                Chunk(text, segment.page, len(chunks), page_name=segment.page_name, tokens=tokens)
            )
    return chunks


def _split_words(text: str, budget: int, counter: _Counter) -> _Words:
    """``text`` as words, the few longer than ``budget`` cut into glued pieces."""
    # NFKC turns pdf ligatures (U+FB01 "fi") and full-width forms into what people type.
    text = unicodedata.normalize("NFKC", text)
    lines = [_bounded(split) for line in text.splitlines() if (split := line.split())]
    unique = list(dict.fromkeys(word for line in lines for word, _glued in line))
    costs = dict(zip(unique, counter.word_costs(unique), strict=True))
    words = _Words([], [], [], [], [])
    for line_words in lines:
        for word, glued in line_words:
            _add_word(words, word, costs[word], budget, counter, glued=glued)
        words.stop[-1] = words.stop[-1] or 1
        words.line_end[-1] = True
    return words


def _bounded(line: list[str]) -> list[tuple[str, bool]]:
    """The line's words, each over MAX_WORD_CHARS cut into glued pieces of that many.

    A tokenizer holds every token of what it is given: a text without spaces (CJK, a
    base64 blob) would be one word of millions of tokens, tokenized at once.
    """
    bounded: list[tuple[str, bool]] = []
    for word in line:
        if len(word) <= MAX_WORD_CHARS:
            bounded.append((word, False))
            continue
        for start in range(0, len(word), MAX_WORD_CHARS):
            bounded.append((word[start : start + MAX_WORD_CHARS], start > 0))
    return bounded


def _stop_after(word: str) -> int:
    """2 if ``word`` ends a sentence, else 0."""
    return 2 if word[-1] in _CLOSERS and _SENTENCE_END.search(word) else 0


def _add_word(
    words: _Words, word: str, cost: int, budget: int, counter: _Counter, *, glued: bool = False
) -> None:
    """Append ``word``, cut into glued pieces of at most ``budget`` tokens if it is longer.

    ``glued``: the word continues the one before it (no space between them).
    """
    pieces = _pieces(word, cost, budget, counter)
    for index, (piece, piece_cost) in enumerate(pieces):
        words.text.append(piece)
        words.cost.append(piece_cost)
        words.glued.append(glued or index > 0)
        words.stop.append(0)
        words.line_end.append(False)
    words.stop[-1] = _stop_after(word)


def _pieces(word: str, cost: int, budget: int, counter: _Counter) -> list[tuple[str, int]]:
    """``word`` (of ``cost`` tokens) as pieces of at most ``budget`` tokens, with their costs."""
    if cost <= budget:
        return [(word, cost)]
    cuts = counter.cut_points(word, budget)
    bounds = [0, *cuts, len(word)]
    texts = [word[a:b] for a, b in pairwise(bounds) if a < b]
    if len(texts) < 2:
        # No token boundary to cut at: halve by characters.
        middle = len(word) // 2
        texts = [word[:middle], word[middle:]]
    pieces: list[tuple[str, int]] = []
    for text, piece_cost in zip(texts, counter.word_costs(texts), strict=True):
        # A piece alone may count differently (a word piece that began with ## no longer
        # does): the rare one still over is cut again.
        if piece_cost > budget and len(text) > 1:
            pieces += _pieces(text, piece_cost, budget, counter)
        else:
            pieces.append((text, piece_cost))
    return pieces


def _fitted_windows(
    words: _Words, budget: int, sizing: PassageSizing, counter: _Counter
) -> Iterator[tuple[str, int]]:
    """The windows over ``words`` with their real counts, a window over the limit cut again.

    Word counts add up to a passage's count for WordPiece and the estimate; where they do not
    (glued pieces that merge back, other tokenizers), the window is cut again with a budget
    smaller by its overshoot, until every passage fits.
    """
    prefix = [0, *accumulate(words.cost)]  # prefix[i] = tokens in words[:i]
    overlap = min(sizing.overlap_tokens, budget // 2)
    spans = list(_windows(words, prefix, budget, overlap))
    # Recounted a batch at a time: a long text's encodings are never all held at once, and
    # a caller counting passages against a budget stops after the first batch too many.
    for first in range(0, len(spans), RECOUNT_BATCH):
        yield from _fitted_batch(
            words, prefix, spans[first : first + RECOUNT_BATCH], budget, sizing, counter
        )


def _fitted_batch(
    words: _Words,
    prefix: list[int],
    spans: list[tuple[int, int]],
    budget: int,
    sizing: PassageSizing,
    counter: _Counter,
) -> Iterator[tuple[str, int]]:
    texts = [_join(words, start, end) for start, end in spans]
    counts = [prefix[end] - prefix[start] + counter.special for start, end in spans]
    recount = [
        index
        for index, (start, end) in enumerate(spans)
        if not counter.additive or any(words.glued[start + 1 : end])
    ]
    for index, count in zip(recount, counter.counts([texts[i] for i in recount]), strict=True):
        counts[index] = count
    for (start, end), text, count in zip(spans, texts, counts, strict=True):
        if count <= sizing.max_tokens or end - start < 2:
            # A single word (or piece) alone counts what its cost said: it fits.
            yield text, count
            continue
        inner = _Words(
            words.text[start:end],
            words.cost[start:end],
            words.glued[start:end],
            words.stop[start:end],
            words.line_end[start:end],
        )
        smaller = max(1, budget - (count - sizing.max_tokens))
        yield from _fitted_windows(inner, smaller, sizing, counter)


def _windows(
    words: _Words, prefix: list[int], budget: int, overlap: int
) -> Iterator[tuple[int, int]]:
    """Greedy windows over ``words``, backed off to a sentence or line end: (start, end)."""
    count = len(words.text)
    start = end = 0
    while start < count:
        previous_end = end
        end = max(start + 1, bisect_right(prefix, prefix[start] + budget, lo=start + 1) - 1)
        if end < count:
            end = _back_off(words, prefix, start, end, max(start + 1, previous_end + 1))
        yield start, end
        if end >= count:
            break
        # The next window starts as far back as the overlap budget allows, but always
        # past this one's start.
        start = bisect_left(prefix, prefix[end] - overlap, lo=start + 1, hi=end)


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
    """Words ``start`` to ``end`` joined by single spaces, or a newline where a line ended;
    glued pieces without either. (Both are whitespace to the tokenizers and the keyword
    index: only the passage shown changes.)"""
    parts: list[str] = []
    for index in range(start, end):
        if index > start and not words.glued[index]:
            parts.append("\n" if words.line_end[index - 1] else " ")
        parts.append(words.text[index])
    return "".join(parts)
