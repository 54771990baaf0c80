"""The step window, and GPU busy time clipped to it.

A step's **window** starts where its slower side starts: the step on the CPU (its
annotation), or, where the GPU work the step launched takes longer from its first start to its
last end, that work's first start (a GPU-bound loop's CPU runs ahead, and its step is paced by
the GPU), moved back over the GPU's idle time before it down to the step's CPU start (a step
that waits for data before its first launch shows that wait; the GPU's time on earlier work
stays out: skeptic38c finding 6). It ends where both sides are done: the later of the step's
end on the CPU and the end of the GPU work it launched. Windows of one rank never overlap: a
window starts no earlier than the earlier ones have ended, and where the previous window ends
after the step began on the CPU it starts right there, so back-to-back steps' windows tile the
timeline and their length, the step's ``wall_us``, is its period (time between steps that run
apart belongs to none).

GPU time inside a window counts whatever its launch time: work launched before the step (by an
earlier step, by the CPU before the profiler started, or outside every step) that is still
running or queued in the window keeps the GPU busy there; that part of the busy time is the
window's *carried-in* time. Busy time is the union of activity intervals over the rank's
streams and devices (a rank's GPUs taken together), cut at the window's bounds.
"""

from __future__ import annotations

import polars as pl

from traceanalyze.analyses.accounting import busy_segments
from traceanalyze.trace import Trace

STEP = ["rank", "iteration"]


def step_windows(trace: Trace) -> pl.DataFrame:
    """One row per step of ``trace.iterations``: ``rank``, ``iteration``, ``lo_ns``, ``hi_ns``
    (the window), ``cpu_lo_ns``, ``cpu_hi_ns`` (the step on the CPU) and ``own_lo_ns``,
    ``own_hi_ns`` (first start and last end of the GPU work the step launched; null without
    any)."""
    steps = trace.iterations.lazy().select(
        *STEP, cpu_lo_ns="ts_ns", cpu_hi_ns=pl.col("ts_ns") + pl.col("dur_ns")
    )
    own = (
        trace.gpu.lazy()
        .filter(pl.col("iteration").is_not_null() & pl.col("dur_ns").is_not_null())
        .group_by(STEP)
        .agg(own_lo_ns=pl.col("ts_ns").min(), own_hi_ns=(pl.col("ts_ns") + pl.col("dur_ns")).max())
    )
    on_gpu = (pl.col("own_hi_ns") - pl.col("own_lo_ns")).fill_null(0) > (
        pl.col("cpu_hi_ns") - pl.col("cpu_lo_ns")
    ).fill_null(0)
    # Paced by the GPU, the window starts where the GPU was last busy before the step's work
    # (its leading idle, such as a wait for data loading, is the step's; the GPU's time on
    # earlier work is not), and no earlier than the step on the CPU.
    ends = (
        trace.gpu.lazy()
        .filter(pl.col("ts_ns").is_not_null() & pl.col("dur_ns").is_not_null())
        .select("rank", before_ns=pl.col("ts_ns") + pl.col("dur_ns"))
        .sort("before_ns")
    )
    joined = (
        steps.join(own, on=STEP, how="left")
        .sort("own_lo_ns")
        .join_asof(
            ends,
            left_on="own_lo_ns",
            right_on="before_ns",
            by="rank",
            strategy="backward",
            check_sortedness=False,
        )
    )
    from_gpu = pl.max_horizontal(
        "cpu_lo_ns", pl.min_horizontal(pl.col("before_ns").fill_null(0), "own_lo_ns")
    )
    raw = joined.with_columns(
        lo_ns=pl.when(on_gpu).then(from_gpu).otherwise("cpu_lo_ns"),
        hi_ns=pl.max_horizontal("cpu_hi_ns", "own_hi_ns"),
    ).drop("before_ns")
    # A window starts where every earlier one of its rank has ended (the furthest end so far),
    # and where that end falls inside the step (after it began on the CPU), right there: the
    # time between the two belongs to the step, so back-to-back windows leave no hole.
    reach = pl.col("hi_ns").cum_max().shift(1).over("rank")
    inside = reach.is_not_null() & (reach >= pl.col("cpu_lo_ns"))
    return (
        raw.sort("rank", "lo_ns", "iteration")
        .with_columns(
            lo_ns=pl.when(inside).then(reach).otherwise(pl.max_horizontal("lo_ns", reach))
        )
        .with_columns(hi_ns=pl.max_horizontal("hi_ns", "lo_ns"))
        .select(*STEP, "lo_ns", "hi_ns", "cpu_lo_ns", "cpu_hi_ns", "own_lo_ns", "own_hi_ns")
        .sort(STEP)
        .collect()
    )


def rank_segments(activities: pl.LazyFrame) -> pl.LazyFrame:
    """The union of ``activities``' intervals per rank as disjoint segments ``start_ns``,
    ``end_ns`` (:func:`~traceanalyze.analyses.accounting.busy_segments`; empty and unknown
    intervals are left out)."""
    proper = activities.filter(pl.col("ts_ns").is_not_null() & (pl.col("dur_ns") > 0))
    return busy_segments(proper, ["rank"]).select("rank", start_ns="start", end_ns="end")


def clipped_to_windows(segments: pl.LazyFrame, windows: pl.DataFrame) -> pl.LazyFrame:
    """``segments`` (``rank``, ``start_ns``, ``end_ns``, disjoint per rank) cut at the windows'
    bounds: one row per piece inside a window, ``rank``, ``iteration``, ``start_ns``,
    ``end_ns``. Two as-of joins, no interval join: a piece is either the part of a segment in
    the window that holds the segment's start, or the part of a segment that started before a
    window and runs into it (windows of a rank never overlap)."""
    bounds = windows.lazy().select("rank", "iteration", "lo_ns", "hi_ns").sort("lo_ns")
    starting = (
        segments.sort("start_ns")
        .join_asof(bounds, left_on="start_ns", right_on="lo_ns", by="rank", check_sortedness=False)
        .filter(pl.col("start_ns") < pl.col("hi_ns"))
        .select("rank", "iteration", "start_ns", end_ns=pl.min_horizontal("end_ns", "hi_ns"))
    )
    running = (
        bounds.join_asof(
            segments.sort("start_ns").rename({"start_ns": "seg_start_ns"}),
            left_on="lo_ns",
            right_on="seg_start_ns",
            by="rank",
            allow_exact_matches=False,
            check_sortedness=False,
        )
        .filter(pl.col("end_ns") > pl.col("lo_ns"))
        .select("rank", "iteration", start_ns="lo_ns", end_ns=pl.min_horizontal("end_ns", "hi_ns"))
    )
    return pl.concat([starting, running]).filter(pl.col("end_ns") > pl.col("start_ns"))


def busy_in_windows(activities: pl.LazyFrame, windows: pl.DataFrame, name: str) -> pl.LazyFrame:
    """Per step: ``name``, the nanoseconds at least one of ``activities`` runs in its window."""
    pieces = clipped_to_windows(rank_segments(activities), windows)
    return pieces.group_by(STEP).agg((pl.col("end_ns") - pl.col("start_ns")).sum().alias(name))
