"""Trace-level metadata: versions, distributed info, device properties, thread names."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl

from traceanalyze.load.decode import VERSION_KEYS, TraceDocument
from traceanalyze.schema import DEVICE_SCHEMA
from traceanalyze.trace import TraceMeta

# Kineto's deviceProperties key -> our column. ROCm writes maxSharedMemoryPerMultiProcessor.
_DEVICE_KEYS = {
    "id": "device",
    "name": "name",
    "computeMajor": "compute_major",
    "computeMinor": "compute_minor",
    "numSms": "num_sms",
    "warpSize": "warp_size",
    "maxThreadsPerBlock": "max_threads_per_block",
    "maxThreadsPerMultiprocessor": "max_threads_per_sm",
    "maxBlocksPerMultiprocessor": "max_blocks_per_sm",
    "regsPerBlock": "regs_per_block",
    "regsPerMultiprocessor": "regs_per_sm",
    "sharedMemPerBlock": "shared_mem_per_block",
    "sharedMemPerBlockOptin": "shared_mem_per_block_optin",
    "sharedMemPerMultiprocessor": "shared_mem_per_sm",
    "maxSharedMemoryPerMultiProcessor": "shared_mem_per_sm",
    "totalGlobalMem": "total_global_mem",
}


class BadRankError(ValueError):
    """distributedInfo names a rank that is no 32-bit number."""


def rank_of(document: TraceDocument) -> int:
    """The rank the trace states, else 0 (a single trace; folders check ranks are distinct)."""
    info = document.distributedInfo or {}
    rank = info.get("rank")
    if rank is None:
        return 0
    if not isinstance(rank, int) or isinstance(rank, bool) or not 0 <= rank < 2**31:
        raise BadRankError(f"has a distributedInfo rank that is not a rank number ({rank!r})")
    return rank


# The name given to an Ascend NPU, whose traces carry no device properties.
NPU_NAME = "Ascend NPU"


def device_frame(
    document: TraceDocument, rank: int, npu_devices: Sequence[int] = ()
) -> pl.DataFrame:
    """One row per device of deviceProperties, plus the NPUs whose tasks the trace holds."""
    rows = []
    for properties in document.deviceProperties or []:
        row: dict[str, Any] = {column: None for column in DEVICE_SCHEMA}
        row["rank"] = rank
        for key, column in _DEVICE_KEYS.items():
            if key in properties:
                row[column] = _fitting(properties[key], DEVICE_SCHEMA[column])
        rows.append(row)
    described = {row["device"] for row in rows}
    for device in npu_devices:
        if device not in described:
            rows.append({**dict.fromkeys(DEVICE_SCHEMA), "rank": rank, "device": device,
                         "name": NPU_NAME})  # fmt: skip
    return pl.DataFrame(rows, schema=DEVICE_SCHEMA, strict=False)


_INT_BITS: dict[type[pl.DataType], int] = {pl.Int32: 31, pl.Int64: 63}


def _fitting(value: Any, dtype: pl.DataType) -> Any:
    """``value`` if it is of the column's type and range, else None (a property written in
    another form is as good as absent: the analyses then say what they lack)."""
    if dtype == pl.String:
        return value if isinstance(value, str) else None
    bits = _INT_BITS.get(type(dtype))
    if bits is None or not isinstance(value, int) or isinstance(value, bool):
        return None
    return value if -(2**bits) <= value < 2**bits else None


def trace_meta(
    document: TraceDocument,
    path: Path,
    rank: int,
    event_counts: dict[str, int],
    names: dict[str, str],
    text_ids: dict[str, int] | None = None,
    gzip_cut: dict[str, int | None] | None = None,
) -> TraceMeta:
    versions = {
        key: getattr(document, key) for key in VERSION_KEYS if getattr(document, key) is not None
    }
    base = document.baseTimeNanoseconds
    return TraceMeta(
        path=path,
        rank=rank,
        schema_version=document.schemaVersion if isinstance(document.schemaVersion, int) else None,
        trace_name=document.traceName if isinstance(document.traceName, str) else None,
        base_time_ns=base if isinstance(base, int) else None,
        versions=versions,
        distributed_info=dict(document.distributedInfo or {}),
        event_counts=event_counts,
        thread_names=names,
        text_ids=dict(text_ids or {}),
        gzip_cut=dict(gzip_cut or {}),
    )
