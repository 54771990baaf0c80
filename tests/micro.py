"""Micro traces: a few Kineto-like events written to a file, and exact expected frames.

Times are given in microseconds, as Kineto writes them; the loaded frames hold nanoseconds.
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import polars as pl

import traceanalyze

Event = dict[str, Any]
Micros = float | Decimal  # a Decimal for digits a float cannot hold
_EXACT = "exact-number:"

# One H200, as Kineto describes it; traces get it unless they pass their own or None.
H200 = {
    "id": 0,
    "name": "NVIDIA H200",
    "totalGlobalMem": 150_110_011_392,
    "computeMajor": 9,
    "computeMinor": 0,
    "maxThreadsPerBlock": 1024,
    "maxThreadsPerMultiprocessor": 2048,
    "regsPerBlock": 65536,
    "regsPerMultiprocessor": 65536,
    "warpSize": 32,
    "sharedMemPerBlock": 49152,
    "sharedMemPerMultiprocessor": 233472,
    "numSms": 132,
    "sharedMemPerBlockOptin": 232448,
}


def span(
    cat: str, name: str, ts: Micros, dur: Micros, *, pid: Any = 1, tid: Any = 1, **args: Any
) -> Event:
    """A complete ("X") event; ``args`` keys are written as given."""
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": pid,
        "tid": tid,
        "ts": ts,
        "dur": dur,
        "args": args,
    }


def op(name: str, ts: Micros, dur: Micros, *, tid: Any = 1, pid: Any = 1) -> Event:
    return span("cpu_op", name, ts, dur, pid=pid, tid=tid)


def annotation(name: str, ts: Micros, dur: Micros, *, tid: Any = 1, pid: Any = 1) -> Event:
    return span("user_annotation", name, ts, dur, pid=pid, tid=tid)


def call(
    name: str,
    ts: Micros,
    dur: Micros,
    correlation: int,
    *,
    tid: Any = 1,
    pid: Any = 1,
    cat: str = "cuda_runtime",
) -> Event:
    """A runtime (or, with ``cat="cuda_driver"``, driver) call that launches ``correlation``."""
    return span(cat, name, ts, dur, pid=pid, tid=tid, correlation=correlation)


def kernel(
    name: str,
    ts: Micros,
    dur: Micros,
    correlation: int,
    *,
    cat: str = "kernel",
    device: Any = 0,
    stream: Any = 7,
    **args: Any,
) -> Event:
    """A GPU activity on ``device``/``stream``; ``cat`` may be gpu_memcpy or gpu_memset."""
    return span(
        cat,
        name,
        ts,
        dur,
        pid=device,
        tid=stream,
        device=device,
        stream=stream,
        correlation=correlation,
        **args,
    )


def document(
    events: Sequence[Event],
    *,
    rank: int | None = None,
    devices: Sequence[Mapping[str, Any]] | None = (H200,),
    **top: Any,
) -> dict[str, Any]:
    """A Kineto trace document around ``events``."""
    doc: dict[str, Any] = {"schemaVersion": 1}
    if devices is not None:
        doc["deviceProperties"] = list(devices)
    if rank is not None:
        doc["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": 2}
    doc["traceEvents"] = list(events)
    return {**doc, **top}


def dumps(content: Any) -> str:
    """JSON text; Decimals are written digit for digit (json writes a float by its repr, so
    1712195495505583.047 would become 1712195495505583.0)."""
    text = json.dumps(content, default=lambda number: f"{_EXACT}{number}")
    return re.sub(rf'"{_EXACT}([^"]*)"', r"\1", text)


def write(folder: Path, name: str, content: Any) -> Path:
    """Write ``content`` to ``folder/name``: bytes as they are, else as JSON (gzip for .gz)."""
    if isinstance(content, bytes):
        data = content
    else:
        data = dumps(content).encode()
        if name.endswith(".gz"):
            data = gzip.compress(data, mtime=0)
    path = folder / name
    path.write_bytes(data)
    return path


def write_trace(
    folder: Path, events: Sequence[Event], name: str = "trace.json", **doc: Any
) -> Path:
    """Write a micro trace of ``events`` (see :func:`document` for ``doc``) and return its path."""
    return write(folder, name, document(events, **doc))


def load(
    folder: Path, events: Sequence[Event], name: str = "trace.json", **doc: Any
) -> traceanalyze.Trace:
    """Write a micro trace of ``events`` (see :func:`document` for ``doc``) and load it,
    bypassing the cache: the one way tests turn events into a Trace."""
    return traceanalyze.load(write_trace(folder, events, name, **doc), cache=False)


def expected(schema: Mapping[str, pl.DataType], header: str, *rows: Iterable[Any]) -> pl.DataFrame:
    """An expected frame: column names from ``header``, dtypes from ``schema``, one tuple a row."""
    names = header.split()
    return pl.DataFrame(
        [tuple(row) for row in rows], schema={n: schema[n] for n in names}, orient="row"
    )


def actual(frame: pl.DataFrame, like: pl.DataFrame, *order: str) -> pl.DataFrame:
    """``frame``'s columns of the expected frame ``like``, stably sorted by ``order`` (or all)."""
    keys = list(order) or like.columns
    return frame.sort(keys, nulls_last=True, maintain_order=True).select(like.columns)


def memory_event(
    ts: Micros,
    addr: int | None,
    nbytes: int,
    total: int | None,
    reserved: int | None,
    *,
    device_type: int = 1,
    device: int = 0,
    pid: Any = 1,
    tid: Any = 1,
    cat: str | None = "cpu_instant_event",
) -> Event:
    """A profile_memory ``[memory]`` instant event (an allocation, or a free when ``nbytes`` is
    negative); ``None`` leaves an arg (or the category) out, as the oldest traces do."""
    args = {
        "Total Reserved": reserved,
        "Total Allocated": total,
        "Bytes": nbytes,
        "Addr": addr,
        "Device Id": device,
        "Device Type": device_type,
        "Ev Idx": 0,
    }
    event: Event = {"ph": "i", "s": "t", "name": "[memory]", "pid": pid, "tid": tid, "ts": ts}
    if cat is not None:
        event["cat"] = cat
    event["args"] = {key: value for key, value in args.items() if value is not None}
    return event


def one_step() -> list[Event]:
    """One profiler step whose op launches one kernel (with its grid and block): the smallest
    complete trace."""
    return [
        annotation("ProfilerStep#0", 0, 100),
        op("aten::mm", 10, 50),
        call("cudaLaunchKernel", 20, 5, 1),
        kernel("gemm", 30, 10, 1, grid=[4, 2, 1], block=[128, 1, 1]),
    ]


def present(figures: dict[str, float]) -> dict[str, float]:
    """A summary's per-category mapping without the categories the trace lacks (it lists every
    category, 0 where absent: the same keys on every trace)."""
    return {key: value for key, value in figures.items() if value}
