"""``python -m libflow`` is the ``libflow`` command."""

import sys

from libflow.cli import main

sys.exit(main())
