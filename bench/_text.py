"""Deterministic filler text for the processing and search benchmarks.

Words are drawn from a Zipf-like distribution (weight 1 / rank) over a vocabulary that starts
with common English words and continues with pronounceable made-up ones, so a few words are
in almost every passage and most are rare, as in real documents.
"""

from __future__ import annotations

import itertools
import random

import numpy as np
import numpy.typing as npt

_ENGLISH = (
    "the of and to in is that for it as was with be by on not he this are or his from at which "
    "but have an they you were her she there been one all we their has would when if so no "
    "will more can said what about up out them into only some time could new two may then do "
    "first any my now such like our over man me even most made after also did many before must "
    "through back years where much your way well down should because each just those people "
    "how too little state good very make world still own see men work long get here between "
    "both life being under never day same another know while last might us great old year off "
    "come since against go came right used take three states himself few house use during "
    "without again place around however home small found thought went say part once general "
    "high upon school every among government report river stone cloud paper lamp window "
    "garden market bridge candle harbor meadow forest signal budget contract engine policy "
    "customer invoice quarter revenue schedule project library archive network storage "
    "process search index vector model language method result figure table section chapter"
)
ENGLISH = _ENGLISH.split()
_ONSETS = [*"bcdfghjklmnprstvwz", "br", "cl", "dr", "fl", "gr", "pl", "st", "tr"]
_VOWELS = [*"aeiou", "ai", "ea", "io", "ou"]
_CODAS = ["", "n", "r", "s", "l", "m", "t", "x"]


def vocabulary(size: int, seed: int = 7) -> list[str]:
    """``size`` distinct words: the English list first, then made-up words, in rank order."""
    made_up = [
        a + b + c + d + e
        for a, b, c, d, e in itertools.product(_ONSETS, _VOWELS, _ONSETS, _VOWELS, _CODAS)
    ]
    random.Random(seed).shuffle(made_up)
    seen = set(ENGLISH)
    words = list(ENGLISH)
    for word in made_up:
        if len(words) >= size:
            break
        if word not in seen:
            seen.add(word)
            words.append(word)
    if len(words) < size:
        raise ValueError(f"cannot make {size} distinct words")
    return words[:size]


def zipf_weights(size: int) -> npt.NDArray[np.float64]:
    """The probability of each rank: 1 / rank, normalized."""
    weights = 1.0 / np.arange(1, size + 1)
    normalized: npt.NDArray[np.float64] = weights / weights.sum()
    return normalized


class Prose:
    """Sentences of Zipf-distributed words from one vocabulary, seeded."""

    def __init__(self, vocabulary_size: int = 2000, seed: int = 1) -> None:
        self.vocabulary = vocabulary(vocabulary_size)
        self.words = np.array(self.vocabulary)
        self.weights = zipf_weights(vocabulary_size)
        self.rng = np.random.default_rng(seed)

    def words_matrix(self, rows: int, columns: int) -> npt.NDArray[np.str_]:
        """``rows`` x ``columns`` words drawn at once (fast for many passages)."""
        picks = self.rng.choice(len(self.words), size=(rows, columns), p=self.weights)
        return self.words[picks]

    def text(self, count: int) -> str:
        """About ``count`` words as sentences of 8 to 20 words, capitalized and full-stopped."""
        words = list(self.words_matrix(1, count)[0])
        out: list[str] = []
        start = 0
        while start < len(words):
            length = int(self.rng.integers(8, 21))
            sentence = words[start : start + length]
            out.append(" ".join([sentence[0].capitalize(), *sentence[1:]]) + ".")
            start += length
        return " ".join(out)

    def passages(self, rows: int, words: int) -> list[str]:
        """``rows`` passages of ``words`` words each (no punctuation: index filler)."""
        picks = self.rng.choice(len(self.words), size=(rows, words), p=self.weights)
        vocab = self.vocabulary
        return [" ".join([vocab[i] for i in row]) for row in picks.tolist()]
