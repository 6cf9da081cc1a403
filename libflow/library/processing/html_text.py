"""html: the text a reader sees (selectolax, the lexbor HTML5 parser), without scripts and styles.

The title comes first, then the body, a line per block (paragraph, heading, list item, table
row, ...), inline elements kept within their words. Elements counted in the bytes (every
tag starts with ``<``) must be within MAX_HTML_TAGS before the parser builds its tree.
"""

from __future__ import annotations

import codecs
import re
from pathlib import Path

from selectolax.lexbor import LexborHTMLParser, LexborNode

from libflow.library.processing.budgets import MAX_HTML_TAGS, BudgetExceeded
from libflow.library.processing.extracted import Extraction, Segment, TextBudget, clean
from libflow.library.processing.plain_text import (
    BOMS,
    decode_text,
    read_text_bytes,
    refuse_binary,
)

# Never shown to a reader: code, styles, embedded documents and pictures.
_HIDDEN = "head, script, style, noscript, template, svg, math, iframe, object, canvas"
# Elements that start a new line (HTML's block-level and table elements).
_BLOCKS = (
    "address, article, aside, blockquote, br, caption, dd, details, dialog, div, dl, dt, "
    "fieldset, figcaption, figure, footer, form, h1, h2, h3, h4, h5, h6, header, hr, li, main, "
    "nav, ol, p, pre, section, summary, table, tr, ul"
)
_CELLS = "td, th"
# Where the HTML standard looks for a declared encoding: the first 1024 bytes.
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9._:-]+)""", re.I)
_SPACES = re.compile(r"[^\S\n]+")


def extract_html(path: Path, budget: TextBudget) -> Extraction:
    """The page's title and visible text as one segment."""
    data = read_text_bytes(path)
    refuse_binary(data)
    if data.count(b"<") > MAX_HTML_TAGS:
        raise BudgetExceeded(f"the html has more than {MAX_HTML_TAGS:,} tags")
    tree = LexborHTMLParser(_decode(data))
    title_node = tree.css_first("title")
    title = title_node.text(strip=True) if title_node is not None else ""
    for hidden in tree.css(_HIDDEN):
        hidden.decompose()
    body = tree.body
    text = _visible_text(body) if body is not None else ""
    if title and not text.startswith(title):
        text = f"{title}\n{text}"
    return Extraction([Segment(clean(budget.take(text)), None)], None)


def _decode(data: bytes) -> str:
    """The page's characters: a BOM, then a declared charset, then text detection."""
    if any(data.startswith(bom) for bom, _ in BOMS):
        return decode_text(data)
    declared = _META_CHARSET.search(data[:1024])
    if declared is not None:
        try:
            codec = codecs.lookup(declared.group(1).decode("ascii"))
        except LookupError:
            pass
        else:
            return data.decode(codec.name, errors="replace")
    return decode_text(data)


def _visible_text(body: LexborNode) -> str:
    """The text under ``body``, a line per block, whitespace collapsed as a browser does."""
    for block in body.css(_BLOCKS):
        block.insert_before("\n")
        block.insert_after("\n")
    for cell in body.css(_CELLS):
        cell.insert_before(" ")
    raw = body.text(deep=True, separator="")
    lines = (_SPACES.sub(" ", line).strip() for line in raw.split("\n"))
    return "\n".join(line for line in lines if line)
