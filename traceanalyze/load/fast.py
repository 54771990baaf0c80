"""The C path: the optional ``_scan`` extension turns the file into column pieces directly.

It is used when it was built (``pip install`` compiles it) and declines, by raising
:class:`Declined`, whatever it does not handle exactly as the msgspec path would (errors,
B/E phases, unusual types, Ascend tasks, ``displayTimeUnit: "ns"``); the caller then loads the
file with the msgspec path.

:func:`scan_file` is one scanner over the whole file; :mod:`traceanalyze.load.parallel` runs one
per chunk of a larger file on several threads and falls back to :func:`scan_file`.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import polars as pl

from traceanalyze.load.decode import TraceDocument
from traceanalyze.load.scan_tables import KINDS as SCAN_KINDS
from traceanalyze.load.scan_tables import category_codes, export_type
from traceanalyze.load.scanned import (
    COLUMNS,
    FLOATS,
    LEGACY_CATS,
    TEXT_ARGS,
    Piece,
    Scanned,
)
from traceanalyze.load.source import (
    MAX_ITEM_BYTES,
    Blocks,
    ByteProgress,
    UntilCut,
    chunks,
    is_gzip,
    item_too_long,
)
from traceanalyze.schema import null_series

try:
    from traceanalyze.load import _scan  # type: ignore[attr-defined]
except ImportError:  # not built: the msgspec path does everything
    _scan = None

AVAILABLE = _scan is not None

# Category -> kind code of _scan.c, and a part's kind code -> its kind; both from the table
# _scan.c's own constants are generated from (scan_tables.py).
KINDS = category_codes(LEGACY_CATS)
_KIND_NAMES = {code: kind.name for code, kind in enumerate(SCAN_KINDS) if kind.kept}
_HEADER = msgspec.json.Decoder(TraceDocument)
_TAG_NULL, _TAG_INT, _TAG_FLOAT, _TAG_STR = 0, 1, 2, 3


class Declined(Exception):  # noqa: N818 (not an error: the other path takes over)
    """The C scanner does not handle this file; load it with the msgspec path."""


def scan_file(path: Path, progress: ByteProgress | None = None) -> Scanned:
    """Scan ``path`` with the C extension; raises Declined (or the read errors of
    :mod:`traceanalyze.load.source`)."""
    if _scan is None:
        raise Declined("the C scanner is not built")
    scanner = _scan.Scanner(KINDS)
    pieces = UntilCut(())
    try:
        if is_gzip(path):
            # a stream cut after whole JSON is scanned like any; one cut inside it leaves the
            # document open, which the scanner declines (the msgspec path then names the cut)
            pieces = UntilCut(chunks(path, progress))
            scanner.feed(_feed_pieces(scanner, pieces), True)
        else:
            blocks = Blocks(path, progress)
            for block in blocks:
                blocks.consume(scanner.feed(block, False))
            scanner.feed(blocks.rest(), True)
    except _scan.Unsupported as exc:
        raise Declined(str(exc)) from None
    except ItemTooLong:
        raise item_too_long(path) from None
    scanned = _scanned(scanner.result())
    scanned.gzip_cut = pieces.noted()
    return scanned


# Bytes of a new piece first joined to the tail the scanner left of the piece before.
_JOIN_BYTES = 64 * 1024


def _feed_pieces(scanner: Any, pieces: Iterable[bytes | memoryview]) -> bytes:
    """Feed inflated ``pieces`` in place, without copying them into one buffer; returns the
    bytes left unconsumed at the end. The tail a piece leaves (an event cut by the piece's
    end) is completed from the next piece's first bytes, joined in a small buffer that
    doubles until the scanner gets past the tail."""
    tail = b""
    for piece in pieces:
        view = memoryview(piece)
        start = 0
        if tail:
            take = min(len(piece), max(_JOIN_BYTES, len(tail)))
            while True:
                joined = tail + view[:take]
                used = scanner.feed(joined, False)
                if used > len(tail) or take == len(piece):
                    break
                take = min(len(piece), 2 * take)
            if used < len(joined) and take == len(piece) and used <= len(tail):
                tail = joined[used:]  # an item longer than this whole piece
                if len(tail) > MAX_ITEM_BYTES:
                    raise ItemTooLong
                continue
            start = used - len(tail)
        used = scanner.feed(view[start:], False)
        tail = bytes(view[start + used :])
    return tail


class ItemTooLong(Exception):  # noqa: N818 (turned into a TraceFormatError naming the file)
    """An item longer than MAX_ITEM_BYTES was being joined for the scanner."""


def _scanned(result: dict[str, Any]) -> Scanned:
    header = _header(result["header"])
    cats: list[str] = result["cats"]
    counts = np.frombuffer(result["counts"], dtype=np.int64)
    scanned = Scanned(
        header,
        counts={cat or "(none)": int(n) for cat, n in zip(cats, counts, strict=True)},
        has_events=result["has_events"],
        events=result["events"],
    )
    names = _Names(result)
    for part in result["parts"]:
        kind = _KIND_NAMES[part["kind"]]
        # The columns _scan.c exported, as Arrow arrays Polars takes without a copy (the text
        # columns one array each, the others one struct array); the few it left to Python
        # (_piece) are built here.
        table = pl.DataFrame(part["table"])
        texts: dict[str, Any] = part["texts"]
        columns = {
            c: table.get_column(c)
            if c in table.columns
            else pl.Series(texts[c]).alias(c)
            if c in texts
            else _piece(c, part, names)
            for c in COLUMNS[kind]
        }
        scanned.add(kind, cats[part["cat"]], columns)
    return scanned


class _Names:
    """The names table (id -> text) as a Series, made on first use: only the columns left to
    Python read it."""

    def __init__(self, result: dict[str, Any]) -> None:
        self._result = result
        self._series: pl.Series | None = None

    def series(self) -> pl.Series:
        if self._series is None:
            self._series = pl.Series("name", self._result["names"])
        return self._series


def _header(pairs: bytes) -> TraceDocument:
    try:
        return _HEADER.decode(b"{" + pairs + b"}")
    except msgspec.MsgspecError as exc:
        raise Declined(f"unusual metadata ({exc})") from None
    except RecursionError:  # the msgspec path names it
        raise Declined("metadata nested too deeply") from None


def _piece(column: str, part: dict[str, Any], names: _Names) -> Piece:
    """A tagged column _scan.c did not export (see scan_tables.EXPORTS): one never set, a float
    column with a text among its values, a text column with no text or with an integer among
    its values, or mixed values (ids written as text, a label)."""
    if column not in part:  # never set in this part: no buffers (see _scan.c's materialize)
        return _nulls(column, part["rows"])
    values_bytes, tags_bytes = part[column]
    values = np.frombuffer(values_bytes, dtype=np.int64)
    tags = np.frombuffer(tags_bytes, dtype=np.uint8)
    if column in FLOATS:  # with a text among them: read as the msgspec path reads it
        return pl.Series(
            column, _objects(values, tags, names.series()), dtype=pl.Float64, strict=False
        )
    if column in TEXT_ARGS:
        if not np.isin(tags, (_TAG_STR, _TAG_INT)).any():
            return null_series(column, len(tags), pl.String)  # most parts: no collective
        return _comm_text(column, values, tags, names.series())
    return _objects(values, tags, names.series())


# The type of a column of nulls, by its export type (scan_tables.export_type); None: a list
# (a label, typed by the frames like any Python piece).
_NULL_TYPES: dict[str, type[pl.DataType] | None] = {
    "int": pl.Int64,
    "int_only": pl.Int64,
    "float": pl.Float64,
    "text": pl.String,
    "python": None,
}


def _nulls(column: str, rows: int) -> Piece:
    dtype = _NULL_TYPES[export_type(column)]
    return [None] * rows if dtype is None else null_series(column, rows, dtype)


def _comm_text(
    column: str, values: np.ndarray[Any, Any], tags: np.ndarray[Any, Any], names: pl.Series
) -> pl.Series:
    """A collective's text arg as the msgspec path types it: the text, or an integer's digits
    (anything else null)."""
    is_text, is_int = tags == _TAG_STR, tags == _TAG_INT
    # Series[ids], not Series.gather: gather runs a one-expression query (~70 us each)
    text = names[pl.Series(np.where(is_text, values, 0))].alias(column)
    text = pl.Series(values).cast(pl.String).zip_with(pl.Series(is_int), text)
    return text.alias(column).set(pl.Series(~(is_text | is_int)), None)


def _objects(
    values: np.ndarray[Any, Any], tags: np.ndarray[Any, Any], names: pl.Series
) -> list[Any]:
    """Python values as msgspec would have decoded them, for the rare mixed columns."""
    floats = values.view(np.float64)
    out: list[Any] = []
    for value, tag, number in zip(values.tolist(), tags.tolist(), floats.tolist(), strict=True):
        if tag == _TAG_INT:
            out.append(value)
        elif tag == _TAG_FLOAT:
            out.append(number)
        elif tag == _TAG_STR:
            out.append(names[value])
        else:
            out.append(None)
    return out
