"""The child process that exports the local model to ONNX (``export_in_child``).

``python -m libflow.library.embeddings.exporting LOCATION DIRECTORY int8|fp32`` loads the model
into PyTorch, exports it into DIRECTORY and records it; its last line on stdout is the
export's record (``ExportedModel.to_json``). A model it cannot take exits with
EXPORT_REFUSED, the reason on stderr; a module missing with EXPORT_MISSING_MODULE, its name
on stderr.
"""

from __future__ import annotations

import sys
from pathlib import Path

from libflow.library.embeddings.local import EXPORT_MISSING_MODULE, EXPORT_REFUSED, export_here
from settings import SettingsError


def main(argv: list[str]) -> int:
    location, directory, kind = argv
    try:
        exported = export_here(location, Path(directory), int8=kind == "int8")
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
