"""The time-accounting model: one definition of every time figure, per iteration.

Every table, chart and finding takes its times from here and from the step model
(:mod:`traceanalyze.analyses.step`; README, "How time is counted"). This module gives the
figures of the work each iteration *launched* and of its CPU side, per (rank, iteration):

* ``gpu_activity_us``: sum of the durations of the kernels, memory copies and memory sets
  launched in the iteration; ``gpu_kernel_us``, ``gpu_memcpy_us``, ``gpu_memset_us`` its parts.
* ``gpu_span_us``: first start to last end of those activities, per device (summed over
  devices); ``own_busy_us`` the union of their intervals (streams that overlap count once).
* ``cpu_op_us``: time inside outermost CPU operators (``cpu_op`` with no ``cpu_op`` ancestor)
  that start in the iteration, summed over threads.
* ``launch_us``: time in the runtime/driver calls that launched the iteration's GPU activities.
* ``cpu_span_us``: the iteration's span on the CPU (the step's own duration; for the whole
  trace taken as one iteration, the first start to the last end of its CPU events, not the
  trace's span, which holds the GPU's too).

The step's wall, busy and idle time, its split and its idle causes are the step model's: they
count all GPU work inside the step's window, whatever its launch time.
"""

from __future__ import annotations

from typing import TypeVar

import polars as pl

from traceanalyze.analyses.activities import per_trace, transfer_kind
from traceanalyze.analyses.cputree import outermost_mask
from traceanalyze.link import RUNTIME_CATS
from traceanalyze.query import IN_MEMORY
from traceanalyze.trace import IterationSource, Trace

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
    "gpu_span_us",
    "own_busy_us",
    "cpu_op_us",
    "launch_us",
    "cpu_span_us",
)
COUNT_COLUMNS = ("kernels", "memcpy", "memset")


@per_trace
def iteration_times(trace: Trace) -> pl.DataFrame:
    """One row per (rank, iteration) with ``COUNT_COLUMNS`` and ``TIME_COLUMNS``."""
    # One query (in-memory engine) for the whole table: its ~20 eager steps cost ~0.1-0.3 ms
    # each, most of it fixed cost, on a rank's few thousand activities.
    steps = trace.iterations.lazy().select(*ITERATION, cpu_span_us=pl.col("dur_ns") / 1e3)
    if trace.iteration_source is IterationSource.WHOLE_TRACE:
        # The whole trace's span holds the GPU's too: its CPU span is the CPU events' own.
        steps = steps.drop("cpu_span_us").join(_cpu_spans(trace), on=ITERATION, how="left")
    gpu = trace.gpu.lazy().filter(pl.col("iteration").is_not_null()).with_columns(transfer_kind())
    frame = (
        steps.join(_gpu_times(gpu, proper_intervals(trace.gpu)), on=ITERATION, how="left")
        .join(_cpu_op_times(trace), on=ITERATION, how="left")
        .join(_launch_times(trace, gpu), on=ITERATION, how="left")
    )
    # An iteration without GPU activity or operators has zero of them, not an unknown amount.
    filled = [c for c in (*COUNT_COLUMNS, *TIME_COLUMNS) if c != "cpu_span_us"]
    return (
        frame.with_columns(pl.col(filled).fill_null(0))
        .select(*ITERATION, *COUNT_COLUMNS, *TIME_COLUMNS)
        .sort(ITERATION)
        .collect(engine=IN_MEMORY)
    )


def _cpu_spans(trace: Trace) -> pl.LazyFrame:
    """Per (rank, iteration): the first start to the last end of its CPU events (µs)."""
    return (
        trace.cpu.lazy()
        .filter(pl.col("iteration").is_not_null() & pl.col("dur_ns").is_not_null())
        .group_by(ITERATION)
        .agg(cpu_span_us=((pl.col("ts_ns") + pl.col("dur_ns")).max() - pl.col("ts_ns").min()) / 1e3)
    )


def _gpu_times(gpu: pl.LazyFrame, proper: bool) -> pl.LazyFrame:
    """Per (rank, iteration): counts, activity time by kind, and the busy time and span of
    each device's intervals (summed over devices)."""
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
            own_busy_us=pl.col("busy_ns").sum() / 1e3,
            gpu_span_us=pl.col("span_ns").sum() / 1e3,
        )
    )
    return totals.join(devices, on=ITERATION, how="left")


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
