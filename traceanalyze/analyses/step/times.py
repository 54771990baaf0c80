"""One row per step with every time figure: the accounting's and the window's.

The window's figures (:mod:`.window`, :mod:`.split`), in µs:

* ``wall_us``: the window's length, the step's period on the timeline;
* ``gpu_busy_us``: time at least one GPU activity of the rank runs in the window, whatever its
  launch time; ``gpu_idle_us`` = ``wall_us`` - ``gpu_busy_us`` (0 on a rank whose trace holds
  no GPU activity at all: no GPU timeline was recorded, so none is idle);
* ``compute_us``, ``exposed_communication_us``, ``exposed_copy_us``: the busy time split by
  what runs (they add up to ``gpu_busy_us``); ``communication_us``: all collective time in the
  window, hidden under compute or not;
* ``carried_in_us``: the part of the busy time from work the step did not launch;
  ``carried_in_warmup_us``: the part of it launched before the rank's first step or with no
  launch recorded (the profiler's warm-up steps, work before the profiler started): a step
  holding much of it is not a steady step (``iterations``' kind ``warm-up``).

The rest (counts, GPU activity of the step's own launches, CPU time) is
:func:`~traceanalyze.analyses.accounting.iteration_times`'.
"""

from __future__ import annotations

import polars as pl

from traceanalyze.analyses.accounting import COUNT_COLUMNS, TIME_COLUMNS, iteration_times
from traceanalyze.analyses.activities import per_trace
from traceanalyze.analyses.step.split import SPLIT_COLUMNS, carried, window_split
from traceanalyze.analyses.step.window import STEP, step_windows
from traceanalyze.query import IN_MEMORY
from traceanalyze.trace import Trace

# The window's split (:mod:`.split`), in µs: what the step model adds to the classified rows.
SPLIT_US_COLUMNS = (
    "gpu_busy_us",
    "gpu_idle_us",
    "compute_us",
    "communication_us",
    "exposed_communication_us",
    "exposed_copy_us",
    "carried_in_us",
)
WINDOW_COLUMNS = ("wall_us", *SPLIT_US_COLUMNS)
# Every figure of a step row, in the order the tables show them.
STEP_COLUMNS = (*COUNT_COLUMNS, *TIME_COLUMNS, *WINDOW_COLUMNS)


@per_trace
def step_times(trace: Trace) -> pl.DataFrame:
    """One row per (rank, iteration) of ``trace.iterations`` with the accounting's columns,
    the window's bounds (``lo_ns``, ``hi_ns``) and ``wall_us``: what deciding which steps count
    needs (every command asks for it; the window's split, :func:`split_times`, only the
    commands that state it).

    Give it the trace whose iterations are all the steps (the regions, before any are left
    out): a window starts where the previous step's ends, so leaving a step out first would
    move the next one's window.
    """
    raw = step_windows(trace)
    windows = raw.lazy().with_columns(
        wall_us=(pl.col("hi_ns") - pl.col("lo_ns")).fill_null(0) / 1e3
    )
    warm_up = carried(trace.gpu.lazy(), raw, before_first=True).select(
        *STEP, carried_in_warmup_us=pl.col("carried_in_ns") / 1e3
    )
    return (
        iteration_times(trace)
        .lazy()
        .join(windows, on=STEP, how="left")
        .join(warm_up, on=STEP, how="left")
        .with_columns(pl.col("carried_in_warmup_us").fill_null(0.0))
        .select(
            *STEP,
            *COUNT_COLUMNS,
            *TIME_COLUMNS,
            "wall_us",
            "carried_in_warmup_us",
            "lo_ns",
            "hi_ns",
        )
        .sort(STEP)
        .collect(engine=IN_MEMORY)
    )


@per_trace
def split_times(trace: Trace) -> pl.DataFrame:
    """Per (rank, iteration) of ``trace.iterations`` (all the steps, as :func:`step_times`):
    ``SPLIT_US_COLUMNS``."""
    windows = step_windows(trace)
    split = window_split(trace, windows)
    recorded = trace.gpu.select("rank").unique().with_columns(_recorded=pl.lit(value=True))
    us = {name.removesuffix("_ns") + "_us": pl.col(name) / 1e3 for name in SPLIT_COLUMNS}
    wall_us = (pl.col("hi_ns") - pl.col("lo_ns")).fill_null(0) / 1e3
    # A rank whose trace holds no GPU activity at all has no GPU timeline: none of it is idle.
    idle = pl.when(pl.col("_recorded")).then(wall_us - pl.col("gpu_busy_us")).fill_null(0.0)
    return (
        windows.lazy()
        .join(split, on=STEP, how="left")
        .with_columns(**us)
        .join(recorded.lazy(), on="rank", how="left")
        .with_columns(gpu_idle_us=idle)
        .select(*STEP, *SPLIT_US_COLUMNS)
        .sort(STEP)
        .collect(engine=IN_MEMORY)
    )
