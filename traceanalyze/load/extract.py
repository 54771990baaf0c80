"""The msgspec path's second step: one chunk of decoded events -> column pieces.

Events are bucketed by category; each needed field is pulled into a list with one C-level
``map`` (never a Python loop per event) and typed as a Polars piece right away, so the lists of
a chunk are freed with it.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from decimal import Decimal
from operator import attrgetter
from pathlib import Path
from typing import Any

import msgspec
import polars as pl

from traceanalyze.errors import TraceFormatError
from traceanalyze.load.decode import FIX_NOT_A_TRACE, UNSET_TIME, Event, decode_args, npu_args
from traceanalyze.load.scanned import (
    CALL_CATS,
    COMM_ARGS,
    COMM_INTS,
    DIMS,
    FLOATS,
    FLOW_PHASES,
    GPU_KINDS,
    INSTANT_PHASES,
    LAUNCH_KERNEL,
    LEGACY_CATS,
    MEMORY_ARGS,
    MEMORY_EVENT,
    OP_CATS,
    PYTHON_ARGS,
    PYTHON_CATS,
    RAW_JSON,
    SKIPPED_CATS,
    STRINGS,
    TEXT_ARGS,
    UNCATEGORISED,
    Piece,
    Scanned,
)

_COMPLETE = frozenset("X")
_BEGIN_END = frozenset("BE")
# Ascend "Task Type" -> GPU activity kind (any other task type is a kernel).
NPU_TASK_KINDS = (("MEMCPY", "memcpy"), ("MEMSET", "memset"))
_METADATA = frozenset("M")
# A JSON number, as the text of a string ts (Ascend writes "ts": "1717575134213722.340").
_NUMBER = r"^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?$"
# Never inside raw JSON (control characters are not allowed in its strings).
_SEPARATOR = b"\x01"

# Where each column of a part kind comes from: the event, its Kineto args or its op args.
_EVENT_FIELDS = {"name", "pid", "tid", "id", "phase"}
_ARG_FIELDS = {
    "external_id", "correlation", "device", "stream", "registers_per_thread", "shared_memory",
    "blocks_per_sm", "warps_per_sm", "est_achieved_occupancy_pct", "bytes", "bandwidth_gbps",
    "label", *PYTHON_ARGS, LAUNCH_KERNEL,
}  # fmt: skip
_KIND_COLUMNS = {
    "gpu": ("name", "pid", "tid", "ts_ns", "dur_ns", "external_id", "correlation", "device",
            "stream", *sorted(DIMS), "registers_per_thread", "shared_memory", "blocks_per_sm",
            "warps_per_sm", "est_achieved_occupancy_pct", "bytes", "bandwidth_gbps",
            *COMM_ARGS),
    "op": ("name", "pid", "tid", "ts_ns", "dur_ns", *RAW_JSON, *COMM_ARGS),
    "call": ("name", "pid", "tid", "ts_ns", "dur_ns", "external_id", "correlation",
             LAUNCH_KERNEL),
    "flow": ("id", "phase", "pid", "tid", "ts_ns"),
    "instant": ("name", "pid", "tid", "ts_ns"),
    "meta": ("name", "pid", "tid", "label"),
    "python": ("name", "pid", "tid", "ts_ns", "dur_ns", *PYTHON_ARGS),
}  # fmt: skip
_ARG_ATTRIBUTE = {"label": "name"}


class Chunk:
    """Where a chunk sits in the file, for error messages."""

    def __init__(self, path: Path, first_index: int, bare: bool) -> None:
        self.path = path
        self.first_index = first_index
        self.bare = bare

    def where(self, index: int, field: str) -> str:
        position = self.first_index + index
        return f"[{position}].{field}" if self.bare else f"traceEvents[{position}].{field}"


def extract(events: list[Event], scanned: Scanned, chunk: Chunk, *, count: bool = True) -> None:
    """Add the pieces of ``events`` (one chunk, in file order) to ``scanned``. Begin/end
    events are kept aside for :func:`pair_spans`."""
    buckets: dict[str, list[Event]] = defaultdict(list)
    for event in events:
        buckets[event.cat].append(event)
    if count:
        scanned.count((cat, len(bucket)) for cat, bucket in buckets.items())
    if _BEGIN_END & set(map(attrgetter("ph"), events)):
        scanned.begin_end += [
            (chunk.first_index + i, e) for i, e in enumerate(events) if e.ph in _BEGIN_END
        ]
    for cat, bucket in buckets.items():
        legacy = cat in LEGACY_CATS
        if cat in GPU_KINDS:
            _add(scanned, "gpu", cat, _phase(bucket, _COMPLETE), legacy, events, chunk)
        elif cat in OP_CATS:
            _add(scanned, "op", cat, _phase(bucket, _COMPLETE), legacy, events, chunk)
        elif cat in CALL_CATS:
            _add(scanned, "call", cat, _phase(bucket, _COMPLETE), legacy, events, chunk)
        elif cat in PYTHON_CATS:
            _add(scanned, "python", cat, _phase(bucket, _COMPLETE), False, events, chunk)
        else:
            memory, instants = _memory_events(_phase(bucket, INSTANT_PHASES))
            _add_memory(scanned, cat, memory, events, chunk)
            if cat in SKIPPED_CATS:
                continue
            _add(scanned, "flow", cat, _phase(bucket, FLOW_PHASES), False, events, chunk)
            _add(scanned, "instant", cat, instants, False, events, chunk)
            complete = _phase(bucket, _COMPLETE)
            _add_npu_tasks(scanned, cat, complete, events, chunk)
            if cat == UNCATEGORISED:  # the pre-Kineto autograd export's operators
                _add(scanned, "op", cat, _legacy_ops(complete), False, events, chunk)
    _add(scanned, "meta", "", _phase(buckets.get("", []), _METADATA), False, events, chunk)


def _phase(events: list[Event], phases: frozenset[str]) -> list[Event]:
    """The events of ``events`` in one of ``phases``. Categories rarely mix phases, so the
    common case is one C-level pass and no copy."""
    present = set(map(attrgetter("ph"), events))
    if present <= phases:
        return events
    if not present & phases:
        return []
    return [event for event in events if event.ph in phases]


def _add(
    scanned: Scanned,
    kind: str,
    cat: str,
    events: list[Event],
    legacy: bool,
    chunk_events: list[Event],
    chunk: Chunk,
) -> None:
    if not events:
        return
    columns = _KIND_COLUMNS[kind]
    args: list[Any] = []
    if any(c in _ARG_FIELDS or c in DIMS for c in columns):
        args = decode_args(events, chunk.path, python=kind == "python")
    op_args = decode_args(events, chunk.path, ops=True) if kind == "op" else []
    pieces: dict[str, Piece] = {}
    for column in columns:
        if column in ("ts_ns", "dur_ns"):
            pieces[column] = _times(events, column[:-3], chunk_events, chunk)
        elif column in RAW_JSON:
            pieces[column] = _raw_json(column, _values(op_args, column), chunk)
        elif column in COMM_ARGS or column == LAUNCH_KERNEL:
            pieces[column] = _comm(column, _values(op_args if kind == "op" else args, column))
        elif column in DIMS:
            dim, axis = column.split("_")
            pieces[column] = _typed(column, _values(args, f"{dim}.{axis}"))
        elif column in _ARG_FIELDS:
            attribute = _ARG_ATTRIBUTE.get(column, column)
            if legacy and attribute == "external_id":
                attribute = "external_id_legacy"
            values = _values(args, attribute)
            pieces[column] = values if column == "label" else _typed(column, values)
        else:
            values = _values(events, "ph" if column == "phase" else column)
            pieces[column] = _typed(column, values)
    scanned.add(kind, cat, pieces)


def _memory_events(instants: list[Event]) -> tuple[list[Event], list[Event]]:
    """The ``[memory]`` events among ``instants`` and the other instants."""
    memory = [event for event in instants if event.name == MEMORY_EVENT]
    if not memory:
        return [], instants
    if len(memory) == len(instants):
        return memory, []
    return memory, [event for event in instants if event.name != MEMORY_EVENT]


def _add_memory(
    scanned: Scanned, cat: str, events: list[Event], chunk_events: list[Event], chunk: Chunk
) -> None:
    """profile_memory events: their times, threads and allocator args."""
    if not events:
        return
    args = decode_args(events, chunk.path, memory=True)
    pieces: dict[str, Piece] = {
        "pid": _typed("pid", _values(events, "pid")),
        "tid": _typed("tid", _values(events, "tid")),
        "ts_ns": _times(events, "ts", chunk_events, chunk),
    }
    pieces |= {column: _typed(column, _values(args, column)) for column in MEMORY_ARGS}
    scanned.add("memory", cat, pieces)


def _add_npu_tasks(
    scanned: Scanned, cat: str, events: list[Event], chunk_events: list[Event], chunk: Chunk
) -> None:
    """Ascend NPU tasks (X events whose args carry a "Task Type") as GPU-side activities."""
    if not events:
        return
    tasks = [(e, a) for e, a in zip(events, npu_args(events), strict=True) if a.task_type]
    if not tasks:
        return
    kept = [e for e, _ in tasks]
    args = [a for _, a in tasks]
    kinds = [_npu_kind(a.task_type or "") for a in args]
    pieces: dict[str, Piece] = {
        "name": _typed("name", _values(kept, "name")),
        "pid": _typed("pid", _values(kept, "pid")),
        "tid": _typed("tid", _values(kept, "tid")),
        "ts_ns": _times(kept, "ts", chunk_events, chunk),
        "dur_ns": _times(kept, "dur", chunk_events, chunk),
        "device": _typed("device", [0 if a.device is None else a.device for a in args]),
        "stream": _typed("stream", _values(args, "stream")),
        "correlation": _typed("correlation", _values(args, "correlation")),
        "kind": pl.Series("kind", kinds, dtype=pl.String),
    }
    scanned.add("npu", cat, pieces)


def _legacy_ops(events: list[Event]) -> list[Event]:
    """The uncategorised complete events that are operators: with a time and a duration
    (written, not the defaults), not NPU tasks."""
    timed = [e for e in events if e.ts is not UNSET_TIME and e.dur is not UNSET_TIME]
    if not timed:
        return timed
    return [e for e, a in zip(timed, npu_args(timed), strict=True) if not a.task_type]


def _npu_kind(task_type: str) -> str:
    upper = task_type.upper()
    return next((kind for word, kind in NPU_TASK_KINDS if word in upper), "kernel")


def pair_spans(scanned: Scanned, chunk: Chunk) -> None:
    """Begin/end events ("B"/"E") as complete spans: on each thread an "E" closes the latest
    open "B" (any category), and the span takes the B's category, name and args. A B that is
    never closed is kept with duration 0, as an "X" event written without its ``dur`` is (a
    step region opened and never closed is then what `audit` counts as an open step); one
    closed before it began is dropped."""
    open_spans: dict[tuple[Any, Any], list[tuple[int, Event]]] = defaultdict(list)
    spans: list[Event] = []
    for index, event in scanned.begin_end:
        stack = open_spans[event.pid, event.tid]
        if event.ph == "B":
            stack.append((index, event))
            continue
        if not stack:
            continue
        begin_index, begin = stack.pop()
        begin_us = _decimal(begin.ts, begin_index, "ts", chunk)
        duration = _decimal(event.ts, index, "ts", chunk) - begin_us
        if duration >= 0:
            spans.append(_complete(begin, duration))
    # Left open when the trace ends, in file order (a handful of events at most).
    never_closed = sorted(begun for stack in open_spans.values() for begun in stack)
    spans += [_complete(begin, Decimal(0)) for _, begin in never_closed]
    scanned.begin_end = []
    if spans:
        extract(spans, scanned, Chunk(chunk.path, 0, chunk.bare), count=False)


def _complete(begin: Event, duration: Decimal) -> Event:
    return Event(
        ph="X", cat=begin.cat, name=begin.name, pid=begin.pid, tid=begin.tid, ts=begin.ts,
        dur=msgspec.Raw(str(duration).encode()), id=begin.id, args=begin.args,
    )  # fmt: skip


def _decimal(raw: msgspec.Raw, index: int, field: str, chunk: Chunk) -> Decimal:
    text = _text(raw, chunk).strip('"')
    if not re.fullmatch(_NUMBER, text):
        raise TraceFormatError(
            f"has an event whose {field} is not a number ({_text(raw, chunk)} at "
            f"{chunk.where(index - chunk.first_index, field)})",
            chunk.path,
            FIX_NOT_A_TRACE,
        )
    return Decimal(text)


def _typed(column: str, values: list[Any]) -> Piece:
    """A typed piece, or the list itself for ids written as text (converted once all are
    known, see IdMapper)."""
    if column in STRINGS:
        return pl.Series(column, values, dtype=pl.String)
    if column in FLOATS:
        return pl.Series(column, values, dtype=pl.Float64, strict=False)
    if column in DIMS:
        return pl.Series(column, values, dtype=pl.Int64, strict=False)
    try:
        return pl.Series(column, values, dtype=pl.Int64)
    except (TypeError, OverflowError):
        return values


def _comm(column: str, values: list[Any]) -> pl.Series:
    """A collective's arg: text (a number written as its digits) or an integer (else null),
    as the C scanner gives it. Nearly always all null or all of the right type: one typed
    Series; else one pass over the values."""
    dtype = pl.String if column in TEXT_ARGS else pl.Int64
    try:
        return pl.Series(column, values, dtype=dtype)
    except (TypeError, OverflowError, pl.exceptions.PolarsError):
        pass
    if column in COMM_INTS:
        return pl.Series(column, [v if type(v) is int else None for v in values], dtype=dtype)
    text = [v if isinstance(v, str) else str(v) if type(v) is int else None for v in values]
    return pl.Series(column, text, dtype=dtype)


def _raw_json(column: str, values: list[msgspec.Raw], chunk: Chunk) -> pl.Series:
    """msgspec.Raw -> text; absent (empty) -> null."""
    blobs = list(map(bytes, values))
    _text(b"".join(blobs), chunk)  # msgspec does not check the text it skips
    raw = pl.Series(column, blobs, dtype=pl.Binary)
    return pl.select(pl.when(raw.bin.size() > 0).then(raw).cast(pl.String)).to_series()


def _not_utf8(chunk: Chunk) -> TraceFormatError:
    return TraceFormatError(
        "is not valid JSON (an event holds text that is not UTF-8)", chunk.path, FIX_NOT_A_TRACE
    )


def _text(raw: msgspec.Raw | bytes, chunk: Chunk) -> str:
    try:
        return bytes(raw).decode()
    except UnicodeDecodeError:
        raise _not_utf8(chunk) from None


def _times(events: list[Event], field: str, chunk_events: list[Event], chunk: Chunk) -> pl.Series:
    """The raw ts or dur of ``events`` as number text (a string's quotes removed), checked."""
    raws = list(map(attrgetter(field), events))
    joined = _text(_SEPARATOR.join(raws), chunk)
    text = pl.Series(field, [joined]).str.split(_SEPARATOR.decode()).explode()
    quoted = text.str.starts_with('"')
    numbers = pl.select(
        pl.when(quoted).then(text.str.strip_prefix('"').str.strip_suffix('"')).otherwise(text)
    ).to_series()
    good = numbers.str.contains(_NUMBER)
    if not good.all():
        bad = good.arg_min() or 0
        index = next(i for i, e in enumerate(chunk_events) if e is events[bad])
        raise TraceFormatError(
            f"has an event whose {field} is not a number ({_text(raws[bad], chunk)} at "
            f"{chunk.where(index, field)})",
            chunk.path,
            FIX_NOT_A_TRACE,
        )
    return numbers.alias(field)


def _values(items: Sequence[object], path: str) -> list[Any]:
    try:
        return list(map(attrgetter(path), items))
    except AttributeError:  # e.g. a grid written as text where a [x, y, z] array was expected
        parent, _, leaf = path.rpartition(".")
        return [getattr(owner, leaf, None) for owner in map(attrgetter(parent), items)]
