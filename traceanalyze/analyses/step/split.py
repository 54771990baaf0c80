"""Where a step's window went: compute, exposed communication, exposed copies and idle.

At every instant of a window the rank's GPU is doing one of four things, in this order of
precedence: running a compute kernel (any kernel but a collective), else a collective kernel
(communication that no compute hides: *exposed*), else a memory copy or set (exposed copies),
else nothing (idle). So

    wall = compute + exposed communication + exposed copies + idle,
    busy = compute + exposed communication + exposed copies.

A collective kernel's time includes the time it waits for its peers: it is the time the
collective takes on this rank, not the link's transfer time. ``communication_us`` is all of it
(hidden or not). ``carried_in_us`` is the busy time in the window of work launched before the
step began on the CPU (by an earlier step, before the profiler started, or between steps); work
whose launch is not in the trace counts as carried in (its launch came before the profiler
started, or its record was lost: ``audit`` tells which).
Work the step's own threads launch (the autograd engine's backward kernels included) is not
carried in, whichever step the launching op was counted in.
"""

from __future__ import annotations

import polars as pl

from traceanalyze.analyses.accounting import busy_segments
from traceanalyze.analyses.activities import classified_activities
from traceanalyze.analyses.step.window import STEP, busy_in_windows
from traceanalyze.trace import Trace

COMPUTE = "compute"
COMMUNICATION = "communication"
COPY = "copy"
# The split's columns (nanoseconds here; the accounting reports them in µs).
SPLIT_COLUMNS = (
    "gpu_busy_ns",
    "compute_ns",
    "communication_ns",
    "exposed_communication_ns",
    "exposed_copy_ns",
    "carried_in_ns",
)


def activity_class() -> pl.Expr:
    """``compute``, ``communication`` (collective kernels) or ``copy`` (memory copies and sets,
    a replayed graph's copy kernels included) of each classified activity."""
    return (
        pl.when(pl.col("kind").is_in(["memcpy", "memset"]))
        .then(pl.lit(COPY))
        .when(pl.col("category") == "communication")
        .then(pl.lit(COMMUNICATION))
        .otherwise(pl.lit(COMPUTE))
    )


def window_split(trace: Trace, windows: pl.DataFrame) -> pl.LazyFrame:
    """Per step of ``windows``: ``SPLIT_COLUMNS`` in nanoseconds (0 where nothing runs)."""
    gpu = classified_activities(trace).lazy().with_columns(_class=activity_class())
    kind = pl.col("_class")
    unions = {
        "gpu_busy_ns": gpu,
        "compute_ns": gpu.filter(kind == COMPUTE),
        "communication_ns": gpu.filter(kind == COMMUNICATION),
        "_kernels_ns": gpu.filter(kind != COPY),
    }
    split = windows.lazy().select(STEP)
    for name, frame in unions.items():
        split = split.join(busy_in_windows(frame, windows, name), on=STEP, how="left")
    split = split.join(carried(gpu, windows), on=STEP, how="left")
    split = split.with_columns(pl.col(*unions, "carried_in_ns").fill_null(0))
    return split.select(
        *STEP,
        "gpu_busy_ns",
        "compute_ns",
        "communication_ns",
        exposed_communication_ns=pl.col("_kernels_ns") - pl.col("compute_ns"),
        exposed_copy_ns=pl.col("gpu_busy_ns") - pl.col("_kernels_ns"),
        carried_in_ns=pl.col("carried_in_ns"),
    )


def carried(
    activities: pl.LazyFrame, windows: pl.DataFrame, *, before_first: bool = False
) -> pl.LazyFrame:
    """Per step: ``carried_in_ns``, the union of the window's pieces of activities launched
    before the step began on the CPU (``cpu_lo_ns``), or, with ``before_first``, before the
    rank's first step began (the profiler's warm-up steps, work before the profiler started),
    work with no launch recorded counting as such either way. An activity is paired with every
    window it overlaps (windows of a rank are disjoint and ordered: the first whose end is after
    its start to the last whose start is before its end), so a long kernel is carried into
    each."""
    cutoff = pl.col("cpu_lo_ns").min().over("rank") if before_first else pl.col("cpu_lo_ns")
    bounds = (
        windows.lazy()
        .select(*STEP, "lo_ns", "hi_ns", cpu_lo_ns=cutoff)
        .sort("rank", "lo_ns")
        .with_columns(window=pl.int_range(pl.len()).over("rank"))
    )
    proper = activities.filter(pl.col("ts_ns").is_not_null() & (pl.col("dur_ns") > 0)).select(
        "rank",
        start_ns="ts_ns",
        end_ns=pl.col("ts_ns") + pl.col("dur_ns"),
        launched_ns="launch_ts_ns",
    )
    first = bounds.select("rank", "hi_ns", first="window").sort("hi_ns")
    last = bounds.select("rank", "lo_ns", last="window").sort("lo_ns")
    paired = (
        proper.sort("start_ns")
        .join_asof(
            first,
            left_on="start_ns",
            right_on="hi_ns",
            by="rank",
            strategy="forward",
            allow_exact_matches=False,
            check_sortedness=False,
        )
        .sort("end_ns")
        .join_asof(
            last,
            left_on="end_ns",
            right_on="lo_ns",
            by="rank",
            strategy="backward",
            allow_exact_matches=False,
            check_sortedness=False,
        )
        .filter(pl.col("first") <= pl.col("last"))
        .with_columns(window=pl.int_ranges("first", pl.col("last") + 1))
        .explode("window")
        .join(bounds, on=["rank", "window"])
        .filter(pl.col("launched_ns").is_null() | (pl.col("launched_ns") < pl.col("cpu_lo_ns")))
        .select(
            *STEP,
            ts_ns=pl.max_horizontal("start_ns", "lo_ns"),
            dur_ns=pl.min_horizontal("end_ns", "hi_ns") - pl.max_horizontal("start_ns", "lo_ns"),
        )
    )
    segments = busy_segments(paired, STEP)
    return segments.group_by(STEP).agg(carried_in_ns=(pl.col("end") - pl.col("start")).sum())
