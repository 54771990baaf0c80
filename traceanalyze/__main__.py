"""The ``traceanalyze`` command's entry: its console script and ``python -m traceanalyze``.

The CLI is imported inside the Ctrl-C handler: its imports (click, Polars, NumPy, every
command) take about half a second of a short run, and Ctrl-C during them ends the command like
Ctrl-C later, with one line and exit status 130, not a Python traceback.
"""

from __future__ import annotations

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
    def ignore_unraisable_ctrl_c(unraisable: sys.UnraisableHookArgs) -> None:
        # Ctrl-C in a callback whose exceptions CPython cannot raise (an import's module-lock
        # weakref): not a report of "Exception ignored"; the command goes on as if it came late.
        if not isinstance(unraisable.exc_value, KeyboardInterrupt):
            sys.__unraisablehook__(unraisable)

    sys.unraisablehook = ignore_unraisable_ctrl_c
    try:
        signal.signal(signal.SIGINT, on_ctrl_c)  # inside: Python's own handler may raise first
        from traceanalyze.cli import main

        main(prog_name="traceanalyze")
    except KeyboardInterrupt:
        _aborted()
    except SystemExit:
        raise
    except BaseException:
        # Polars (Rust) turns a Ctrl-C that lands in an import it makes into a panic, raised
        # as pyo3's PanicException (a BaseException) after Rust printed its report.
        if not interrupted:
            raise
        _aborted()
    finally:
        # The answer is written (or the abort said): a Ctrl-C in the interpreter's shutdown,
        # milliseconds long, is ignored, so that the process exits as the command did, its
        # output flushed, not through a handler that can no longer report it.
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def _aborted() -> None:
    print("Aborted!", file=sys.stderr)
    sys.exit(INTERRUPTED_EXIT)


if __name__ == "__main__":
    run()
