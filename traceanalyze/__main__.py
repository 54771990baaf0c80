"""The ``traceanalyze`` command's entry: its console script and ``python -m traceanalyze``.

The CLI is imported inside the Ctrl-C handler: its imports (click, Polars, NumPy, every
command) take about half a second of a short run, and Ctrl-C during them ends the command like
Ctrl-C later, with one line and exit status 130, not a Python traceback.
"""

import signal
import sys
from types import FrameType

from traceanalyze.errors import INTERRUPTED_EXIT


def run() -> None:
    """Run the ``traceanalyze`` command on ``sys.argv``."""
    interrupted = False

    def on_ctrl_c(signum: int, frame: FrameType | None) -> None:
        nonlocal interrupted
        interrupted = True
        raise KeyboardInterrupt

    # The command owns its process, so it may set the handler (the library never does): it
    # remembers the signal, because an extension module whose import Ctrl-C cut short may raise
    # its own error instead (NumPy: "Importing the numpy C-extensions failed").
    try:
        signal.signal(signal.SIGINT, on_ctrl_c)  # inside: Python's own handler may raise first
        from traceanalyze.cli import main

        main(prog_name="traceanalyze")
    except Exception:
        if not interrupted:
            raise
        _aborted()
    except KeyboardInterrupt:
        _aborted()


def _aborted() -> None:
    print("Aborted!", file=sys.stderr)
    sys.exit(INTERRUPTED_EXIT)


if __name__ == "__main__":
    run()
