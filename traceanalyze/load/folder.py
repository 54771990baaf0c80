"""A folder of traces mixed with other files: load what is a trace, say why the rest is not.

Content decides, not the name: every visible file is looked at (its first chunk, decompressed
when it is gzip data), and those that are not JSON, or are JSON of another kind, are skipped
with their reason. A file that is a trace but damaged (truncated, corrupt) still fails the
load: dropping a rank silently would change every figure computed across ranks.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

from traceanalyze.errors import EmptyTraceError, NotATraceError, TraceAnalyzeError, TraceReadError
from traceanalyze.load.chunks import first_look
from traceanalyze.trace import Skipped, Trace

# Files a capture writes beside its traces.
KNOWN_NOT_TRACES = frozenset({"manifest.json"})

LoadEach = Callable[[Sequence[Path]], list[Trace]]


def listing(folder: Path) -> list[Path]:
    """The entries of ``folder``, sorted by name."""
    try:
        return sorted(folder.iterdir())
    except OSError as exc:
        raise TraceReadError(
            f"cannot list the folder ({exc.strerror})",
            folder,
            "Make the folder readable for this user, or pass the trace files.",
        ) from None


def candidates(folder: Path) -> list[Path]:
    """The visible files directly inside ``folder``, sorted by name."""
    return [
        p
        for p in listing(folder)
        if p.is_file() and not p.name.startswith(".") and p.name not in KNOWN_NOT_TRACES
    ]


def sort_files(folder: Path) -> tuple[list[Path], list[Skipped]]:
    """The files of ``folder`` that look like traces (by their first chunk) and those skipped,
    each with why; no traces at all is an :class:`EmptyTraceError` naming what was skipped."""
    skipped: list[Skipped] = []
    files = []
    for path in candidates(folder):
        reason = _not_a_trace(path)
        if reason is None:
            files.append(path)
        else:
            skipped.append(Skipped(path, reason))
    if not files:
        raise _no_traces(folder, skipped)
    return files, skipped


def load_traces(folder: Path, load_each: LoadEach) -> tuple[list[Trace], list[Skipped]]:
    """The traces in ``folder`` and the files skipped, each with why."""
    files, skipped = sort_files(folder)
    kept, traces = load_dropping(files, files, load_each, skipped)
    if not kept:
        raise _no_traces(folder, skipped)
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
            skipped.append(Skipped(bad, _reason(error, bad)))
    return [], []


def _no_traces(folder: Path, skipped: Sequence[Skipped]) -> EmptyTraceError:
    listed = "; ".join(f"{s.path.name}: {s.reason}" for s in skipped) or "it is empty"
    return EmptyTraceError(
        f"the folder holds no traces ({listed})",
        folder,
        "Point at the folder torch.profiler wrote, or at a trace file.",
    )


def _not_a_trace(path: Path) -> str | None:
    try:
        first_look(path)
    except NotATraceError as error:
        return _reason(error, path)
    except TraceReadError as error:
        return _reason(error, path)
    except TraceAnalyzeError:
        return None  # a damaged trace: loading it reports the problem
    except OSError as exc:
        return f"cannot be read ({os.strerror(exc.errno or 0)})"
    return None


def _reason(error: TraceAnalyzeError, path: Path) -> str:
    """The error's message without the file name and the fix (the warning names the file)."""
    text = str(error).removeprefix(f"{path}: ")
    if error.fix:
        text = text.removesuffix(" " + error.fix.rstrip(".") + ".")
    return text.rstrip(".")
