"""`info`: what a trace is: device, versions, span, event counts, iterations, linking."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import polars as pl

from traceanalyze.trace import Trace


def trace_info(trace: Trace) -> dict[str, Any]:
    """A record describing one loaded trace (all ranks together)."""
    gpu = trace.gpu
    counts: dict[str, int] = {}
    for meta in trace.meta:
        for cat, n in meta.event_counts.items():
            counts[cat] = counts.get(cat, 0) + n
    start, end = _span(trace)
    first = trace.meta[0]
    return {
        # The file, or the folder of a trace's per-rank files: one string, whatever the ranks.
        "file": str(_location(trace)),
        "ranks": len(trace.meta),
        "devices": _devices(trace.devices),
        "versions": {key: str(value) for key, value in first.versions.items()},
        "span_ms": None if start is None else (end - start) / 1e6,
        "events": sum(counts.values()),
        "event_counts": dict(sorted(counts.items(), key=lambda kv: -kv[1])),
        "iterations": trace.iterations.height,
        "iteration_source": trace.iteration_source,
        "kernels": int((gpu["kind"] == "kernel").sum()),
        "memcpy": int((gpu["kind"] == "memcpy").sum()),
        "memset": int((gpu["kind"] == "memset").sum()),
        "gpu_linked": int(gpu["linked"].sum()),
        "gpu_unlinked": int((~gpu["linked"]).sum()),
        "cpu_ops": int((trace.cpu["cat"] == "cpu_op").sum()),
        "runtime_calls": int(trace.cpu["cat"].is_in(["cuda_runtime", "cuda_driver"]).sum()),
    }


def _location(trace: Trace) -> Path:
    paths = [m.path for m in trace.meta]
    return paths[0] if len(paths) == 1 else Path(os.path.commonpath(paths))


def _span(trace: Trace) -> tuple[int | None, int]:
    spans = pl.concat([trace.cpu.select("ts_ns", "dur_ns"), trace.gpu.select("ts_ns", "dur_ns")])
    if not spans.height:
        return None, 0
    start = spans["ts_ns"].min()
    end = (spans["ts_ns"] + spans["dur_ns"]).max()
    return int(start), int(end)  # type: ignore[arg-type]


def _devices(devices: pl.DataFrame) -> list[str]:
    if not devices.height:
        return []
    # pl.format is null when any part is: fall back to what the trace does say.
    labels = devices.select(
        pl.coalesce(
            pl.format(
                "{} (compute capability {}.{}, {} SMs)",
                pl.col("name"),
                pl.col("compute_major"),
                pl.col("compute_minor"),
                pl.col("num_sms"),
            ),
            pl.col("name"),
            pl.format("device {}", pl.col("device")),
        ).alias("label")
    ).unique(maintain_order=True)
    return labels["label"].to_list()
