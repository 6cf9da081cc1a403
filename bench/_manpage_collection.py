"""The retrieval benchmark's second test collection: man page descriptions over man pages.

A known-item collection built when the benchmark runs from the English man pages installed
on the machine (``/usr/share/man/man1`` to ``man8``); nothing is shipped, man pages being
under many licences. Each query is a page's one-line description, the text after ``\\-`` on
its NAME line ("copy files and directories"); its one relevant document (relevance 1) is
that page as ``groff`` renders it for a terminal, without its NAME section (which holds the
query word for word) and cut to its first MAX_BODY_WORDS words. The other documents are
other pages, rendered the same way. One of those may also answer a query (``install``
copies files too), unjudged: every mode is scored against the same judgements, so that
costs all modes alike.

Which pages: every page that is a file (not a symlink, not a ``.so`` include) whose
description has MIN_DESCRIPTION_WORDS words or more, is English, is not help2man's "manual
page for ..." and is the first (by path) of the pages sharing it; and whose rendered body
has MIN_BODY_WORDS words or more. They are taken in a seeded hashed order of their paths,
at most FAMILY_SHARE of the documents from one family (the name's first word: ``gcloud``,
``git``, ``systemd``): this machine has 16,600 generated ``gcloud`` pages, which would
otherwise be most of the collection. QUERIES of the pages taken, chosen in a second hashed
order, are the known items; the others are distractors. A page's place in either order
depends on its path alone, so the same pages installed give the same collection, and a page
more or less changes little.

``python -m bench._manpage_collection [--root DIR] [--queries N] [--documents N]`` builds
it and prints its size and a few queries.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from bench._common import BenchError
from bench._faq_collection import Collection

NAME = "manpages"
MAN_ROOT = Path("/usr/share/man")
# The sections' folders directly under the root hold the English pages; translations are
# in per-language folders (de/man1, ...), which are not read.
SECTIONS = tuple(f"man{n}" for n in range(1, 9))
SEED = "libflow-manpages-1"
QUERIES = 300
DOCUMENTS = 2000
MIN_DESCRIPTION_WORDS = 4  # "list operations" or "format a file" is no known item
MIN_BODY_WORDS = 80
# Words kept of a rendered page: its synopsis and the start of its description, two or three
# of the embedder's passages (5,047 for 2,000 pages, the FAQ's collection 3,645), so that a
# run takes about as long as the FAQ's; whole pages average about 1,000 words here.
MAX_BODY_WORDS = 300
# At most this share of the documents from one family (40 of 2,000).
FAMILY_SHARE = 0.02
RENDER_TIMEOUT = 60.0
RENDER_BATCH = 64
# groff much as man-db runs it for a terminal, with tables (-t), UTF-8 input (-K), no colours or
# overstrikes (-P-cbou), 80 columns, and no hyphenation (-rHY=0, for the man macros; mdoc
# pages still hyphenate, joined again in ``body``).
GROFF = ("groff", "-Kutf-8", "-t", "-mandoc", "-Tutf8", "-rLL=80n", "-rLT=80n", "-rHY=0")
GROFF_POSTPROCESSOR = "-P-cbou"

_HEADING = re.compile(r'^\.\s*S[Hh]\s+"?([^"]*?)"?\s*$')
_COMMENT = re.compile(r"^[.']\s*\\\"")
_MDOC_NAME = re.compile(r"^\.\s*Nm\b\s*(.*)$")
_MDOC_DESCRIPTION = re.compile(r"^\.\s*Nd\s+(.*)$")
_FONT_MACRO = re.compile(r"^\.\s*(?:[BIR]{1,2}|SM|SB)\s+(.*)$")
# The dash between a page's names and its description: \- (or an em or en dash) with space
# around it; a dash inside a name ("gcloud access\-context\-manager") has none.
_SEPARATOR = re.compile(r"(?<!\S)(?:\\-|\\\(em|\\\(en|\\\[em\]|-|\u2014)(?=\s)")
_ESCAPES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\\f(?:\[[^\]]*\]|\(..|.)"), ""),  # font changes
    (re.compile(r"\\s[-+]?\d+"), ""),  # size changes
    (re.compile(r"\\\((?:lq|rq|dq)|\\\*\((?:lq|rq)|\\\*\[(?:lq|rq)\]"), '"'),
    (re.compile(r"\\\((?:aq|oq|cq)"), "'"),
    (re.compile(r"\\\((?:em|en|hy|mi)|\\\[(?:em|en|hy|mi)\]"), "-"),
    (re.compile(r"\\\*(?:\[[^\]]*\]|\(..|.)|\\\(..|\\\[[^\]]*\]"), ""),  # other strings, glyphs
    (re.compile(r"\\[&:%|^,/c)]"), ""),  # zero-width escapes
    (re.compile(r"\\[ ~0]"), " "),
    (re.compile(r"\\-"), "-"),
)


@dataclass(frozen=True, slots=True)
class Page:
    """An installed man page and what its NAME line says."""

    path: Path
    key: str  # the path under the root, as the seeded order reads it
    description: str

    @property
    def family(self) -> str:
        """The first word of the page's name: ``git`` for git-rebase.1, ``gcloud``, ``evp``."""
        return re.split(r"[-_.:@]", self.path.name)[0].lower()


# -- the NAME line ----------------------------------------------------------------------------


def unescape(text: str) -> str:
    """Roff text as a reader sees it, in one line: escapes replaced or dropped."""
    for pattern, replacement in _ESCAPES:
        text = pattern.sub(replacement, text)
    return " ".join(text.replace("\\e", "\\").split())


def name_section(source: str) -> str:
    """The raw text of the page's NAME section, its lines joined (mdoc's .Nm/.Nd as man's)."""
    parts: list[str] = []
    inside = False
    for line in source.splitlines():
        heading = _HEADING.match(line)
        if heading:
            if inside:
                break
            inside = heading.group(1).strip().upper() == "NAME"
            continue
        if not inside or _COMMENT.match(line):
            continue
        if mdoc := _MDOC_DESCRIPTION.match(line):
            parts.append("\\- " + mdoc.group(1))
        elif mdoc := _MDOC_NAME.match(line):
            parts.append(mdoc.group(1))
        elif font := _FONT_MACRO.match(line):
            parts.append(font.group(1).replace('"', ""))
        elif not line.startswith((".", "'")):
            parts.append(line)
    return " ".join(parts)


def description(source: str) -> str | None:
    """The text after the dash on the NAME line; None without one, or with several entries."""
    found = _SEPARATOR.split(name_section(source), maxsplit=1)
    if len(found) < 2:
        return None
    text = found[1]
    if _SEPARATOR.search(text):
        # "bzip2 \- a compressor  bzcat \- decompresses": several pages' lines in one
        return None
    return unescape(text) or None


def is_query(text: str) -> bool:
    """Whether a description makes a known-item query: long enough, English, not boilerplate."""
    words = text.split()
    letters = [c for c in text if c.isalpha()]
    return (
        len(words) >= MIN_DESCRIPTION_WORDS
        and bool(letters)
        and sum(c.isascii() for c in letters) >= 0.95 * len(letters)
        and not text.lower().startswith("manual page for")
    )


def _source(path: Path) -> str:
    raw = path.read_bytes()
    if path.suffix == ".gz":
        raw = gzip.decompress(raw)
    return raw.decode("utf-8", errors="replace")


def scan(root: Path = MAN_ROOT) -> list[Page]:
    """Every page file under the root's section folders with a description, by path."""
    pages: list[Page] = []
    for section in SECTIONS:
        folder = root / section
        if not folder.is_dir():
            continue
        for path in sorted(folder.iterdir()):
            if path.is_symlink() or not path.is_file():
                continue
            try:
                source = _source(path)
            except (OSError, EOFError, gzip.BadGzipFile):
                continue
            if source.lstrip().startswith(".so "):
                continue  # an alias: ".so man1/other.1"
            text = description(source)
            if text is not None:
                pages.append(Page(path, path.relative_to(root).as_posix(), text))
    return pages


def _normal(text: str) -> str:
    return " ".join(text.lower().rstrip(". ").split())


def candidates(pages: Iterable[Page]) -> list[Page]:
    """The pages that can be known items, in the seeded order; one page for each description.

    Pages sharing a description (alpha, beta and GA ``gcloud`` pages, a program's aliases)
    keep the first by path and drop the others altogether, so no kept page is an unjudged
    copy of a relevant one.
    """
    seen: set[str] = set()
    kept: list[Page] = []
    for page in sorted(pages, key=lambda p: p.key):
        normal = _normal(page.description)
        if normal in seen:
            continue
        seen.add(normal)
        if is_query(page.description):
            kept.append(page)
    return sorted(kept, key=lambda p: _stable_order(p.key))


def _stable_order(key: str) -> str:
    return hashlib.sha256(f"{SEED}:{key}".encode()).hexdigest()


# -- the rendered page ------------------------------------------------------------------------


def render(path: Path) -> str | None:
    """The page as groff renders it for an 80-column terminal; None if groff failed."""
    try:
        source = _source(path).encode()
        done = subprocess.run(
            [*GROFF, GROFF_POSTPROCESSOR],
            input=source,
            capture_output=True,
            timeout=RENDER_TIMEOUT,
            # a ".so" inside a page names a file relative to the root
            cwd=path.parent.parent,
            check=False,
        )
    except (OSError, EOFError, gzip.BadGzipFile, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    return done.stdout.decode("utf-8", errors="replace")


def body(rendered: str) -> str | None:
    """The rendered page without its header, footer and NAME section; None without NAME.

    Lines are dedented and their justification spaces collapsed; a word hyphenated at a
    line's end (U+2010, which groff's UTF-8 output writes only there) is joined again.
    """
    lines = [" ".join(line.split()) if line.strip() else "" for line in rendered.splitlines()]
    headings = [i for i, line in enumerate(rendered.splitlines()) if line[:1].strip()]
    if len(headings) < 3:
        return None
    header, footer = headings[0], headings[-1]  # "CP(1)  User Commands  CP(1)", the date
    try:
        name = next(i for i in headings if lines[i] == "NAME")
    except StopIteration:
        return None
    after = next((i for i in headings if i > name), footer)
    kept = lines[header + 1 : name] + lines[after:footer]
    text = "\n".join(kept)
    text = re.sub("\u2010\n(\\S)", r"\1", text)
    text = text.replace("\u2010", "-").replace("\u2212", "-")
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def cut(text: str, words: int = MAX_BODY_WORDS) -> str:
    """The first ``words`` words of ``text``, its lines kept."""
    kept: list[str] = []
    count = 0
    for line in text.splitlines():
        line_words = line.split()
        if count + len(line_words) > words:
            kept.append(" ".join(line_words[: words - count]))
            break
        kept.append(line)
        count += len(line_words)
    return "\n".join(kept).strip()


def _document(page: Page) -> str | None:
    rendered = render(page.path)
    text = body(rendered) if rendered is not None else None
    if text is None or len(text.split()) < MIN_BODY_WORDS:
        return None
    return cut(text)


def documents(pages: Sequence[Page], wanted: int, cap: int) -> Iterator[tuple[Page, str]]:
    """Pages with their documents in order, at most ``cap`` a family, until ``wanted``.

    Pages are rendered in parallel batches but taken strictly in order, so the result does
    not depend on the machine's speed.
    """
    families: Counter[str] = Counter()
    taken = 0
    workers = os.cpu_count() or 1
    position = 0
    with ThreadPoolExecutor(workers) as pool:
        while taken < wanted and position < len(pages):
            batch: list[Page] = []
            while len(batch) < RENDER_BATCH and position < len(pages):
                page = pages[position]
                position += 1
                # the cap counts pages taken; one skipped for it is never rendered
                pending = sum(1 for p in batch if p.family == page.family)
                if families[page.family] + pending < cap:
                    batch.append(page)
            for page, text in zip(batch, pool.map(_document, batch), strict=True):
                if text is None or families[page.family] >= cap or taken >= wanted:
                    continue
                families[page.family] += 1
                taken += 1
                yield page, text


def build(
    root: Path = MAN_ROOT, queries: int = QUERIES, total: int = DOCUMENTS, name: str = NAME
) -> Collection:
    """The collection: ``total`` pages taken, ``queries`` of them known items.

    The known items are the first pages taken in a second hashed order, so that each page
    taken is as likely to be one (the family cap, met early by ``gcloud``, would otherwise
    make its pages the first queries). Document ids ``d00001``... follow a third, so an id
    says nothing of whether its page is a query's.
    """
    if shutil.which(GROFF[0]) is None:
        raise BenchError("the man page collection needs groff (apt-get install groff)")
    pool = candidates(scan(root))
    taken = list(documents(pool, total, cap=max(1, round(FAMILY_SHARE * total))))
    if len(taken) < queries + 1:
        raise BenchError(
            f"{root}: {len(taken)} man pages fit the collection, more than {queries} are needed"
        )
    ids = {
        page.key: f"d{n:05d}"
        for n, (page, _) in enumerate(
            sorted(taken, key=lambda item: _stable_order(f"doc:{item[0].key}")), start=1
        )
    }
    docs = {ids[page.key]: text for page, text in sorted(taken, key=lambda t: ids[t[0].key])}
    query_texts: dict[str, str] = {}
    qrels: dict[str, dict[str, int]] = {}
    known = sorted(taken, key=lambda item: _stable_order(f"query:{item[0].key}"))[:queries]
    for n, (page, _) in enumerate(known, start=1):
        query_texts[f"q{n:04d}"] = page.description
        qrels[f"q{n:04d}"] = {ids[page.key]: 1}
    return Collection(name, docs, query_texts, qrels)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=MAN_ROOT)
    parser.add_argument("--queries", type=int, default=QUERIES)
    parser.add_argument("--documents", type=int, default=DOCUMENTS)
    parser.add_argument("--show", type=int, default=10, help="queries to print")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    collection = build(args.root, args.queries, args.documents)
    seconds = time.perf_counter() - started
    words = [len(text.split()) for text in collection.documents.values()]
    print(
        f"{collection.name}: {len(collection.documents)} documents "
        f"({sum(words) / len(words):.0f} words on average), {len(collection.queries)} queries, "
        f"built in {seconds:.0f} s"
    )
    for q, text in list(collection.queries.items())[: args.show]:
        print(f"  {q} {text!r} -> {next(iter(collection.qrels[q]))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
