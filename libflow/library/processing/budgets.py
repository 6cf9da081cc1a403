"""Every budget a file's processing runs under, in one place (README "Processing and search").

A file over one of them ends ``processing.status = failed`` with a message that names the
budget; the worker or server that processed it carries on. Each is checked before (or while)
the work that would exceed it is done, never by measuring a finished result.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Final

MIB: Final = 1024 * 1024

# -- what extraction reads ----------------------------------------------------------------
# txt/csv past this fail rather than index a silent prefix (read at most this much).
MAX_TEXT_FILE_BYTES: Final = 64 * MIB
MAX_ZIP_ENTRIES: Final = 10_000
# docx/pptx: bytes actually inflated while reading the package (media included), counted as
# they come out of the decompressor: declared sizes in the zip are only a first refusal.
MAX_UNZIPPED_BYTES: Final = 256 * MIB
# For entries over 1 MiB, by declared sizes; real office XML compresses about 5-30:1.
MAX_ZIP_RATIO: Final = 200
# docx/pptx: the package's XML as inflated (the parsers build a tree of all of it: about
# 130 bytes of memory a tag, so the tag count is what bounds their memory).
MAX_XML_BYTES: Final = 64 * MIB
MAX_XML_TAGS: Final = 4_000_000
# pdf pages, pptx slides, xlsx sheets.
MAX_PAGES: Final = 10_000
# xlsx: the cells of every sheet's rows, the empty ones a row or a gap between rows makes
# openpyxl yield included (a row may name its last cell at column 16,384, a gap a million
# rows); counted as they come, so a sheet of padding stops here rather than at the clock.
MAX_SPREADSHEET_CELLS: Final = 10_000_000
# html: elements, counted in the bytes before parsing. The DOM costs about 330 bytes an
# element (4 million took 1.3 GB, measured), so a million keeps a page under the child's memory.
MAX_HTML_TAGS: Final = 1_000_000
# Images: decoded pixels for a thumbnail (up to 4 bytes a pixel, twice over while resized).
MAX_SOURCE_PIXELS: Final = 64_000_000

# -- OCR (the `ocr` extra) -------------------------------------------------------------------
# Pages without a text layer that one pdf may have read by OCR: each takes about 3-6 s of one
# core (measured on a dense A4 page); a pdf with more fails before the first is read.
MAX_OCR_PAGES: Final = 100
# The longest side of what OCR reads, in pixels: a pdf page is rendered (at most 300 dpi) and
# an image scaled to it. 2,000 is what the OCR engine scales down to anyway; an A4 page is
# then about 170 dpi, and reading it adds up to about 600 MiB to the child (measured).
OCR_SIDE_PIXELS: Final = 2_000
OCR_MAX_DPI: Final = 300

# -- what extraction yields ---------------------------------------------------------------
# Characters of extracted text (about 4,000 pages of prose); stored whole for
# library_file_text, so also what one file may put in storage besides its bytes.
MAX_TEXT_CHARS: Final = 10_000_000
# Passages to embed and index: about 3 minutes of the local model on one core.
MAX_CHUNKS: Final = 5_000

# -- the child process that extracts and renders -------------------------------------------
# Address space the child may add to what it starts with (the libraries, about 300 MiB):
# room for a 64-megapixel thumbnail or MAX_XML_TAGS of parsed XML, and no more.
CHILD_MEMORY_BYTES: Final = 1024 * MIB
# Wall-clock seconds of extraction, chunking and thumbnail rendering (the child is killed
# then); its CPU-time limit is a little more, so an orphaned child ends by itself too.
EXTRACTION_SECONDS: Final = 120
# The same for pdfs and images, which OCR may read (MAX_OCR_PAGES pages at up to 6 s each).
OCR_EXTRACTION_SECONDS: Final = 600

# -- the processing job --------------------------------------------------------------------
# Download, extraction, embedding, indexing and thumbnail together; arq's own job time limit
# is a minute longer, a backstop only.
PROCESSING_SECONDS: Final = 15 * 60
# A running job refreshes its file's updated_at this often: its lease on the file.
HEARTBEAT_SECONDS: Final = 15.0
# A file "processing" whose lease was not refreshed for this long lost its worker (twelve
# missed heartbeats: a database hiccup does not hand a running file to a second job).
STUCK_AFTER: Final = timedelta(minutes=3)
# A file "pending" this long lost its job (a queue that lost it): it is queued again. Jobs
# may wait in a long queue, so this is longer than STUCK_AFTER.
LOST_JOB_AFTER: Final = timedelta(minutes=20)
# Starts that crashed (the child died) or were interrupted (the worker died) before the
# file is failed instead of being tried again.
MAX_ATTEMPTS: Final = 3

# -- lanes of the in-process queue ---------------------------------------------------------
# Documents of this size or more are processed in the large-files lane, one at a time, so
# they never hold the slots of small files (images are always small work: MAX_SOURCE_PIXELS).
LARGE_DOCUMENT_BYTES: Final = 4 * MIB

# -- library_file_text ---------------------------------------------------------------------
# Characters a workflow node gets back (read from the stored text, never re-extracted).
MAX_FILE_TEXT_CHARS: Final = 1_000_000


class BudgetExceeded(Exception):
    """A file goes over one of its budgets; str(err) is the user-facing message."""
