"""What both decoders produce: a trace's kept events as column pieces, ready for the frames.

The C scanner (:mod:`traceanalyze.load.fast`) and the msgspec path
(:mod:`traceanalyze.load.chunks`) each turn a file into a :class:`Scanned`: the top-level
metadata, event counts per category, and per (frame kind, category) *part* the columns that
kind needs. A column is a list of pieces (one per decoded chunk); a piece is a typed Polars
Series, or for the rare ids written as text a plain list that :class:`IdMapper` converts. One
builder (:mod:`traceanalyze.load.frames`) makes the frames from either, so both give the same
frames by construction wherever they give the same pieces.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import polars as pl

from traceanalyze.load.decode import TraceDocument

# Kineto category -> GPU activity kind; the capitalised names are the pre-2021 format.
GPU_KINDS = {
    "kernel": "kernel",
    "Kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "Memcpy": "memcpy",
    "gpu_memset": "memset",
    "Memset": "memset",
}
# Kineto category -> CPU interval category (legacy names folded into today's).
OP_CATS = {"cpu_op": "cpu_op", "Operator": "cpu_op", "user_annotation": "user_annotation"}
# Complete events without a category: the pre-Kineto torch.autograd.profiler export (a bare
# array of ph "X" events, pid "CPU functions") writes its operators so; both decoders keep them
# as CPU ops.
UNCATEGORISED = ""
OP_LABELS = {**OP_CATS, UNCATEGORISED: "cpu_op"}
CALL_CATS = {
    "cuda_runtime": "cuda_runtime",
    "Runtime": "cuda_runtime",
    "cuda_driver": "cuda_driver",
    "Driver": "cuda_driver",
}
# with_stack's Python frames: kept as the python part (pid, tid, times, name, their ids).
PYTHON_CATS = frozenset({"python_function"})
# Old traces spell the external id "external id"; newer ones "External id".
LEGACY_CATS = frozenset({"Kernel", "Memcpy", "Memset", "Operator", "Runtime", "Driver"})
# Counted but not kept: large, and no analysis reads them; but the profile_memory events
# (MEMORY_EVENT, in cpu_instant_event) are kept, as the memory part, from any category.
SKIPPED_CATS = frozenset({"cpu_instant_event", "Trace", "overhead", "gpu_user_annotation"})
FLOW_PHASES = frozenset({"s", "f", "t"})
INSTANT_PHASES = frozenset({"i", "I"})
# The name of the instant events profile_memory records (an allocation or a free each).
MEMORY_EVENT = "[memory]"
MEMORY_ARGS = (
    "device_type", "device", "addr", "bytes", "total_allocated_bytes", "total_reserved_bytes"
)  # fmt: skip

# A Python frame's args "Python id" and "Python parent id" (null for a thread's root frame).
PYTHON_ARGS = ("python_id", "python_parent_id")

# The columns of each part kind, in the order the frames list them.
SPAN = ("name", "pid", "tid", "ts_ns", "dur_ns")
GPU_ARGS = (
    "external_id", "correlation", "device", "stream",
    "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z",
    "registers_per_thread", "shared_memory", "blocks_per_sm", "warps_per_sm",
    "est_achieved_occupancy_pct", "bytes", "bandwidth_gbps",
)  # fmt: skip
RAW_JSON = ("input_dims", "input_types", "concrete_inputs")
# A collective's args ("Collective name", "In msg nelems", "Out msg nelems", "Group size",
# "dtype") on its record_param_comms op and, in newer traces, on its NCCL kernel.
COMM_STRINGS = frozenset({"comm_name", "comm_dtype"})
# A runtime launch call's "kernel" arg (roctracer writes the kernel's name on hipLaunchKernel
# and friends; CUPTI's runtime events have none): the only name a kernel captured into a graph
# leaves in the trace.
LAUNCH_KERNEL = "launch_kernel"
# Args kept as text (a number written as its digits), as both decoders give them.
TEXT_ARGS = COMM_STRINGS | {LAUNCH_KERNEL}
COMM_INTS = frozenset({"comm_in_nelems", "comm_out_nelems", "comm_group_size"})
COMM_ARGS = ("comm_name", "comm_in_nelems", "comm_out_nelems", "comm_group_size", "comm_dtype")
COLUMNS: dict[str, tuple[str, ...]] = {
    "gpu": (*SPAN, *GPU_ARGS, *COMM_ARGS),
    "op": (*SPAN, *RAW_JSON, *COMM_ARGS),
    "call": (*SPAN, "external_id", "correlation", LAUNCH_KERNEL),
    "flow": ("id", "phase", "pid", "tid", "ts_ns"),
    "instant": ("name", "pid", "tid", "ts_ns"),
    "meta": ("name", "pid", "tid", "label"),
    "npu": (*SPAN, "device", "stream", "correlation", "kind"),
    "memory": ("pid", "tid", "ts_ns", *MEMORY_ARGS),
    "python": (*SPAN, *PYTHON_ARGS),
}
FLOATS = frozenset(
    {"blocks_per_sm", "warps_per_sm", "est_achieved_occupancy_pct", "bandwidth_gbps"}
)
STRINGS = frozenset({"name", "phase", "kind"})
DIMS = frozenset(f"{d}_{a}" for d in ("grid", "block") for a in "xyz")
TIMES = frozenset({"ts_ns", "dur_ns"})

Piece = pl.Series | list[Any]
Part = dict[str, list[Piece]]


@dataclass
class Scanned:
    """A decoded trace before its frames are built."""

    header: TraceDocument
    # Events per category (any phase), in order of first appearance; "(none)" for no category.
    counts: dict[str, int] = field(default_factory=dict)
    # (kind, category) -> column -> pieces, each part's pieces in file order.
    parts: dict[tuple[str, str], Part] = field(default_factory=dict)
    has_events: bool = False  # the document has a traceEvents list (or is an event array)
    events: int = 0
    # Begin/end events ("B"/"E", any category) with their index, paired once all are read.
    begin_end: list[tuple[int, Any]] = field(default_factory=list)
    # Where a gzip file whose JSON is whole ends early (source.GzipCut.as_dict); empty if not.
    gzip_cut: dict[str, int | None] = field(default_factory=dict)

    def add(self, kind: str, cat: str, columns: dict[str, Piece]) -> None:
        part = self.parts.setdefault((kind, cat), {})
        for name, piece in columns.items():
            part.setdefault(name, []).append(piece)

    def extend(self, later: Scanned) -> None:
        """Append the events of ``later``, scanned from the bytes right after this one's
        (its header aside): counts, parts and pieces stay in file order."""
        self.count(later.counts.items())
        for (kind, cat), part in later.parts.items():
            mine = self.parts.setdefault((kind, cat), {})
            for name, pieces in part.items():
                mine.setdefault(name, []).extend(pieces)
        self.has_events = self.has_events or later.has_events
        self.begin_end.extend((index + self.events, event) for index, event in later.begin_end)
        self.events += later.events

    def count(self, counts: Iterable[tuple[str, int]]) -> None:
        for cat, n in counts:
            key = cat or "(none)"
            self.counts[key] = self.counts.get(key, 0) + n

    def metadata_events(self) -> int:
        """How many events are metadata (ph "M" without a category)."""
        return sum(len(piece) for piece in self.parts.get(("meta", ""), {}).get("name", []))

    def in_category_order(self) -> list[tuple[tuple[str, str], Part]]:
        """Parts ordered by their category's first appearance (the frames' row order)."""
        order = {cat: i for i, cat in enumerate(self.counts)}
        return sorted(self.parts.items(), key=lambda kv: order.get(kv[0][1] or "(none)", 0))


# --- timestamps -----------------------------------------------------------------------------

# Below 2**43 microseconds a float64 tells every nanosecond apart and the float formula below
# recovers it exactly; larger values (epoch microseconds) are converted from their digits.
EXACT_FLOAT_LIMIT_US = 2.0**43
_PLAIN_DECIMAL = r"^-?\d+(\.\d{1,3})?$"


class BadTimestampError(ValueError):
    """A ts or dur outside what 64-bit nanoseconds hold."""


def times_ns(text: pl.Series) -> pl.Series:
    """JSON numbers of microseconds, as text -> integer nanoseconds. Whole microseconds and the
    fraction are scaled apart so that the fraction rounds (half to even) to the nearest
    nanosecond; large values (epoch microseconds) go by their digits.

    ``displayTimeUnit`` never changes this: the Chrome format's times are microseconds, and
    Kineto writes ``"displayTimeUnit": "ns"`` beside microsecond times."""
    scale = 1000
    name = text.name
    us = text.cast(pl.Float64)
    whole = us.floor()
    fraction = ((us - whole) * scale).round().cast(pl.Int64, strict=False)
    approx = whole.cast(pl.Int64, strict=False) * scale + fraction
    large = us.abs() >= EXACT_FLOAT_LIMIT_US
    if not large.any():
        return approx.alias(name)
    exact = _exact_ns(text.filter(large), scale)
    return approx.scatter(large.arg_true(), exact).alias(name)


def _exact_ns(text: pl.Series, scale: int) -> pl.Series:
    plain = text.str.contains(_PLAIN_DECIMAL)
    digits = text.cast(pl.Decimal(38, 3), strict=False)
    fast = (digits * scale).cast(pl.Int64, strict=False)
    values: list[int | None] = fast.to_list()
    for index in (~plain | fast.is_null()).arg_true().to_list():
        value = (Decimal(text[index]) * scale).to_integral_value()
        if not -(2**63) <= value < 2**63:
            raise BadTimestampError(f"has a time that does not fit in 64 bits ({text[index]})")
        values[index] = int(value)
    return pl.Series(text.name, values, dtype=pl.Int64)


# --- ids written as text --------------------------------------------------------------------


class IdMapper:
    """Turns ids written as text into integers: numeric text parses ("0x10", "7"); other text
    ("Spans", "stream 7") gets -1, -2, ... in order of first appearance, as the frames are
    built (frame by frame, part by part, column by column, in file order within a column)."""

    def __init__(self) -> None:
        self.names: dict[str, int] = {}

    def to_int(self, value: object) -> int | None:
        if value is None or isinstance(value, int):
            return value
        if isinstance(value, float):
            return int(value)
        text = str(value).strip()
        number = _number(text)
        return number if number is not None else self.names.setdefault(text, -1 - len(self.names))

    def series(self, name: str, values: Sequence[object]) -> pl.Series:
        try:
            return pl.Series(name, values, dtype=pl.Int64)
        except (TypeError, OverflowError):
            ints = [self.to_int(v) for v in values]
        try:
            return pl.Series(name, ints, dtype=pl.Int64)
        except (TypeError, OverflowError):
            raise BadTimestampError(f"has an id that does not fit in 64 bits ({name})") from None


def _number(text: str) -> int | None:
    try:
        return int(text, 0)
    except ValueError:
        return None
