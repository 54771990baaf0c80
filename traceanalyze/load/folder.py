"""A folder of traces mixed with other files: load what is a trace, say why the rest is not.

Content decides, not the name: :func:`traceanalyze.load.inputs.resolve` looks at every visible
file (its first chunk, decompressed when it is gzip data), and those that are not JSON, or are
JSON of another kind, are skipped with their reason. A file that is a trace but damaged
(truncated, corrupt) still fails the load: dropping a rank silently would change every figure
computed across ranks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from traceanalyze.errors import NotATraceError
from traceanalyze.load.inputs import Input, no_traces, reason_of
from traceanalyze.trace import Skipped, Trace

LoadEach = Callable[[Sequence[Path]], list[Trace]]


def load_traces(found: Input, load_each: LoadEach) -> tuple[list[Trace], list[Skipped]]:
    """The traces of the folder ``found`` and the files skipped, each with why."""
    skipped = list(found.skipped)
    kept, traces = load_dropping(found.files, found.files, load_each, skipped)
    if not kept:
        raise no_traces(found.path, skipped)
    return traces, skipped


def load_dropping(
    files: Sequence[Path], droppable: Sequence[Path], load_each: LoadEach, skipped: list[Skipped]
) -> tuple[list[Path], list[Trace]]:
    """``load_each`` of ``files``; one of ``droppable`` (files found in a folder listing) that
    turns out not to be a trace past its first chunk is dropped into ``skipped``, and the rest
    loaded again. Returns the files kept and their traces."""
    files = list(files)
    while files:
        try:
            return files, load_each(files)
        except NotATraceError as error:  # seen only past the first chunk (rare): drop, retry
            bad = error.path
            if bad not in files or bad not in droppable:
                raise
            files.remove(bad)
            skipped.append(Skipped(bad, reason_of(error, bad)))
    return [], []
