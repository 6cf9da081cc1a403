"""The child process that exports the local model to ONNX (``export_in_child``).

``python -m libflow.library.embeddings.exporting LOCATION DIRECTORY KIND`` (fp32, int8 or
openvino-int8: ``onnx_export.ExportKind``) loads the model
into PyTorch, exports it into DIRECTORY and records it; its last line on stdout is the
export's record (``ExportedModel.to_json``). A model it cannot take exits with
EXPORT_REFUSED, the reason on stderr; a module missing with EXPORT_MISSING_MODULE, its name
on stderr.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import get_args

from libflow.library.embeddings.local import EXPORT_MISSING_MODULE, EXPORT_REFUSED, export_here
from libflow.library.embeddings.onnx_export import ExportKind
from settings import SettingsError


def main(argv: list[str]) -> int:
    location, directory, kind = argv
    kinds: dict[str, ExportKind] = {k: k for k in get_args(ExportKind)}
    try:
        exported = export_here(location, Path(directory), kind=kinds[kind])
    except ModuleNotFoundError as err:
        print(err.name, file=sys.stderr)
        return EXPORT_MISSING_MODULE
    except SettingsError as err:
        print(str(err).replace("\n", " "), file=sys.stderr)
        return EXPORT_REFUSED
    print(exported.to_json())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
