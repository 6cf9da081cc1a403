"""The retrieval benchmark's test collection: Python FAQ questions over Python documentation.

No standard test collection (SciFact, NFCorpus, Cranfield, ...) can be had from the package
registries this project reaches, so the shipped one is built from a package that can: the
Python 3.11 documentation sources in Debian's ``python3.11-doc``
(``/usr/share/doc/python3.11/html/_sources``). Each question of the official Python FAQ is a
query; the answer written under it, without the question, is its one relevant document
(relevance 1); sections of the Library and Language References, the Tutorial and the HOWTOs
are the other documents. Some of those may answer a question too, unjudged: every mode is
scored against the same judgements, so that costs all modes alike.

``python -m bench._faq_collection build SOURCES [--out FILE] [--distractors N]`` rebuilds
``bench/data/python-faq.json.xz`` (deterministic: the same sources give the same file).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import lzma
import re
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

DATA_FILE = Path(__file__).resolve().parent / "data" / "python-faq.json.xz"
DISTRACTORS = 2400  # more than there are: all of them
# A distractor section is kept when it has this many words: shorter ones are mostly
# headings and tables of contents, longer ones are split by the service into many chunks.
DISTRACTOR_WORDS = (40, 400)
ANSWER_MIN_WORDS = 12  # an answer of fewer words is a cross-reference ("See ...")
_UNDERLINE = re.compile(r"^([=\-~^*#\"'+`])\1{2,}\s*$")
_DIRECTIVE = re.compile(r"^\s*\.\.\s+(?:_[^:]*:|[\w:-]+::.*|\|[^|]*\|.*)\s*$")
_OPTION = re.compile(r"^\s+:[\w-]+:.*$")
_LINK = re.compile(r"`([^`<]+?)\s*<[^>`]+>`_{1,2}")
_ROLE = re.compile(r":[\w:.+-]+:`([^`]*)`")
_TARGET = re.compile(r"\s*<[^>]*>$")


@dataclass(frozen=True, slots=True)
class Collection:
    """Documents, queries and graded relevance judgements (query id -> doc id -> grade)."""

    name: str
    documents: dict[str, str]
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]


def load(path: Path = DATA_FILE) -> Collection:
    """The collection as shipped."""
    data = json.loads(lzma.decompress(path.read_bytes()))
    return Collection(
        data["name"],
        dict(data["documents"]),
        dict(data["queries"]),
        {q: dict(judged) for q, judged in data["qrels"].items()},
    )


# -- building it from the documentation sources ---------------------------------------------


def _role_text(match: re.Match[str]) -> str:
    text = _TARGET.sub("", match.group(1)).lstrip("~!")
    return text


def clean(lines: Sequence[str]) -> str:
    """reStructuredText as a reader sees it: no directives, roles or link targets."""
    kept: list[str] = []
    in_directive = False
    for line in lines:
        if _DIRECTIVE.match(line):
            in_directive = True
            continue
        if in_directive and _OPTION.match(line):
            continue
        in_directive = False
        line = _LINK.sub(r"\1", line)
        line = _ROLE.sub(_role_text, line)
        line = line.replace("``", "").replace("`", "")
        if line.rstrip().endswith("::"):
            line = line.rstrip()[:-1]
        kept.append(line.rstrip())
    text = "\n".join(kept)
    return re.sub(r"\n{3,}", "\n\n", text).strip()


@dataclass(frozen=True, slots=True)
class Section:
    title: str
    level: str  # the underline character
    body: list[str]


def sections(text: str) -> Iterator[Section]:
    """The file's sections: a title, its underline character, the lines up to the next title."""
    lines = text.splitlines()
    title: str | None = None
    level = ""
    body: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        following = lines[i + 1] if i + 1 < len(lines) else ""
        if _UNDERLINE.match(line) and i + 2 < len(lines) and lines[i + 2] == line:
            i += 1  # an overline: the title and its underline come next
            continue
        underline = _UNDERLINE.match(following)
        if (
            line.strip()
            and not line.startswith(" ")
            and not _UNDERLINE.match(line)
            and underline
            and len(following.strip()) >= len(line.strip())
        ):
            if title is not None:
                yield Section(title, level, body)
            title, level, body = line.strip(), underline.group(1), []
            i += 2
            continue
        body.append(line)
        i += 1
    if title is not None:
        yield Section(title, level, body)


def faq_pairs(faq_dir: Path) -> list[tuple[str, str, str]]:
    """(file stem, question, answer) of every FAQ question with a real answer."""
    pairs: list[tuple[str, str, str]] = []
    for path in sorted(faq_dir.glob("*.rst.txt")):
        if path.name.startswith("index"):
            continue
        question: str | None = None
        answer: list[str] = []
        stem = path.name.split(".")[0]
        for section in sections(path.read_text(encoding="utf-8")):
            if section.level in "-=" and question is not None:
                pairs.append((stem, question, clean(answer)))
                question, answer = None, []
            if section.level == "-":
                question, answer = clean([section.title]), list(section.body)
            elif question is not None:  # a sub-heading inside an answer
                answer += ["", section.title, "", *section.body]
        if question is not None:
            pairs.append((stem, question, clean(answer)))
    return [p for p in pairs if len(p[2].split()) >= ANSWER_MIN_WORDS]


def distractor_sections(sources: Path) -> list[tuple[str, str]]:
    """(key, "title\\n\\nbody") of every reference, tutorial and HOWTO section of fitting size."""
    found: list[tuple[str, str]] = []
    low, high = DISTRACTOR_WORDS
    for folder in ("library", "howto", "tutorial", "reference"):
        for path in sorted((sources / folder).glob("*.rst.txt")):
            for n, section in enumerate(sections(path.read_text(encoding="utf-8"))):
                text = f"{clean([section.title])}\n\n{clean(section.body)}"
                if low <= len(text.split()) <= high:
                    found.append((f"{folder}/{path.name}#{n}", text))
    return found


def _stable_order(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def build(sources: Path, distractors: int) -> dict[str, object]:
    """The collection as JSON: opaque document ids in a fixed shuffled order."""
    pairs = faq_pairs(sources / "faq")
    pool = sorted(distractor_sections(sources), key=lambda item: _stable_order(item[0]))
    keyed: list[tuple[str, str, str | None]] = [
        (f"faq/{stem}#{n}", answer, question) for n, (stem, question, answer) in enumerate(pairs)
    ]
    keyed += [(key, text, None) for key, text in pool[:distractors]]
    keyed.sort(key=lambda item: _stable_order(item[0]))
    documents: dict[str, str] = {}
    queries: dict[str, str] = {}
    qrels: dict[str, dict[str, int]] = {}
    for index, (_, text, question) in enumerate(keyed, start=1):
        doc_id = f"d{index:05d}"
        documents[doc_id] = text
        if question is not None:
            query_id = f"q{len(queries) + 1:04d}"
            queries[query_id] = question
            qrels[query_id] = {doc_id: 1}
    # Queries in the FAQ's own order is not needed; sorted ids keep the file stable.
    return {
        "name": "python-faq",
        "source": "Python 3.11 documentation (Debian python3.11-doc): FAQ, references, "
        "tutorial, HOWTOs",
        "documents": documents,
        "queries": queries,
        "qrels": qrels,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    make = sub.add_parser("build", help="build the collection from the documentation sources")
    make.add_argument("sources", type=Path, help="the _sources folder of the HTML docs")
    make.add_argument("--out", type=Path, default=DATA_FILE)
    make.add_argument("--distractors", type=int, default=DISTRACTORS)
    args = parser.parse_args(argv)
    data = build(args.sources, args.distractors)
    raw = json.dumps(data, ensure_ascii=False, sort_keys=True, indent=0).encode()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(lzma.compress(raw, preset=9 | lzma.PRESET_EXTREME))
    documents = data["documents"]
    queries = data["queries"]
    assert isinstance(documents, dict) and isinstance(queries, dict)
    print(
        f"{args.out}: {len(documents)} documents, {len(queries)} queries, "
        f"{len(raw) / 1024:.0f} KiB of JSON, {args.out.stat().st_size / 1024:.0f} KiB compressed"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
