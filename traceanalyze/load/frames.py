"""Typed events -> Polars frames with the schemas of :mod:`traceanalyze.schema`.

Events are bucketed by category once; each frame is then built column by column from a field
table (one C-level ``map`` per field), never row by row.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from operator import attrgetter
from pathlib import Path
from typing import Any

import polars as pl

from traceanalyze.load.decode import Event, decode_args
from traceanalyze.schema import CPU_SCHEMA, FLOW_SCHEMA, GPU_SCHEMA, INSTANT_SCHEMA

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
CPU_CATS = {
    "cpu_op": "cpu_op",
    "Operator": "cpu_op",
    "user_annotation": "user_annotation",
    "cuda_runtime": "cuda_runtime",
    "Runtime": "cuda_runtime",
    "cuda_driver": "cuda_driver",
    "Driver": "cuda_driver",
}
# Old traces spell the external id "external id"; newer ones "External id".
LEGACY_CATS = frozenset({"Kernel", "Memcpy", "Memset", "Operator", "Runtime", "Driver"})
# Counted but not kept: large, and no analysis reads them.
SKIPPED_CATS = frozenset({"python_function", "Trace", "overhead", "gpu_user_annotation"})
FLOW_PHASES = frozenset({"s", "f", "t"})
INSTANT_PHASES = frozenset({"i", "I"})


class IdMapper:
    """Turns Kineto's string ids into integers: numeric strings parse, others get -1, -2, ..."""

    def __init__(self) -> None:
        self.names: dict[str, int] = {}

    def to_int(self, value: object) -> int | None:
        if value is None or isinstance(value, int):
            return value
        if isinstance(value, float):
            return int(value)
        text = str(value).strip()
        try:
            return int(text, 0)
        except ValueError:
            return self.names.setdefault(text, -1 - len(self.names))

    def series(self, name: str, values: Sequence[object]) -> pl.Series:
        try:
            return pl.Series(name, values, dtype=pl.Int64)
        except TypeError:  # strings ("0x0", "Spans") or floats among the ids: rare, go slow
            return pl.Series(name, [self.to_int(v) for v in values], dtype=pl.Int64)


def bucket_by_category(events: list[Event]) -> dict[str, list[Event]]:
    buckets: dict[str, list[Event]] = defaultdict(list)
    for event in events:
        buckets[event.cat].append(event)
    return buckets


def _ns(name: str, micros: Sequence[Any]) -> pl.Series:
    # Kineto writes microseconds with three decimals. Whole microseconds and the fraction are
    # scaled apart: epoch timestamps (~1.7e15 us) times 1000 would exceed float64's 53 bits.
    us = pl.Series(name, micros, dtype=pl.Float64)
    whole = us.floor()
    fraction_ns = ((us - whole) * 1000.0).round().cast(pl.Int64)
    return whole.cast(pl.Int64) * 1000 + fraction_ns


def _str(name: str, values: Sequence[Any]) -> pl.Series:
    return pl.Series(name, values, dtype=pl.String)


def _float(name: str, values: Sequence[Any]) -> pl.Series:
    return pl.Series(name, values, dtype=pl.Float64, strict=False)


def _int(name: str, values: Sequence[Any]) -> pl.Series:
    return pl.Series(name, values, dtype=pl.Int64, strict=False)


ID = "id"  # marker: convert with the trace's IdMapper
Builder = Callable[[str, Sequence[Any]], pl.Series] | str
# (column, event attribute path, how to build the column)
Field = tuple[str, str, Builder]

# cpu_op and user_annotation rows: linking uses time containment, so their args are not read.
_COMMON: tuple[Field, ...] = (
    ("name", "name", _str),
    ("pid", "pid", ID),
    ("tid", "tid", ID),
    ("ts_ns", "ts", _ns),
    ("dur_ns", "dur", _ns),
)
_CALL: tuple[Field, ...] = (
    *_COMMON,
    ("external_id", "args.external_id", ID),
    ("correlation", "args.correlation", ID),
)
_GPU: tuple[Field, ...] = (
    *_CALL,
    ("device", "args.device", ID),
    ("stream", "args.stream", ID),
    *((f"{d}_{a}", f"args.{d}.{a}", _int) for d in ("grid", "block") for a in "xyz"),
    ("registers_per_thread", "args.registers_per_thread", ID),
    ("shared_memory", "args.shared_memory", ID),
    ("blocks_per_sm", "args.blocks_per_sm", _float),
    ("warps_per_sm", "args.warps_per_sm", _float),
    ("est_achieved_occupancy_pct", "args.est_achieved_occupancy_pct", _float),
    ("bytes", "args.bytes", ID),
    ("bandwidth_gbps", "args.bandwidth_gbps", _float),
)


def _build(
    events: list[Event], fields: Sequence[Field], ids: IdMapper, legacy: bool, source: Path
) -> pl.DataFrame:
    needs_args = any(path.startswith("args.") for _, path, _ in fields)
    args = decode_args(events, source) if needs_args else []
    columns = []
    for column, path, builder in fields:
        if path.startswith("args."):
            attribute = path.removeprefix("args.")
            if legacy and attribute == "external_id":
                attribute = "external_id_legacy"
            values = _values(args, attribute)
        else:
            values = _values(events, path)
        columns.append(ids.series(column, values) if builder == ID else builder(column, values))  # type: ignore[operator]
    return pl.DataFrame(columns)


def _values(items: Sequence[object], path: str) -> list[Any]:
    try:
        return list(map(attrgetter(path), items))
    except AttributeError:  # e.g. a grid written as text where a [x, y, z] array was expected
        parent, _, leaf = path.rpartition(".")
        owners = map(attrgetter(parent), items)
        return [getattr(owner, leaf, None) for owner in owners]


def _complete_spans(events: list[Event]) -> list[Event]:
    """Only complete events (ph "X") are intervals; other phases in these categories are rare."""
    if set(map(attrgetter("ph"), events)) <= {"X"}:
        return events
    return [event for event in events if event.ph == "X"]


def interval_frame(
    buckets: dict[str, list[Event]],
    categories: dict[str, str],
    fields: Sequence[Field],
    ids: IdMapper,
    rank: int,
    source: Path,
) -> pl.DataFrame:
    """Complete events of ``categories``, one column per field, plus rank and the category."""
    parts = [
        _build(_complete_spans(events), fields, ids, cat in LEGACY_CATS, source).with_columns(
            rank=pl.lit(rank, pl.Int32), cat=pl.lit(categories[cat], pl.String)
        )
        for cat, events in buckets.items()
        if cat in categories
    ]
    if not parts:
        return _build([], fields, ids, False, source).with_columns(
            rank=pl.lit(rank, pl.Int32), cat=pl.lit(None, pl.String)
        )
    return pl.concat(parts, how="vertical")


def gpu_frame(
    buckets: dict[str, list[Event]], ids: IdMapper, rank: int, source: Path
) -> pl.DataFrame:
    """GPU activities (kernels, memcpy, memset) without the linking columns."""
    frame = interval_frame(buckets, GPU_KINDS, _GPU, ids, rank, source)
    return frame.with_columns(
        kind=pl.col("cat"),
        # Kineto puts the device in args; the oldest traces only in pid.
        device=pl.coalesce("device", "pid").cast(pl.Int32),
    ).select(c for c in GPU_SCHEMA if c in frame.columns or c == "kind")


def cpu_frame(
    buckets: dict[str, list[Event]], ids: IdMapper, rank: int, source: Path
) -> pl.DataFrame:
    """CPU intervals (ops, annotations, runtime/driver calls) without the linking columns."""
    ops = {cat: name for cat, name in CPU_CATS.items() if name in ("cpu_op", "user_annotation")}
    calls = {cat: name for cat, name in CPU_CATS.items() if cat not in ops}
    frame = pl.concat(
        [
            interval_frame(buckets, ops, _COMMON, ids, rank, source),
            interval_frame(buckets, calls, _CALL, ids, rank, source),
        ],
        how="diagonal",
    )
    return frame.select(c for c in CPU_SCHEMA if c in frame.columns)


def flow_frame(events: list[Event], ids: IdMapper, rank: int, source: Path) -> pl.DataFrame:
    fields: tuple[Field, ...] = (
        ("cat", "cat", _str),
        ("id", "id", ID),
        ("phase", "ph", _str),
        ("pid", "pid", ID),
        ("tid", "tid", ID),
        ("ts_ns", "ts", _ns),
    )
    frame = _build(events, fields, ids, False, source).with_columns(rank=pl.lit(rank, pl.Int32))
    return frame.select(FLOW_SCHEMA.keys()).cast(FLOW_SCHEMA)  # type: ignore[arg-type]


def instant_frame(events: list[Event], ids: IdMapper, rank: int, source: Path) -> pl.DataFrame:
    fields: tuple[Field, ...] = (
        ("cat", "cat", _str),
        ("name", "name", _str),
        ("pid", "pid", ID),
        ("tid", "tid", ID),
        ("ts_ns", "ts", _ns),
    )
    frame = _build(events, fields, ids, False, source).with_columns(rank=pl.lit(rank, pl.Int32))
    return frame.select(INSTANT_SCHEMA.keys()).cast(INSTANT_SCHEMA)  # type: ignore[arg-type]
