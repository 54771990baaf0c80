"""Write an annotated copy of a Chrome trace: the file's own bytes, event by event, with
members added to some GPU activities' ``args`` and new events appended to ``traceEvents``.

Events are kept as their raw JSON text (msgspec ``Raw``): only the events that gain members
are decoded and encoded again, and then only to the depth of their ``args``, so every number
the loader reads (times, ids) keeps its digits. The copy is written to a temporary file beside
the target and renamed, so a failed write leaves no half file; ``.gz`` targets are gzipped.
"""

from __future__ import annotations

import contextlib
import gzip
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

import msgspec
import polars as pl

from traceanalyze import files
from traceanalyze.errors import TraceFormatError, TraceReadError
from traceanalyze.load.scanned import GPU_KINDS, times_ns

GZIP_MAGIC = b"\x1f\x8b"
# Level 3: on the 175 MB bench trace 0.9 s and 15.6 MB, against 2.4 s and 11 MB at 6.
GZIP_LEVEL = 3
# Events joined per write: large enough that writes are few, small enough to stay cheap.
_BATCH = 65536
# How an annotation names a GPU activity (see :func:`with_occurrence`).
ACTIVITY_KEY = ["name", "ts_ns", "dur_ns", "occurrence"]
_FIX = "Annotate a Chrome trace written by torch.profiler (a JSON object with traceEvents)."


class _Event(msgspec.Struct):
    """The fields that find a GPU activity among the events (the rest is skipped)."""

    cat: Any = None
    ph: Any = None
    name: Any = None
    ts: msgspec.Raw = msgspec.Raw(b"null")
    dur: msgspec.Raw = msgspec.Raw(b"null")


def read_document(path: Path) -> tuple[dict[str, msgspec.Raw] | None, msgspec.Raw]:
    """The top-level members of the trace at ``path`` (None for a bare array of events, which
    the Chrome format allows) and its traceEvents list, both raw."""
    try:
        data = path.read_bytes()
        if data.startswith(GZIP_MAGIC):
            data = gzip.decompress(data)
    except (OSError, EOFError) as exc:
        raise TraceReadError(f"cannot be read ({exc})", path, _FIX) from None
    try:
        if data.lstrip()[:1] == b"[":
            return None, msgspec.json.decode(data, type=msgspec.Raw)
        top = msgspec.json.decode(data, type=dict[str, msgspec.Raw])
        return top, top["traceEvents"]
    except (msgspec.DecodeError, KeyError):
        raise TraceFormatError("is not a JSON object with a traceEvents list", path, _FIX) from None


def activity_positions(trace_events: msgspec.Raw) -> pl.DataFrame:
    """Each GPU activity event (a kernel, memcpy or memset complete event, as the loader keeps
    them): ``index`` in traceEvents, ``name``, ``ts_ns``, ``dur_ns`` and ``occurrence``."""
    light = msgspec.json.decode(trace_events, type=list[_Event])
    kept = [i for i, e in enumerate(light) if e.ph == "X" and e.cat in GPU_KINDS]
    frame = pl.DataFrame(
        {
            "index": kept,
            "name": [str(light[i].name) for i in kept],
            "ts": [bytes(light[i].ts).strip(b'"').decode() for i in kept],
            "dur": [bytes(light[i].dur).strip(b'"').decode() for i in kept],
        },
        schema={"index": pl.Int64, "name": pl.String, "ts": pl.String, "dur": pl.String},
    )
    # A missing time reads as the JSON null: the loader's frame has a null there too.
    frame = frame.with_columns(pl.col("ts", "dur").replace("null", None))
    return with_occurrence(
        frame.select("index", "name", ts_ns=times_ns(frame["ts"]), dur_ns=times_ns(frame["dur"]))
    )


def with_occurrence(frame: pl.DataFrame) -> pl.DataFrame:
    """``occurrence`` of each row among the rows with its name, start and duration, in frame
    order: with them, ``ACTIVITY_KEY`` tells apart the activities of the loader's GPU frame
    (file order within a category) and the file's events without an event index."""
    return frame.with_columns(
        occurrence=pl.int_range(pl.len(), dtype=pl.Int64).over("name", "ts_ns", "dur_ns")
    )


def with_members(event: msgspec.Raw, members: str) -> bytes:
    """``event`` with ``members`` (``"k":v,...``) added to its args object."""
    fields = msgspec.json.decode(event, type=dict[str, msgspec.Raw])
    args = bytes(fields.get("args", b"{}")).strip()
    inner = args[1:-1].strip() if args.startswith(b"{") else b""
    added = members.encode()
    fields["args"] = msgspec.Raw(
        b"{" + inner + b"," + added + b"}" if inner else b"{" + added + b"}"
    )
    return msgspec.json.encode(fields)


def write_annotated(source: Path, target: Path, members: pl.DataFrame, added: Iterable[str]) -> int:
    """Write ``source`` to ``target`` with ``members`` (``name``, ``ts_ns``, ``dur_ns``,
    ``occurrence``, ``members``: see render/annotate.py) added to the matching GPU activities'
    args and the ``added`` events appended. Returns how many activities gained members."""
    top, trace_events = read_document(source)
    events = msgspec.json.decode(trace_events, type=list[msgspec.Raw])
    matched = activity_positions(trace_events).join(
        members, on=ACTIVITY_KEY, how="inner", nulls_equal=True
    )
    patched: list[msgspec.Raw | bytes] = list(events)
    for index, text in zip(matched["index"], matched["members"], strict=True):
        if text:
            patched[index] = with_members(events[index], text)
    tail = [text.encode() for text in added]
    with _replacing(target) as out:
        _write_document(out, top, [*patched, *tail])
    return matched.height


def _write_document(out: IO[bytes], top: dict[str, msgspec.Raw] | None, events: list[Any]) -> None:
    """The top-level object in its own key order (or a bare array), traceEvents written in
    batches."""
    if top is None:
        _write_events(out, events)
        return
    out.write(b"{")
    for position, (key, value) in enumerate(top.items()):
        out.write(b"," if position else b"")
        out.write(msgspec.json.encode(key) + b":")
        if key == "traceEvents":
            _write_events(out, events)
        else:
            out.write(value)
    out.write(b"}")


def _write_events(out: IO[bytes], events: list[Any]) -> None:
    out.write(b"[")
    for start in range(0, len(events), _BATCH):
        out.write(b"," if start else b"")
        out.write(b",".join(events[start : start + _BATCH]))
    out.write(b"]")


@contextlib.contextmanager
def _replacing(target: Path) -> Iterator[IO[bytes]]:
    """A file to write that becomes ``target`` once complete (gzipped for ``.gz``)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with files.replacing(target) as raw:
        if target.name.endswith(".gz"):
            with gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=GZIP_LEVEL, mtime=0) as zipped:
                yield zipped  # type: ignore[misc]
        else:
            yield raw
