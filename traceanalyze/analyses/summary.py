"""`summary`: per-iteration figures of a trace, the means over its iterations.

Times follow the accounting model of :mod:`traceanalyze.analyses.accounting`; for a folder of
ranks every figure is the mean per rank and iteration.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from traceanalyze.analyses.accounting import (
    COUNT_COLUMNS,
    TIME_COLUMNS,
    iteration_times,
    verdict,
)
from traceanalyze.analyses.activities import activities, in_iterations, iteration_count, per_trace
from traceanalyze.analyses.cputree import VIEW_OPS
from traceanalyze.analyses.cudnn import cudnn_cpu_us_per_iter
from traceanalyze.analyses.graphs import graph_launches_per_iter
from traceanalyze.link import nearest_ancestor
from traceanalyze.trace import Trace

WHOLE_TRACE_NOTE = "whole trace taken as one iteration (no ProfilerStep or repeated annotation)"
WALL_FROM_TRACE = "the trace's iteration span"
WALL_FROM_MEDIAN = "capture median"


@per_trace
def summary(trace: Trace) -> dict[str, Any]:
    """The per-iteration summary (keys are a public contract, listed in the README)."""
    n = iteration_count(trace)
    means = _means(iteration_times(trace))
    gpu = in_iterations(activities(trace))
    # One launch call per correlation: a graph launch starts many activities.
    launches = gpu.filter(pl.col("linked")).unique(["rank", "correlation"], keep="first")
    return {
        "iterations": trace.iterations["iteration"].n_unique(),
        "ranks": len(trace.meta),
        "iteration_source": trace.iteration_source,
        "iteration_note": iteration_note(trace),
        **means,
        **wall_verdict(means, None),
        "transpose_ops_per_iter": _view_ops(trace) / n,
        "graph_launches_per_iter": graph_launches_per_iter(trace),
        "cudnn_cpu_us_per_iter": cudnn_cpu_us_per_iter(trace),
        "category_us": _per_iteration(gpu, "category", n, us=True),
        "category_count": _per_iteration(gpu, "category", n, us=False),
        "launch_apis": _per_iteration(launches, "launch_api", n, us=False),
        "gpu_activities_outside_iterations_total": int(trace.gpu["iteration"].null_count()),
        "cpu_ops_outside_iterations_total": int(
            trace.cpu.filter(pl.col("cat") == "cpu_op")["iteration"].null_count()
        ),
    }


def iteration_note(trace: Trace) -> str | None:
    """What a reader must know about how iterations were found (None for profiler steps)."""
    if trace.iteration_source == "whole trace":
        return WHOLE_TRACE_NOTE
    if trace.iteration_source.startswith("annotation:"):
        name = trace.iteration_source.removeprefix("annotation:")
        return f"iterations are the repeated top-level annotation `{name}` (no ProfilerStep)"
    return None


def _means(times: pl.DataFrame) -> dict[str, float]:
    """``<column>_per_iter``: the mean of each count and time column over the iterations."""
    columns = [*COUNT_COLUMNS, *TIME_COLUMNS]
    if not times.height:
        return {f"{c}_per_iter": 0.0 for c in columns}
    row = times.select(pl.col(c).cast(pl.Float64).mean().alias(f"{c}_per_iter") for c in columns)
    return row.row(0, named=True)


def _view_ops(trace: Trace) -> int:
    """CPU-side transpose/permute views inside iterations, each counted once: aten::t runs
    aten::transpose inside itself, and counting both doubled every ``.t()``."""
    cpu = trace.cpu
    views = cpu.filter(
        (pl.col("cat") == "cpu_op")
        & pl.col("name").is_in(VIEW_OPS)
        & pl.col("iteration").is_not_null()
    )
    inside_a_view = nearest_ancestor(cpu, views["op_id"], pl.col("name").is_in(VIEW_OPS))
    return int(inside_a_view.is_null().sum())


def _per_iteration(frame: pl.DataFrame, key: str, n: int, *, us: bool) -> dict[str, float]:
    value = pl.col("dur_ns").sum() / 1e3 if us else pl.len()
    grouped = (
        frame.group_by(key).agg(value=value / n).sort(["value", key], descending=[True, False])
    )
    return dict(zip(grouped[key].to_list(), grouped["value"].to_list(), strict=True))


def wall_verdict(figures: dict[str, Any], median_ms: float | None) -> dict[str, Any]:
    """``wall_source``, ``gpu_busy_pct_of_wall``, ``bound`` and ``bound_note`` of a summary,
    against one wall time: the capture's median (the measured truth, without the profiler)
    where given, else the trace's. A profiled run's GPU busy time can exceed the unprofiled
    median by a few percent, so the share can read slightly over 100."""
    wall_us, source = (
        (median_ms * 1e3, WALL_FROM_MEDIAN)
        if median_ms
        else (figures["wall_us_per_iter"], WALL_FROM_TRACE)
    )
    busy = figures["gpu_busy_us_per_iter"]
    judged = verdict(busy, wall_us, figures["cpu_op_us_per_iter"], source)
    return {
        "wall_source": source,
        "gpu_busy_pct_of_wall": busy / wall_us * 100 if wall_us else None,
        "bound": judged.bound,
        "bound_note": judged.note,
    }


def summary_with_wall(trace: Trace, median_ms: float | None) -> dict[str, Any]:
    """The summary, its wall share and bound verdict against the capture's median where
    given (``wall_source`` says which): what the summary and check commands report."""
    figures = summary(trace)
    return {**figures, **wall_verdict(figures, median_ms)}
