"""The time-accounting model: one definition of every time figure, per iteration.

Every table, chart and finding takes its times from here (README, "How time is counted"). Per
iteration (a ``ProfilerStep``; a repeated top-level annotation; else the whole trace as one
iteration), for each rank:

* ``gpu_activity_us``: sum of the durations of the kernels, memory copies and memory sets
  launched in the iteration; ``gpu_kernel_us``, ``gpu_memcpy_us``, ``gpu_memset_us`` its parts.
* ``gpu_busy_us``: the union of those activities' intervals on each device (streams that
  overlap count once), summed over devices; never more than ``gpu_activity_us``.
* ``gpu_span_us``: first start to last end of those activities, per device (summed over
  devices); ``gpu_idle_us`` = span minus busy: gaps inside the iteration's GPU work.
* ``cpu_op_us``: time inside outermost CPU operators (``cpu_op`` with no ``cpu_op`` ancestor)
  that start in the iteration, summed over threads.
* ``launch_us``: time in the runtime/driver calls that launched the iteration's GPU activities.
* ``cpu_span_us``: the iteration's span on the CPU (the step's own duration).
* ``wall_us``: the longer of ``cpu_span_us`` and the longest device's ``gpu_span_us``. With
  steps running back to back the slower side sets the pace, so this is the iteration's period;
  a capture's median time (its manifest) is the measured truth for it.

An activity belongs to the iteration its launch call is in; activities launched before the
profiling window (no launch call in the trace) belong to none and are left out of every
per-iteration figure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

import polars as pl

from traceanalyze.analyses.activities import per_trace, transfer_kind
from traceanalyze.analyses.cputree import outermost_mask
from traceanalyze.link import RUNTIME_CATS
from traceanalyze.query import IN_MEMORY
from traceanalyze.trace import Trace

ITERATION = ["rank", "iteration"]
# An eager or a lazy frame: the interval unions build the same query on either.
Frame = TypeVar("Frame", pl.DataFrame, pl.LazyFrame)
_DEVICE = [*ITERATION, "device"]

# Columns of :func:`iteration_times`, in microseconds unless the name says otherwise.
TIME_COLUMNS = (
    "gpu_activity_us",
    "gpu_kernel_us",
    "gpu_memcpy_us",
    "gpu_memset_us",
    "gpu_busy_us",
    "gpu_span_us",
    "gpu_idle_us",
    "cpu_op_us",
    "launch_us",
    "cpu_span_us",
    "wall_us",
)
COUNT_COLUMNS = ("kernels", "memcpy", "memset")

# The GPU is "busy" for the iteration when it works for at least this share of the wall time;
# below it the GPU waits on the CPU (launches, synchronisation): the iteration is CPU-bound.
GPU_BOUND_MIN_BUSY_PCT = 80.0
# A profiled run's GPU busy time may exceed an unprofiled capture median by a few percent;
# beyond this the two do not describe the same work and no share or verdict is given.
BUSY_OVER_WALL_TOLERANCE_PCT = 10.0
BOUND_CPU = "CPU-bound"
BOUND_GPU = "GPU-bound"
NO_GPU = "no GPU activity in the iterations"
NO_CPU = "no CPU operators recorded in the iterations"


@per_trace
def iteration_times(trace: Trace) -> pl.DataFrame:
    """One row per (rank, iteration) with ``COUNT_COLUMNS`` and ``TIME_COLUMNS``."""
    # One query (in-memory engine) for the whole table: its ~20 eager steps cost ~0.1-0.3 ms
    # each, most of it fixed cost, on a rank's few thousand activities.
    steps = trace.iterations.lazy().select(*ITERATION, cpu_span_us=pl.col("dur_ns") / 1e3)
    gpu = trace.gpu.lazy().filter(pl.col("iteration").is_not_null()).with_columns(transfer_kind())
    frame = (
        steps.join(_gpu_times(gpu, proper_intervals(trace.gpu)), on=ITERATION, how="left")
        .join(_cpu_op_times(trace), on=ITERATION, how="left")
        .join(_launch_times(trace, gpu), on=ITERATION, how="left")
    )
    # An iteration without GPU activity or operators has zero of them, not an unknown amount.
    filled = [c for c in (*COUNT_COLUMNS, *TIME_COLUMNS) if c not in ("cpu_span_us", "wall_us")]
    return (
        frame.with_columns(pl.col(filled).fill_null(0))
        .with_columns(
            wall_us=pl.max_horizontal(
                pl.col("cpu_span_us").fill_null(0), pl.col("longest_gpu_span_us").fill_null(0)
            )
        )
        .select(*ITERATION, *COUNT_COLUMNS, *TIME_COLUMNS)
        .sort(ITERATION)
        .collect(engine=IN_MEMORY)
    )


def mean_per_iter(trace: Trace, column: str) -> float:
    """The mean of one of :func:`iteration_times`' columns over the iterations (0 if none)."""
    mean = iteration_times(trace)[column].cast(pl.Float64).mean()
    return float(mean) if mean is not None else 0.0  # type: ignore[arg-type]


def _gpu_times(gpu: pl.LazyFrame, proper: bool) -> pl.LazyFrame:
    """Per (rank, iteration): counts, activity time by kind, and busy/span/idle from the
    intervals of each device."""
    ns = pl.col("dur_ns")
    # Integer nanoseconds summed, then converted: a float sum depends on the order the rows
    # arrive in, which a parallel group_by does not fix, and one figure must not change
    # between runs (or engines) in its last digits.
    totals = gpu.group_by(ITERATION).agg(
        kernels=(pl.col("kind") == "kernel").sum(),
        memcpy=(pl.col("kind") == "memcpy").sum(),
        memset=(pl.col("kind") == "memset").sum(),
        gpu_activity_us=ns.sum() / 1e3,
        gpu_kernel_us=ns.filter(pl.col("kind") == "kernel").sum() / 1e3,
        gpu_memcpy_us=ns.filter(pl.col("kind") == "memcpy").sum() / 1e3,
        gpu_memset_us=ns.filter(pl.col("kind") == "memset").sum() / 1e3,
    )
    devices = (
        busy_and_span_query(gpu, _DEVICE, proper=proper)
        .group_by(ITERATION)
        .agg(
            gpu_busy_us=pl.col("busy_ns").sum() / 1e3,
            gpu_span_us=pl.col("span_ns").sum() / 1e3,
            longest_gpu_span_us=pl.col("span_ns").max() / 1e3,
        )
    )
    return totals.join(devices, on=ITERATION, how="left").with_columns(
        gpu_idle_us=pl.col("gpu_span_us") - pl.col("gpu_busy_us")
    )


def busy_and_span(frame: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """Per group of ``by``: ``busy_ns``, the length of the union of the rows' intervals
    (``ts_ns``, ``dur_ns``), and ``span_ns``, first start to last end."""
    return busy_and_span_query(frame, by).collect(engine=IN_MEMORY)


def busy_and_span_query(
    frame: pl.DataFrame | pl.LazyFrame, by: list[str], *, proper: bool | None = None
) -> pl.LazyFrame:
    """:func:`busy_and_span` as a query, for a caller to plan with the rest of its own.

    Intervals that all have a start and a duration of zero or more (``proper``, which a
    DataFrame's rows tell; a LazyFrame's caller says it, from the frame it filtered) take the
    rows in start order alone: each adds to its group's union what reaches past every earlier
    interval of the group (one window, no segments; sorting by the groups and then the start
    cost as much as the rest, and a group_by of the segments as much again). Others go
    through the union's segments (:func:`busy_segments`), the definition."""
    if proper is None:
        if isinstance(frame, pl.LazyFrame):
            raise TypeError("busy_and_span_query of a LazyFrame needs `proper`")
        proper = proper_intervals(frame)
    if not proper:
        return (
            busy_segments(frame.lazy(), by)
            .group_by(by)
            .agg(
                busy_ns=(pl.col("end") - pl.col("start")).sum(),
                span_ns=pl.col("end").max() - pl.col("start").min(),
            )
        )
    end = pl.col("ts_ns") + pl.col("dur_ns")
    # The furthest end of the group's earlier intervals (null for its first): the row adds
    # [max(start, reach), max(end, reach)], which is empty where it ends before the reach.
    reach = pl.col("end").cum_max().shift(1).over(by)
    return (
        frame.lazy()
        .select(*by, "ts_ns", end=end)
        .sort("ts_ns")
        .with_columns(reach=reach)
        .group_by(by)
        .agg(
            busy_ns=(pl.max_horizontal("end", "reach") - pl.max_horizontal("ts_ns", "reach")).sum(),
            span_ns=pl.col("end").max() - pl.col("ts_ns").min(),
        )
    )


def proper_intervals(frame: pl.DataFrame) -> bool:
    """Whether every row has a start and a duration of zero or more: then no interval ends
    before it starts, which :func:`busy_and_span_query`'s coverage sum needs to equal the
    segments' (true of any subset of the rows too)."""
    starts, durations = frame["ts_ns"], frame["dur_ns"]
    if starts.null_count() or durations.null_count():
        return False
    shortest = durations.min()
    return shortest is None or bool(shortest >= 0)  # type: ignore[operator]


def busy_segments(frame: Frame, by: list[str]) -> Frame:
    """Per group of ``by``, the union of the rows' intervals (``ts_ns``, ``dur_ns``) as
    disjoint segments ``start``, ``end`` (ns); intervals that touch make one segment."""
    ordered = frame.select(*by, "ts_ns", end=pl.col("ts_ns") + pl.col("dur_ns")).sort(
        [*by, "ts_ns"]
    )
    # A new busy segment starts where an interval begins after every earlier one has ended.
    segments = ordered.with_columns(reach=pl.col("end").cum_max().shift(1).over(by)).with_columns(
        segment=(pl.col("reach").is_null() | (pl.col("ts_ns") > pl.col("reach"))).cum_sum()
    )
    return segments.group_by([*by, "segment"]).agg(
        start=pl.col("ts_ns").min(), end=pl.col("end").max()
    )


def _cpu_op_times(trace: Trace) -> pl.LazyFrame:
    outer = (
        trace.cpu.lazy()
        .select(*ITERATION, "dur_ns", _outermost=outermost_mask(trace))
        .filter(pl.col("_outermost") & pl.col("iteration").is_not_null())
    )
    return outer.group_by(ITERATION).agg(cpu_op_us=pl.col("dur_ns").sum() / 1e3)


def _launch_times(trace: Trace, gpu: pl.LazyFrame) -> pl.LazyFrame:
    """Time in the calls that launched the iteration's activities, each call counted once
    (a graph launch or a cuDNN call can launch several activities)."""
    launched = gpu.select("rank", "correlation").drop_nulls().unique()
    # Only the columns read below go through the filter and the join.
    calls = (
        trace.cpu.lazy()
        .select("rank", "iteration", "correlation", "dur_ns", "cat")
        .filter(pl.col("cat").is_in(RUNTIME_CATS))
        .join(launched, on=["rank", "correlation"], how="semi")
    )
    return (
        calls.filter(pl.col("iteration").is_not_null())
        .unique(["rank", "correlation"], keep="first")
        .group_by(ITERATION)
        .agg(launch_us=pl.col("dur_ns").sum() / 1e3)
    )


@dataclass(frozen=True)
class Verdict:
    """Whether the iterations are GPU- or CPU-bound, or why that cannot be said."""

    bound: str | None  # BOUND_GPU | BOUND_CPU | None
    note: str  # the evidence, or what is missing

    @property
    def cpu_bound(self) -> bool:
        return self.bound == BOUND_CPU


def not_the_same_work(gpu_busy_us: float, wall_us: float, wall_source: str) -> Verdict | None:
    """No verdict where the busy time exceeds a measured (capture) wall time by more than
    ``BUSY_OVER_WALL_TOLERANCE_PCT``: the iterations hold work that time does not."""
    if gpu_busy_us <= wall_us * (1 + BUSY_OVER_WALL_TOLERANCE_PCT / 100):
        return None
    return Verdict(
        None,
        f"the GPU busy time per iteration ({gpu_busy_us:,.1f} µs) exceeds the wall time "
        f"({wall_source}, {wall_us:,.1f} µs) by {gpu_busy_us / wall_us * 100 - 100:.0f}%: the "
        "iterations hold work that wall time does not (one-off calls, other shapes), so no "
        "verdict",
    )


def verdict(
    gpu_busy_us: float, wall_us: float | None, cpu_op_us: float, wall_source: str
) -> Verdict:
    """GPU-bound when the GPU is busy for at least ``GPU_BOUND_MIN_BUSY_PCT`` of the wall time.

    Needs both sides: without GPU activity or without CPU operators there is no verdict.
    ``wall_source`` says where ``wall_us`` comes from (a capture median or the trace).
    """
    if gpu_busy_us <= 0:
        return Verdict(None, NO_GPU)
    if not wall_us:
        return Verdict(None, "no wall time for the iterations")
    busy_pct = gpu_busy_us / wall_us * 100
    gpu_bound = busy_pct >= GPU_BOUND_MIN_BUSY_PCT
    # A GPU busy nearly all the wall time is GPU-bound whatever the CPU did (a CUDA graph
    # replay has no CPU operators at all); calling it CPU-bound needs the CPU side.
    if cpu_op_us <= 0 and not gpu_bound:
        return Verdict(None, NO_CPU)
    shown = f"{busy_pct:.0f}" if busy_pct >= 1 else f"{busy_pct:.2g}"
    note = f"GPU busy time {shown}% of the wall time ({wall_source})"
    if busy_pct > 100:
        note += (
            f": the profiled busy time exceeds that wall time by {busy_pct - 100:.1f}% and the "
            "share is capped at 100"
        )
    return Verdict(BOUND_GPU if gpu_bound else BOUND_CPU, note)


# One sentence per figure: the report's glossary and the README's "How time is counted" both
# print these (a test keeps the README in step), so a figure is defined exactly once.
DEFINITIONS: dict[str, str] = {
    "gpu_activity_us_per_iter": "sum of the durations of the kernels, memory copies and memory "
    "sets launched in the iteration",
    "gpu_kernel_us_per_iter": "the kernels' part of the GPU activity time",
    "gpu_busy_us_per_iter": "time at least one of those activities runs on the GPU: the union "
    "of their intervals across streams, overlap counted once (at most the activity time)",
    "gpu_idle_us_per_iter": "gaps between the iteration's first and last GPU activity "
    "(GPU span minus busy time)",
    "cpu_op_us_per_iter": "time inside outermost CPU operators (aten ops and other `cpu_op` "
    "events with no operator above them) that start in the iteration, summed over threads",
    "launch_us_per_iter": "time in the runtime/driver calls that launched the iteration's GPU "
    "activities",
    "cpu_span_us_per_iter": "the iteration's span on the CPU (the ProfilerStep's duration)",
    "wall_us_per_iter": "the longer of the CPU span and the GPU span (first start to last end "
    "of its GPU activities), taken per iteration and then averaged (so it can exceed both "
    "averaged spans): the pace of back-to-back iterations",
    "median_ms": "the capture's median time per call, measured with CUDA events without the "
    "profiler (the manifest): the truth for wall time",
    "speedup": "the baseline's GPU busy time over the variant's",
    "speedup_wall": "the baseline's wall time over the variant's: capture medians where both "
    "have the same kind (a warm capture's median, or a cold capture's steady median that leaves "
    "out its one-off first call), else the traces' wall time",
    "gpu_busy_pct_of_wall": "GPU busy time as a share of the wall time that `wall_source` "
    "names: the capture's median where a warm capture's manifest gives one, a cold capture's "
    "steady median (its first call left out), else the trace's wall time; at most 100 (a "
    "profiled run's busy time can exceed the unprofiled median by a "
    "few percent: `bound_note` then says by how much; more than 10% over a capture's median, "
    "the two do not describe the same work and the share and verdict are left out)",
    "bound": f"GPU-bound when the GPU is busy at least {GPU_BOUND_MIN_BUSY_PCT:.0f}% of that "
    "wall time, else CPU-bound; no verdict without GPU activity, nor a CPU-bound one without "
    "CPU operators (a CUDA graph replay busy enough is GPU-bound without any)",
}
