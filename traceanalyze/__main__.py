"""The ``traceanalyze`` command's entry: its console script and ``python -m traceanalyze``.

The CLI is imported inside the Ctrl-C handler: its imports (click, Polars, every command) take
about half a second of a short run, and Ctrl-C during them ends the command like Ctrl-C later,
with one line and exit status 130, not a Python traceback.
"""

import sys

from traceanalyze.errors import INTERRUPTED_EXIT


def run() -> None:
    """Run the ``traceanalyze`` command on ``sys.argv``."""
    try:
        from traceanalyze.cli import main

        main(prog_name="traceanalyze")
    except KeyboardInterrupt:
        print("Aborted!", file=sys.stderr)
        sys.exit(INTERRUPTED_EXIT)


if __name__ == "__main__":
    run()
