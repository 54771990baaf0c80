"""Column pieces (:class:`~traceanalyze.load.scanned.Scanned`) -> Polars frames with the schemas
of :mod:`traceanalyze.schema`. Shared by both decoders."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl

from traceanalyze.load.scanned import (
    CALL_CATS,
    GPU_KINDS,
    OP_LABELS,
    TIMES,
    BadTimestampError,
    IdMapper,
    Piece,
    Scanned,
    times_ns,
)
from traceanalyze.schema import (
    CPU_SCHEMA,
    FLOW_SCHEMA,
    GPU_SCHEMA,
    INSTANT_SCHEMA,
    MEMORY_SCHEMA,
    PYTHON_SCHEMA,
    null_series,
)

__all__ = ["BadTimestampError", "Frames", "build_frames"]


def _series(name: str, piece: Piece, ids: IdMapper) -> pl.Series:
    if isinstance(piece, pl.Series):
        if name in TIMES and piece.dtype == pl.String:
            return times_ns(piece).alias(name)
        return piece.alias(name)
    return ids.series(name, piece)  # both decoders leave only ids written as text as lists


def _column(name: str, pieces: list[Piece], ids: IdMapper) -> pl.Series:
    series = [_series(name, piece, ids) for piece in pieces]
    return series[0] if len(series) == 1 else pl.concat(series, rechunk=False)


def _stack(
    scanned: Scanned,
    kind: str,
    categories: dict[str, str] | None,
    ids: IdMapper,
    rank: int,
) -> pl.DataFrame | None:
    """All parts of one kind, each with its category (renamed through ``categories``)."""
    frames = []
    for (part_kind, cat), part in scanned.in_category_order():
        if part_kind != kind:
            continue
        columns = [_column(n, pieces, ids) for n, pieces in part.items()]
        label = categories[cat] if categories else cat
        # The constant columns repeat one value (with_columns of a literal is a query each,
        # which cost as much as the rest of a small part)
        height = len(columns[0])
        columns.append(pl.Series("cat", [label], pl.String).new_from_index(0, height))
        columns.append(pl.Series("rank", [rank], pl.Int32).new_from_index(0, height))
        frames.append(pl.DataFrame(columns))
    if not frames:
        return None
    return pl.concat(frames, how="vertical") if len(frames) > 1 else frames[0]


@dataclass(frozen=True)
class Frames:
    gpu: pl.DataFrame
    cpu: pl.DataFrame
    flows: pl.DataFrame
    instants: pl.DataFrame
    memory: pl.DataFrame
    python: pl.DataFrame
    thread_names: dict[str, str]
    text_ids: dict[str, int]  # ids written as text -> their integers (IdMapper)
    npu_devices: list[int]  # devices of Ascend NPU tasks (named in the device frame)


def build_frames(scanned: Scanned, rank: int) -> Frames:
    """Typed frames (without linking columns)."""
    ids = IdMapper()
    gpu = _stack(scanned, "gpu", GPU_KINDS, ids, rank)
    if gpu is not None:
        gpu = gpu.with_columns(
            kind=pl.col("cat"),
            # Kineto puts the device in args; the oldest traces only in pid.
            device=pl.coalesce("device", "pid"),
        )
    npu = _stack(scanned, "npu", None, ids, rank)
    npu_devices = sorted(set(npu["device"].drop_nulls().to_list())) if npu is not None else []
    gpu_parts = [f for f in (gpu, npu) if f is not None]
    gpu = (
        pl.concat(gpu_parts, how="diagonal_relaxed")
        if len(gpu_parts) > 1
        else next(iter(gpu_parts), None)
    )
    calls = _stack(scanned, "call", CALL_CATS, ids, rank)
    ops = _stack(scanned, "op", OP_LABELS, ids, rank)
    cpu_parts = [f for f in (ops, calls) if f is not None]
    cpu = (
        pl.concat(cpu_parts, how="diagonal") if len(cpu_parts) > 1 else next(iter(cpu_parts), None)
    )
    return Frames(
        gpu=_conform(gpu, _unlinked(GPU_SCHEMA)),
        cpu=_conform(cpu, _unlinked(CPU_SCHEMA)),
        flows=_conform(_stack(scanned, "flow", None, ids, rank), FLOW_SCHEMA),
        instants=_conform(_stack(scanned, "instant", None, ids, rank), INSTANT_SCHEMA),
        memory=_conform(_stack(scanned, "memory", None, ids, rank), MEMORY_SCHEMA),
        python=_conform(_stack(scanned, "python", None, ids, rank), PYTHON_SCHEMA),
        thread_names=_thread_names(scanned),
        npu_devices=npu_devices,
        text_ids=dict(ids.names),  # after every frame above is built
    )


def _conform(frame: pl.DataFrame | None, schema: dict[str, pl.DataType]) -> pl.DataFrame:
    """Exactly ``schema``'s columns, in order; those the trace lacks are null.

    Column by column, not as a select: a select's query rechunked every column of the frame
    (the decoder's parts, several per scanned chunk), a copy of the whole frame into fresh
    memory (a sixth of a 175 MB load's page faults) that only the CPU frame's reorder into
    call order profits from, and linking does that itself (``link.with_call_tree``)."""
    if frame is None:
        return pl.DataFrame(schema=schema)
    try:
        return pl.DataFrame(
            [
                frame[name].cast(dtype) if name in frame else null_series(name, frame.height, dtype)
                for name, dtype in schema.items()
            ]
        )
    except pl.exceptions.InvalidOperationError as exc:  # e.g. a device id beyond 32 bits
        column = _COLUMN.search(str(exc))
        raise BadTimestampError(
            f"has an event whose {column.group(1) if column else 'field'} is out of range"
        ) from None


_COLUMN = re.compile(r"in column '([^']+)'")


def _unlinked(schema: dict[str, pl.DataType]) -> dict[str, pl.DataType]:
    """The columns of ``schema`` that exist before linking."""
    linked = {
        "linked", "launch_api", "launch_ts_ns", "launch_dur_ns", "launch_tid", "op_id",
        "op_name", "annotation", "iteration", "parent_id", "depth",
    }  # fmt: skip
    return {name: dtype for name, dtype in schema.items() if name not in linked}


def _values(pieces: Sequence[Piece]) -> list[Any]:
    return [v for p in pieces for v in (p.to_list() if isinstance(p, pl.Series) else p)]


def _thread_names(scanned: Scanned) -> dict[str, str]:
    """``"pid"`` -> process name and ``"pid:tid"`` -> thread name, from ph "M" events."""
    part = scanned.parts.get(("meta", ""))
    if not part:
        return {}
    names: dict[str, str] = {}
    columns = [_values(part[c]) for c in ("name", "pid", "tid", "label")]
    for kind, pid, tid, label in zip(*columns, strict=True):
        if not isinstance(label, str):
            continue
        if kind == "process_name":
            names[str(pid)] = label
        elif kind == "thread_name":
            names[f"{pid}:{tid}"] = label
    return names
