"""`kernels`: one row per distinct GPU activity name, the nsys-style kernel summary plus the
category, launching op, occupancy (theoretical and reported) and GEMM precision."""

from __future__ import annotations

import polars as pl

from traceanalyze.analyses.activities import activities, in_iterations, iteration_count, per_trace
from traceanalyze.analyses.iterations import on_counted
from traceanalyze.hardware.occupancy import duration_weighted_mean, weighted_occupancy
from traceanalyze.trace import Trace

KERNEL_TABLE_COLUMNS = (
    "name", "category", "kind", "count_per_iter", "us_per_iter", "mean_us", "min_us", "max_us",
    "share_of_gpu_activity_pct", "theoretical_occupancy_pct", "occupancy_limiter",
    "achieved_occupancy_pct", "launch_op", "launch_ops", "launch_api", "stream", "streams",
    "gemm_precision", "registers_per_thread", "threads_per_block", "shared_memory_bytes",
    "count", "total_us",
)  # fmt: skip


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
@on_counted
def kernel_table(trace: Trace) -> pl.DataFrame:
    """Distinct kernels (and memcpy/memset names), most time per iteration first.

    Per-iteration figures (``count_per_iter``, ``us_per_iter``, ``mean_us``, ``min_us``,
    ``max_us``, ``share_of_gpu_activity_pct``, ``launch_ops``) cover the activities launched
    inside the iterations, so ``count_per_iter * mean_us == us_per_iter``; ``count`` and
    ``total_us`` cover the whole trace, including activities launched before the profiling
    window. ``launch_op`` is the first of ``launch_ops``.
    """
    frame = activities(trace)
    n = iteration_count(trace)
    inside = in_iterations(frame)
    activity_ns = inside["dur_ns"].sum()
    per_iteration = inside.group_by("name").agg(
        count_per_iter=pl.len() / n,
        us_per_iter=pl.col("dur_ns").sum() / 1e3 / n,
        mean_us=pl.col("dur_ns").mean() / 1e3,
        min_us=pl.col("dur_ns").min() / 1e3,
        max_us=pl.col("dur_ns").max() / 1e3,
        share_of_gpu_activity_pct=pl.col("dur_ns").sum() / (activity_ns or 1) * 100,
    )
    table = frame.group_by("name").agg(
        pl.col("kind").first(),
        category=_category(),
        theoretical_occupancy_pct=duration_weighted_mean("theoretical_occupancy_pct"),
        occupancy_limiter=_mode("occupancy_limiter"),
        achieved_occupancy_pct=duration_weighted_mean("achieved_occupancy_pct"),
        launch_op=_mode("op_name"),
        launch_api=_mode("launch_api"),
        # One row per name, as the JSON contract says: a name run on several streams gets the
        # stream most of its launches ran on, and ``streams`` says how many it ran on.
        stream=_mode("stream"),
        streams=pl.col("stream").n_unique(),
        gemm_precision=pl.col("gemm_precision").first(),
        registers_per_thread=_mode("registers_per_thread"),
        threads_per_block=_mode("threads_per_block"),
        shared_memory_bytes=_mode("shared_memory"),
        count=pl.len(),
        total_us=pl.col("dur_ns").sum() / 1e3,
    )
    ops = _launch_ops(inside, n)
    return (
        table.join(per_iteration, on="name", how="left")
        .join(ops, on="name", how="left")
        .with_columns(
            pl.col("count_per_iter", "us_per_iter").fill_null(0.0),
            pl.col("launch_ops").fill_null(pl.lit([], ops.schema["launch_ops"])),
            # The main op: the one most launches per iteration come from (as `kernels --by op`
            # counts them), else, for a kernel launched only outside the iterations, the
            # whole trace's most frequent.
            launch_op=pl.coalesce(
                pl.col("launch_ops").list.first().struct.field("op"), "launch_op"
            ),
        )
        .sort(["us_per_iter", "total_us", "name"], descending=[True, True, False])
        .select(KERNEL_TABLE_COLUMNS)
    )


def _launch_ops(inside: pl.DataFrame, n: int) -> pl.DataFrame:
    """Per kernel name, every op that launched it inside the iterations (``launch_ops``: ``op``,
    ``count_per_iter``, ``us_per_iter``; most launches first, a null ``op`` for launches
    without one): the same counts as :func:`op_table`, split by kernel name. One GEMM kernel
    serves several ops (tl_h100_qwen: 72 of 168 launches of one from aten::addmm, the rest
    from aten::mm), so the most frequent op alone misattributes the others' time."""
    return (
        inside.group_by("name", pl.col("op_name").alias("op"))
        .agg(count_per_iter=pl.len() / n, us_per_iter=pl.col("dur_ns").sum() / 1e3 / n)
        .sort(
            ["name", "count_per_iter", "us_per_iter", "op"],
            descending=[False, True, True, False],
            nulls_last=True,
        )
        .group_by("name", maintain_order=True)
        .agg(launch_ops=pl.struct("op", "count_per_iter", "us_per_iter"))
    )


@per_trace
@on_counted
def op_table(trace: Trace) -> pl.DataFrame:
    """GPU activity per iteration by the CPU op that launched it (``launch_op``; null for
    activities without a launching op in the trace), most time first. Every activity counts
    for its own op, so ``us_per_iter`` adds up to the summary's ``gpu_activity_us_per_iter``,
    and each op's figures are the sums of its entries in the kernel table's ``launch_ops``."""
    inside = in_iterations(activities(trace))
    n = iteration_count(trace)
    total = inside["dur_ns"].sum() or 1
    return (
        inside.group_by(pl.col("op_name").alias("launch_op"))
        .agg(
            count_per_iter=pl.len() / n,
            us_per_iter=pl.col("dur_ns").sum() / 1e3 / n,
            share_of_gpu_activity_pct=pl.col("dur_ns").sum() / total * 100,
        )
        .sort(["us_per_iter", "launch_op"], descending=[True, False], nulls_last=True)
    )


def occupancy_table(trace: Trace) -> pl.DataFrame:
    """Kernels with their launch footprint and occupancy, by total time."""
    kernels = kernel_table(trace).filter(pl.col("kind") == "kernel")
    return kernels.select(
        "name",
        "category",
        "count_per_iter",
        "us_per_iter",
        "registers_per_thread",
        "threads_per_block",
        "shared_memory_bytes",
        "theoretical_occupancy_pct",
        "occupancy_limiter",
        "achieved_occupancy_pct",
    )


def occupancy_by_category(trace: Trace) -> pl.DataFrame:
    """Duration-weighted mean occupancy per kernel category (kernels launched inside the
    iterations), most GPU time per iteration first."""
    kernels = in_iterations(activities(trace)).filter(pl.col("kind") == "kernel")
    return (
        weighted_occupancy(kernels, ["category"])
        .select(
            "category",
            (pl.col("dur_ns") / 1e3 / iteration_count(trace)).alias("us_per_iter"),
            "theoretical_occupancy_pct",
            "achieved_occupancy_pct",
            "reported_coverage_pct",
        )
        .sort(["us_per_iter", "category"], descending=[True, False])
    )
