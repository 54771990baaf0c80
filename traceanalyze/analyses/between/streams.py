"""`streams`: each GPU stream's work per iteration: busy, activity, kernels, copies, idle.

A stream's idle time is its own span (first start to last end of its activities in the
iteration) minus its busy time, so per-stream idle times do not add up to the device's
``gpu_idle_us``: a gap on one stream that another stream's work covers is not device idle time.
`idle` splits the device's idle time by cause and by the stream whose activity ends each gap.
"""

from __future__ import annotations

import polars as pl

from traceanalyze.analyses.accounting import ITERATION, busy_and_span
from traceanalyze.analyses.activities import activities, in_iterations, iteration_count
from traceanalyze.analyses.iterations import on_counted
from traceanalyze.trace import Trace

STREAM = ["rank", "device", "stream"]
_FIGURES = ("activity_us", "kernel_us", "busy_us", "span_us", "idle_us")
_COUNTS = ("kernels", "memcpy", "memset")


@on_counted
def stream_iterations(trace: Trace) -> pl.DataFrame:
    """One row per (rank, iteration, device, stream) with activity."""
    gpu = in_iterations(activities(trace))
    by = [*ITERATION, "device", "stream"]
    ns = pl.col("dur_ns")
    totals = gpu.group_by(by).agg(
        kernels=(pl.col("kind") == "kernel").sum(),
        memcpy=(pl.col("kind") == "memcpy").sum(),
        memset=(pl.col("kind") == "memset").sum(),
        activity_us=ns.sum() / 1e3,
        kernel_us=ns.filter(pl.col("kind") == "kernel").sum() / 1e3,
    )
    return (
        totals.join(busy_and_span(gpu, by), on=by)
        .with_columns(busy_us=pl.col("busy_ns") / 1e3, span_us=pl.col("span_ns") / 1e3)
        .with_columns(idle_us=pl.col("span_us") - pl.col("busy_us"))
        .select(*by, *_COUNTS, *_FIGURES)
        .sort(by)
    )


@on_counted
def stream_table(trace: Trace) -> pl.DataFrame:
    """One row per stream: the means over the iterations (an iteration where the stream ran
    nothing counts as 0), busiest stream first."""
    n = iteration_count(trace)
    table = (
        stream_iterations(trace)
        .group_by(STREAM)
        .agg(
            iterations=pl.len(),
            **{f"{c}_per_iter": pl.col(c).sum() / n for c in _COUNTS},
            **{f"{c.removesuffix('_us')}_us_per_iter": pl.col(c).sum() / n for c in _FIGURES},
        )
    )
    return table.sort(["busy_us_per_iter", *STREAM], descending=[True, False, False, False])
