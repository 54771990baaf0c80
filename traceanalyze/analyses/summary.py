"""`summary`: per-iteration figures of a trace (means over its iterations)."""

from __future__ import annotations

from typing import Any

import polars as pl

from traceanalyze.analyses.activities import activities, in_iterations, iteration_count, per_trace
from traceanalyze.analyses.cputree import VIEW_OPS, outermost_ops
from traceanalyze.analyses.cudnn import planning_us_per_iter
from traceanalyze.link import nearest_ancestor
from traceanalyze.trace import Trace

# When the CPU spends longer inside operators than the GPU is busy, launches cannot keep the
# GPU fed: the iteration is CPU-bound (launch overhead), and a faster kernel will not help.
BOUND_CPU = "CPU-bound"
BOUND_GPU = "GPU-bound"


def busy_ns(frame: pl.DataFrame) -> int:
    """Time covered by the union of the activities' intervals, per device, summed."""
    if not frame.height:
        return 0
    ordered = frame.select("rank", "device", "ts_ns", end=pl.col("ts_ns") + pl.col("dur_ns")).sort(
        ["rank", "device", "ts_ns"]
    )
    # A new busy segment starts where an activity begins after every earlier one has ended.
    segments = ordered.with_columns(
        reach=pl.col("end").cum_max().shift(1).over(["rank", "device"])
    ).with_columns(
        segment=(pl.col("reach").is_null() | (pl.col("ts_ns") > pl.col("reach"))).cum_sum()
    )
    spans = segments.group_by("segment").agg(start=pl.col("ts_ns").min(), end=pl.col("end").max())
    return int((spans["end"] - spans["start"]).sum())


@per_trace
def summary(trace: Trace) -> dict[str, Any]:
    """The per-iteration summary (keys are a public contract, see ARCHITECTURE.md).

    Figures are means per iteration; for a folder of ranks, per rank and iteration.
    """
    n = iteration_count(trace)
    gpu = in_iterations(activities(trace))
    kernels = gpu.filter(pl.col("kind") == "kernel")
    cpu_in_iterations = trace.cpu.filter(pl.col("iteration").is_not_null())
    outer = outermost_ops(trace).filter(pl.col("iteration").is_not_null())
    gpu_busy = busy_ns(gpu) / 1e3 / n
    cpu_ops_us = float(outer["dur_ns"].sum()) / 1e3 / n
    return {
        "iterations": trace.iterations["iteration"].n_unique(),
        "ranks": len(trace.meta),
        "iteration_source": trace.iteration_source,
        "iteration_us": _mean_us(trace.iterations["dur_ns"]),
        "kernels_per_iter": kernels.height / n,
        "memcpy_per_iter": _count(gpu, "memcpy") / n,
        "memset_per_iter": _count(gpu, "memset") / n,
        "gpu_kernel_us_per_iter": float(kernels["dur_ns"].sum()) / 1e3 / n,
        "gpu_busy_us_per_iter": gpu_busy,
        "cpu_us_per_iter": cpu_ops_us,
        "launch_us_per_iter": float(gpu["launch_dur_ns"].sum()) / 1e3 / n,
        "bound": BOUND_CPU if cpu_ops_us > gpu_busy else BOUND_GPU,
        "transpose_ops_per_iter": _view_ops(trace, cpu_in_iterations) / n,
        "cudnn_planning_us_per_iter": planning_us_per_iter(trace),
        "category_us": _per_iteration(kernels, "category", n, us=True),
        "category_count": _per_iteration(gpu, "category", n, us=False),
        "launch_apis": _per_iteration(gpu.filter(pl.col("linked")), "launch_api", n, us=False),
        "unlinked_gpu_activities": int((~activities(trace)["linked"]).sum()),
    }


def _view_ops(trace: Trace, cpu: pl.DataFrame) -> int:
    """CPU-side transpose/permute views, each counted once: aten::t runs aten::transpose inside
    itself, and counting both doubled every ``.t()`` (nn.Linear's weight, for example)."""
    views = cpu.filter((pl.col("cat") == "cpu_op") & pl.col("name").is_in(VIEW_OPS))
    inside_a_view = nearest_ancestor(trace.cpu, views["op_id"], pl.col("name").is_in(VIEW_OPS))
    return int(inside_a_view.is_null().sum())


def _count(frame: pl.DataFrame, kind: str) -> int:
    return int((frame["kind"] == kind).sum())


def _mean_us(durations: pl.Series) -> float | None:
    mean = durations.mean()
    return None if mean is None else float(mean) / 1e3  # type: ignore[arg-type]


def _per_iteration(frame: pl.DataFrame, key: str, n: int, *, us: bool) -> dict[str, float]:
    value = pl.col("dur_ns").sum() / 1e3 if us else pl.len()
    grouped = (
        frame.group_by(key).agg(value=value / n).sort(["value", key], descending=[True, False])
    )
    return dict(zip(grouped[key].to_list(), grouped["value"].to_list(), strict=True))
