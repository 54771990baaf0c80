"""`kernels`: one row per distinct GPU activity name, the nsys-style kernel summary plus the
category, launching op, occupancy (theoretical and reported) and GEMM precision."""

from __future__ import annotations

import polars as pl

from traceanalyze.analyses.activities import activities, in_iterations, iteration_count, per_trace
from traceanalyze.occupancy import duration_weighted_mean, weighted_occupancy
from traceanalyze.trace import Trace


def _mode(column: str) -> pl.Expr:
    return pl.col(column).drop_nulls().mode().sort().first()


def _category() -> pl.Expr:
    """The category most launches of a name get, counting only linked launches where any are.

    A kernel launched before the profiling window has no launching op, so only its name
    classifies it (cuDNN's convert_dq_to_16bits reads "copy" instead of fused_attention).
    """
    linked = pl.col("category").filter(pl.col("linked")).mode().sort().first()
    return pl.when(pl.col("linked").any()).then(linked).otherwise(_mode("category"))


@per_trace
def kernel_table(trace: Trace) -> pl.DataFrame:
    """Distinct kernels (and memcpy/memset names), by total time, longest first.

    Counts and times cover every activity in the trace; ``count_per_iter`` and ``us_per_iter``
    only those launched inside an iteration.
    """
    frame = activities(trace)
    total_ns = frame["dur_ns"].sum() or 1
    per_iteration = (
        in_iterations(frame)
        .group_by("name")
        .agg(
            count_per_iter=pl.len() / iteration_count(trace),
            us_per_iter=pl.col("dur_ns").sum() / 1e3 / iteration_count(trace),
        )
    )
    table = frame.group_by("name").agg(
        pl.col("kind").first(),
        category=_category(),
        count=pl.len(),
        total_us=pl.col("dur_ns").sum() / 1e3,
        mean_us=pl.col("dur_ns").mean() / 1e3,
        min_us=pl.col("dur_ns").min() / 1e3,
        max_us=pl.col("dur_ns").max() / 1e3,
        share_pct=pl.col("dur_ns").sum() / total_ns * 100,
        theoretical_occupancy_pct=duration_weighted_mean("theoretical_occupancy_pct"),
        occupancy_limiter=_mode("occupancy_limiter"),
        achieved_occupancy_pct=duration_weighted_mean("achieved_occupancy_pct"),
        launch_op=_mode("op_name"),
        launch_api=_mode("launch_api"),
        gemm_precision=pl.col("gemm_precision").first(),
        registers_per_thread=_mode("registers_per_thread"),
        threads_per_block=_mode("threads_per_block"),
        shared_memory=_mode("shared_memory"),
    )
    return (
        table.join(per_iteration, on="name", how="left")
        .with_columns(pl.col("count_per_iter", "us_per_iter").fill_null(0.0))
        .sort(["total_us", "name"], descending=[True, False])
        .select(
            "name",
            "category",
            "kind",
            "count",
            "count_per_iter",
            "us_per_iter",
            "total_us",
            "mean_us",
            "min_us",
            "max_us",
            "share_pct",
            "theoretical_occupancy_pct",
            "occupancy_limiter",
            "achieved_occupancy_pct",
            "launch_op",
            "launch_api",
            "gemm_precision",
            "registers_per_thread",
            "threads_per_block",
            "shared_memory",
        )
    )


def occupancy_table(trace: Trace) -> pl.DataFrame:
    """Kernels with their launch footprint and occupancy, by total time."""
    kernels = kernel_table(trace).filter(pl.col("kind") == "kernel")
    return kernels.select(
        "name",
        "category",
        "count",
        "total_us",
        "registers_per_thread",
        "threads_per_block",
        "shared_memory",
        "theoretical_occupancy_pct",
        "occupancy_limiter",
        "achieved_occupancy_pct",
    )


def occupancy_by_category(trace: Trace) -> pl.DataFrame:
    """Duration-weighted mean occupancy per kernel category, most GPU time first."""
    kernels = activities(trace).filter(pl.col("kind") == "kernel")
    return (
        weighted_occupancy(kernels, ["category"])
        .select(
            "category",
            (pl.col("dur_ns") / 1e3).alias("total_us"),
            "theoretical_occupancy_pct",
            "achieved_occupancy_pct",
        )
        .sort(["total_us", "category"], descending=[True, False])
    )
