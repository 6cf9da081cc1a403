"""The one lock around PDFium: it is not thread-safe, even across documents."""

from __future__ import annotations

import threading
from typing import Final

# Every pypdfium2 call in the process (text extraction, thumbnails), including the
# closing of its objects, happens while holding this.
PDFIUM_LOCK: Final = threading.Lock()
