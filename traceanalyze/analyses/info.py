"""`info`: what a trace is: device, versions, span, event counts, iterations, linking."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import polars as pl

from traceanalyze.hardware.devices import device_label
from traceanalyze.load.decode import VERSION_KEYS
from traceanalyze.trace import Trace

# Versions only a ROCm trace records.
ROCM_VERSION_KEYS = ("hip_runtime_version", "roctracer_version")


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
        "devices": _devices(trace),
        # Every version key on every trace (null where the trace states none): a fixed schema.
        "versions": {
            key: None if first.versions.get(key) is None else str(first.versions[key])
            for key in VERSION_KEYS
        },
        "span_ms": None if start is None else (end - start) / 1e6,
        "events": sum(counts.values()),
        "event_counts": dict(sorted(counts.items(), key=lambda kv: -kv[1])),
        "iterations": trace.iterations["iteration"].n_unique(),  # per rank, as summary counts
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


def _devices(trace: Trace) -> list[str]:
    if not trace.devices.height:
        return []
    rocm = any(key in m.versions for m in trace.meta for key in ROCM_VERSION_KEYS)
    labels = trace.devices.select(device_label(rocm=rocm).alias("label"))
    return labels["label"].unique(maintain_order=True).to_list()
