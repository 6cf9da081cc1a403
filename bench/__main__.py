"""``python -m bench``: every benchmark, one table."""

import sys

from bench.run import main

sys.exit(main())
