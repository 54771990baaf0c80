"""Files of other profilers' formats, told apart before a parse: an Nsight Systems report or
its SQLite export is not a broken JSON file but another tool's file, and the error says what
to record instead.

A file is looked at only when it does not start like JSON or gzip (a trace with an odd name is
still read); then its name's suffix or its first bytes name the format (a table of data).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from traceanalyze.errors import NotATraceError

_RECORD = (
    "traceanalyze reads the Chrome trace torch.profiler writes: record the run with "
    "torch.profiler and save it with prof.export_chrome_trace('trace.json.gz') (or "
    "tensorboard_trace_handler)"
)


@dataclass(frozen=True)
class Foreign:
    """A format that is not a Kineto trace: what it is, and how to recognise it."""

    what: str
    suffixes: tuple[str, ...] = ()
    magic: bytes | None = None  # the first bytes of every such file


# Checked in order; the first that matches names the file.
FOREIGN: tuple[Foreign, ...] = (
    Foreign("an Nsight Systems report", (".nsys-rep", ".qdrep", ".qdstrm")),
    Foreign("an Nsight Compute report", (".ncu-rep",)),
    Foreign(
        "an SQLite database (Nsight Systems' `nsys export --type sqlite` writes these)",
        (".sqlite", ".sqlite3"),
        b"SQLite format 3\x00",
    ),
)
_LOOK_BYTES = 16
# First bytes of a file that may be a trace: JSON (after white space, a BOM) or gzip.
_TRACE_STARTS = (b"{", b"[", b"\x1f\x8b")


def foreign_format(path: Path, head: bytes) -> Foreign | None:
    """The format ``path`` (whose first bytes are ``head``) is in, where it is one of
    :data:`FOREIGN` (None: it may be a trace)."""
    if head.lstrip(b" \t\r\n\xef\xbb\xbf").startswith(_TRACE_STARTS):
        return None
    name = path.name.lower()
    for known in FOREIGN:
        if name.endswith(known.suffixes) or (known.magic and head.startswith(known.magic)):
            return known
    return None


def refuse_foreign(path: Path) -> None:
    """A :class:`NotATraceError` naming the format when ``path`` is another tool's file (a
    file that cannot be read is left to the reader, which names the problem)."""
    try:
        with path.open("rb") as file:
            head = file.read(_LOOK_BYTES)
    except OSError:
        return
    known = foreign_format(path, head)
    if known is not None:
        raise NotATraceError(f"is {known.what}, not a PyTorch profiler trace", path, _RECORD)
