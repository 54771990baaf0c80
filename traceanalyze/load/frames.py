"""Typed events -> Polars frames with the schemas of :mod:`traceanalyze.schema`.

Two steps:

1. :func:`extract` buckets events by category and pulls each needed field into a plain Python
   list (one C-level ``map`` per field, never a loop per event). No Polars here.
2. :func:`build_frames` turns those lists into typed frames.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path
from typing import Any

import msgspec
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
OP_CATS = {"cpu_op": "cpu_op", "Operator": "cpu_op", "user_annotation": "user_annotation"}
CALL_CATS = {
    "cuda_runtime": "cuda_runtime",
    "Runtime": "cuda_runtime",
    "cuda_driver": "cuda_driver",
    "Driver": "cuda_driver",
}
# Old traces spell the external id "external id"; newer ones "External id".
LEGACY_CATS = frozenset({"Kernel", "Memcpy", "Memset", "Operator", "Runtime", "Driver"})
# Counted but not kept: large, and no analysis reads them. cpu_instant_event holds the
# profile_memory allocation events, whose only content is in args that are not decoded.
SKIPPED_CATS = frozenset(
    {"python_function", "cpu_instant_event", "Trace", "overhead", "gpu_user_annotation"}
)
FLOW_PHASES = frozenset({"s", "f", "t"})
INSTANT_PHASES = frozenset({"i", "I"})

# A field: (column, attribute path on the event or, after "args.", on its decoded args).
Field = tuple[str, str]
_SPAN: tuple[Field, ...] = (
    ("name", "name"),
    ("pid", "pid"),
    ("tid", "tid"),
    ("ts_ns", "ts"),
    ("dur_ns", "dur"),
)
# cpu_op and user_annotation rows: linking uses time containment, so of their args only the
# shapes (record_shapes) are kept, as raw JSON text for the performance models.
_OP: tuple[Field, ...] = (
    *_SPAN,
    ("input_dims", "opargs.input_dims"),
    ("input_types", "opargs.input_types"),
    ("concrete_inputs", "opargs.concrete_inputs"),
)
_CALL: tuple[Field, ...] = (
    *_SPAN,
    ("external_id", "args.external_id"),
    ("correlation", "args.correlation"),
)
_GPU: tuple[Field, ...] = (
    *_CALL,
    ("device", "args.device"),
    ("stream", "args.stream"),
    *((f"{d}_{a}", f"args.{d}.{a}") for d in ("grid", "block") for a in "xyz"),
    ("registers_per_thread", "args.registers_per_thread"),
    ("shared_memory", "args.shared_memory"),
    ("blocks_per_sm", "args.blocks_per_sm"),
    ("warps_per_sm", "args.warps_per_sm"),
    ("est_achieved_occupancy_pct", "args.est_achieved_occupancy_pct"),
    ("bytes", "args.bytes"),
    ("bandwidth_gbps", "args.bandwidth_gbps"),
)
# Flows and instants are pulled per category bucket; the category is added as a constant.
_FLOW: tuple[Field, ...] = (
    ("id", "id"),
    ("phase", "ph"),
    ("pid", "pid"),
    ("tid", "tid"),
    ("ts_ns", "ts"),
)
_INSTANT: tuple[Field, ...] = (
    ("name", "name"),
    ("pid", "pid"),
    ("tid", "tid"),
    ("ts_ns", "ts"),
)
_META: tuple[Field, ...] = (
    ("name", "name"),
    ("pid", "pid"),
    ("tid", "tid"),
    ("label", "args.name"),
)

Columns = dict[str, list[Any]]


@dataclass
class Extracted:
    """Column lists of a trace's events, keyed by (frame, category), and counts per category."""

    counts: dict[str, int] = field(default_factory=dict)
    parts: dict[tuple[str, str], Columns] = field(default_factory=dict)

    def largest_timestamp_us(self) -> float:
        """The largest ``|ts|`` among the kept events (0 when none): C-level max/min over the
        extracted lists, far cheaper than another pass over every event."""
        stamps = [part["ts_ns"] for part in self.parts.values() if part.get("ts_ns")]
        largest = [max(ts) for ts in stamps]
        smallest = [min(ts) for ts in stamps]
        return max([*largest, *(-low for low in smallest)], default=0.0)


def extract(events: list[Event], source: Path) -> Extracted:
    """Bucket ``events`` and pull the fields each frame needs into lists."""
    buckets: dict[str, list[Event]] = defaultdict(list)
    for event in events:
        buckets[event.cat].append(event)
    result = Extracted(counts={cat or "(none)": len(b) for cat, b in buckets.items()})
    for cat, bucket in buckets.items():
        legacy = cat in LEGACY_CATS
        if cat in GPU_KINDS:
            result.parts["gpu", cat] = _pull(_phase(bucket, _COMPLETE), _GPU, legacy, source)
        elif cat in OP_CATS:
            result.parts["op", cat] = _pull(_phase(bucket, _COMPLETE), _OP, legacy, source)
        elif cat in CALL_CATS:
            result.parts["call", cat] = _pull(_phase(bucket, _COMPLETE), _CALL, legacy, source)
        elif cat not in SKIPPED_CATS:
            flows = _phase(bucket, FLOW_PHASES)
            instants = _phase(bucket, INSTANT_PHASES)
            if flows:
                result.parts["flow", cat] = _pull(flows, _FLOW, False, source)
            if instants:
                result.parts["instant", cat] = _pull(instants, _INSTANT, False, source)
    metadata = _phase(buckets.get("", []), frozenset("M"))
    result.parts["meta", ""] = _pull(metadata, _META, False, source)
    return result


_COMPLETE = frozenset("X")


def _phase(events: list[Event], phases: frozenset[str]) -> list[Event]:
    """The events of ``events`` in one of ``phases``. Categories rarely mix phases, so the
    common case is one C-level pass and no copy."""
    present = set(map(attrgetter("ph"), events))
    if present <= phases:
        return events
    if not present & phases:
        return []
    return [event for event in events if event.ph in phases]


def _pull(events: list[Event], fields: Sequence[Field], legacy: bool, source: Path) -> Columns:
    needs_args = any(path.startswith("args.") for _, path in fields)
    args = decode_args(events, source) if needs_args else []
    op_args = (
        decode_args(events, source, ops=True)
        if any(path.startswith("opargs.") for _, path in fields)
        else []
    )
    columns: Columns = {}
    for column, path in fields:
        if path.startswith("opargs."):
            columns[column] = _values(op_args, path.removeprefix("opargs."))
        elif path.startswith("args."):
            attribute = path.removeprefix("args.")
            if legacy and attribute == "external_id":
                attribute = "external_id_legacy"
            columns[column] = _values(args, attribute)
        else:
            columns[column] = _values(events, path)
    return columns


def _values(items: Sequence[object], path: str) -> list[Any]:
    try:
        return list(map(attrgetter(path), items))
    except AttributeError:  # e.g. a grid written as text where a [x, y, z] array was expected
        parent, _, leaf = path.rpartition(".")
        return [getattr(owner, leaf, None) for owner in map(attrgetter(parent), items)]


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


class BadTimestampError(ValueError):
    """An event's ``ts`` is not a JSON number."""


def _ns(name: str, micros: Sequence[Any]) -> pl.Series:
    # Kineto writes microseconds with three decimals. Whole microseconds and the fraction are
    # scaled apart so that the fraction rounds to the nearest nanosecond.
    us = pl.Series(name, micros, dtype=pl.Float64)
    whole = us.floor()
    fraction_ns = ((us - whole) * 1000.0).round().cast(pl.Int64)
    return whole.cast(pl.Int64) * 1000 + fraction_ns


def _exact_ns(name: str, micros: Sequence[msgspec.Raw]) -> pl.Series:
    """Timestamps as written (raw JSON numbers) -> integer nanoseconds, digit for digit."""
    if not micros:
        return pl.Series(name, [], pl.Int64)
    text = pl.Series(name, [b"\n".join(micros).decode()]).str.split("\n").explode()
    exact = text.cast(pl.Decimal(38, 3), strict=False)
    if exact.null_count():
        raise BadTimestampError(
            f"has an event whose ts is not a number ({text.filter(exact.is_null())[0]})"
        )
    return (exact * 1000).cast(pl.Int64)


_FLOATS = frozenset(
    {"blocks_per_sm", "warps_per_sm", "est_achieved_occupancy_pct", "bandwidth_gbps"}
)
_STRINGS = frozenset({"name", "cat", "phase", "label"})
_RAW_JSON = frozenset({"input_dims", "input_types", "concrete_inputs"})
_DIMS = frozenset(f"{d}_{a}" for d in ("grid", "block") for a in "xyz")


def _series(name: str, values: Sequence[Any], ids: IdMapper) -> pl.Series:
    if name == "ts_ns":
        exact = bool(values) and isinstance(values[0], msgspec.Raw)
        return _exact_ns(name, values) if exact else _ns(name, values)
    if name == "dur_ns":
        return _ns(name, values)
    if name in _STRINGS:
        return pl.Series(name, values, dtype=pl.String)
    if name in _RAW_JSON:  # msgspec.Raw -> text; absent (empty) -> null
        raw = pl.Series(name, list(map(bytes, values)), dtype=pl.Binary).to_frame()
        text = pl.when(pl.col(name).bin.size() > 0).then(pl.col(name)).cast(pl.String)
        return raw.select(text).to_series()
    if name in _FLOATS:
        return pl.Series(name, values, dtype=pl.Float64, strict=False)
    if name in _DIMS:
        return pl.Series(name, values, dtype=pl.Int64, strict=False)
    return ids.series(name, values)


def _frame(columns: Columns, ids: IdMapper, rank: int) -> pl.DataFrame:
    frame = pl.DataFrame([_series(name, values, ids) for name, values in columns.items()])
    return frame.with_columns(rank=pl.lit(rank, pl.Int32))


def _stack(
    extracted: Extracted, frame: str, categories: dict[str, str] | None, ids: IdMapper, rank: int
) -> pl.DataFrame | None:
    """All parts of one frame kind, each with its category (renamed through ``categories``)."""
    parts = [
        _frame(columns, ids, rank).with_columns(
            cat=pl.lit(categories[cat] if categories else cat, pl.String)
        )
        for (kind, cat), columns in extracted.parts.items()
        if kind == frame
    ]
    return pl.concat(parts, how="vertical") if parts else None


@dataclass(frozen=True)
class Frames:
    gpu: pl.DataFrame
    cpu: pl.DataFrame
    flows: pl.DataFrame
    instants: pl.DataFrame
    thread_names: dict[str, str]


def build_frames(extracted: Extracted, rank: int) -> Frames:
    """Typed frames (without linking columns) from merged extractions."""
    ids = IdMapper()
    gpu = _stack(extracted, "gpu", GPU_KINDS, ids, rank)
    if gpu is not None:
        gpu = gpu.with_columns(
            kind=pl.col("cat"),
            # Kineto puts the device in args; the oldest traces only in pid.
            device=pl.coalesce("device", "pid"),
        )
    calls = _stack(extracted, "call", CALL_CATS, ids, rank)
    ops = _stack(extracted, "op", OP_CATS, ids, rank)
    cpu_parts = [f for f in (ops, calls) if f is not None]
    cpu = pl.concat(cpu_parts, how="diagonal") if cpu_parts else None
    return Frames(
        gpu=_conform(gpu, _unlinked(GPU_SCHEMA)),
        cpu=_conform(cpu, _unlinked(CPU_SCHEMA)),
        flows=_conform(_stack(extracted, "flow", None, ids, rank), FLOW_SCHEMA),
        instants=_conform(_stack(extracted, "instant", None, ids, rank), INSTANT_SCHEMA),
        thread_names=_thread_names(extracted.parts["meta", ""]),
    )


def _conform(frame: pl.DataFrame | None, schema: dict[str, pl.DataType]) -> pl.DataFrame:
    """Exactly ``schema``'s columns, in order; those the trace lacks are null."""
    if frame is None:
        return pl.DataFrame(schema=schema)
    return frame.select(
        (pl.col(name) if name in frame.columns else pl.lit(None)).cast(dtype).alias(name)
        for name, dtype in schema.items()
    )


def _unlinked(schema: dict[str, pl.DataType]) -> dict[str, pl.DataType]:
    """The columns of ``schema`` that exist before linking."""
    linked = {
        "linked", "launch_api", "launch_ts_ns", "launch_dur_ns", "launch_tid", "op_id",
        "op_name", "annotation", "iteration", "parent_id", "depth",
    }  # fmt: skip
    return {name: dtype for name, dtype in schema.items() if name not in linked}


def _thread_names(columns: Columns) -> dict[str, str]:
    """``"pid"`` -> process name and ``"pid:tid"`` -> thread name, from ph "M" events."""
    names: dict[str, str] = {}
    for kind, pid, tid, label in zip(
        columns["name"], columns["pid"], columns["tid"], columns["label"], strict=True
    ):
        if not isinstance(label, str):
            continue
        if kind == "process_name":
            names[str(pid)] = label
        elif kind == "thread_name":
            names[f"{pid}:{tid}"] = label
    return names


__all__ = ["Extracted", "Frames", "IdMapper", "build_frames", "extract"]
