"""A preparation server that begins to say it is ready and then hangs, until its input ends
(run as ``python -m`` by test_processing)."""

import sys

if __name__ == "__main__":
    sys.stdout.buffer.write(b"rea")
    sys.stdout.flush()
    sys.stdin.read()
