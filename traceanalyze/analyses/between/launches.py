"""`launches`: whether the CPU keeps the GPU fed, per launch, per kernel name and per category.

For every GPU activity launched inside the iterations by a runtime/driver call in the trace:

* ``launch_cpu_us``: the launch call's duration on the CPU;
* ``launch_delay_us``: the activity's start minus its launch call's start;
* ``queue``: activities on the same stream launched before it but not yet started when its
  launch call began (the work the GPU had in hand);
* ``short``: a kernel that runs for less time than its own launch call takes on the CPU, so the
  CPU cannot launch such kernels as fast as the GPU runs them.

Distributions are medians, 90th percentiles (linear interpolation) and maxima.
"""

from __future__ import annotations

import polars as pl

from traceanalyze.analyses.activities import activities, in_iterations, iteration_count, per_trace
from traceanalyze.analyses.iterations import on_counted
from traceanalyze.trace import Trace

STREAM = ["rank", "device", "stream"]
# A graph launch puts many kernels on the GPU with one call: its CPU time is not any one
# kernel's, so the short-kernel rule leaves its kernels out.
GRAPH_LAUNCH_APIS = ("cudaGraphLaunch", "hipGraphLaunch")
# A launch is an outlier when its delay exceeds this many times its kernel name's median delay
# and by at least OUTLIER_MIN_EXCESS_US (tiny delays are noise however large the ratio).
OUTLIER_FACTOR = 3.0
OUTLIER_MIN_EXCESS_US = 10.0
P90 = 0.9

LAUNCH_COLUMNS = (
    "rank", "device", "stream", "iteration", "name", "kind", "category", "op_name", "launch_api",
    "ts_ns", "dur_ns", "launch_ts_ns", "launch_dur_ns", "launch_cpu_us", "launch_delay_us",
    "queue", "short",
)  # fmt: skip


@per_trace
@on_counted
def launch_events(trace: Trace) -> pl.DataFrame:
    """One row per activity launched inside the iterations (columns :data:`LAUNCH_COLUMNS`)."""
    linked = activities(trace).filter(pl.col("launch_ts_ns").is_not_null())
    frame = _with_queue(linked).with_columns(
        launch_cpu_us=pl.col("launch_dur_ns") / 1e3,
        launch_delay_us=(pl.col("ts_ns") - pl.col("launch_ts_ns")) / 1e3,
        short=(pl.col("kind") == "kernel")
        & ~pl.col("launch_api").is_in(GRAPH_LAUNCH_APIS)
        & (pl.col("dur_ns") < pl.col("launch_dur_ns")),
    )
    return in_iterations(frame).select(LAUNCH_COLUMNS).sort("rank", "launch_ts_ns", "ts_ns")


def _with_queue(linked: pl.DataFrame) -> pl.DataFrame:
    """Add ``queue``: on the activity's stream, the activities launched before it (in launch
    order) minus those started by the time its launch call began, never below 0.

    Two sorted counts and an as-of join: no per-row work.
    """
    by_launch = linked.sort("launch_ts_ns", "ts_ns").with_columns(
        launched_before=pl.int_range(pl.len()).over(STREAM)
    )
    starts = (
        linked.select(*STREAM, start_ns=pl.col("ts_ns"))
        .sort("start_ns")
        .with_columns(started=pl.int_range(1, pl.len() + 1).over(STREAM))
    )
    joined = by_launch.join_asof(
        starts,
        left_on="launch_ts_ns",
        right_on="start_ns",
        by=STREAM,
        strategy="backward",
        check_sortedness=False,  # sorted by the key; Polars cannot check it within groups
    )
    queue = pl.col("launched_before") - pl.col("started").fill_null(0)
    return joined.with_columns(queue=pl.max_horizontal(queue, 0)).drop(
        "launched_before", "start_ns", "started"
    )


def _distribution(n: int) -> list[pl.Expr]:
    cpu, delay = pl.col("launch_cpu_us"), pl.col("launch_delay_us")
    return [
        # inside the counted iterations, not the whole trace as `kernels`' `count` is
        pl.len().alias("count_in_iterations"),
        (pl.len() / n).alias("count_per_iter"),
        cpu.median().alias("launch_cpu_us_median"),
        cpu.quantile(P90, "linear").alias("launch_cpu_us_p90"),
        cpu.max().alias("launch_cpu_us_max"),
        delay.median().alias("launch_delay_us_median"),
        delay.quantile(P90, "linear").alias("launch_delay_us_p90"),
        delay.max().alias("launch_delay_us_max"),
        pl.col("queue").median().alias("queue_median"),
        pl.col("queue").max().alias("queue_max"),
        (pl.col("dur_ns").median() / 1e3).alias("gpu_us_median"),
        pl.col("short").sum().alias("short_kernels"),
        (pl.col("short").sum() / n).alias("short_kernels_per_iter"),
    ]


@on_counted
def launch_table(trace: Trace) -> pl.DataFrame:
    """Per kernel (or copy/set) name: launch CPU time, launch delay and queue distributions and
    the short kernels, most launches per iteration first."""
    events = launch_events(trace)
    table = events.group_by("name").agg(
        pl.col("category").mode().sort().first(), *_distribution(iteration_count(trace))
    )
    return table.sort(
        ["count_in_iterations", "launch_delay_us_median", "name"], descending=[True, True, False]
    )


@on_counted
def launch_by_category(trace: Trace) -> pl.DataFrame:
    """The same distributions per kernel category."""
    events = launch_events(trace)
    table = events.group_by("category").agg(*_distribution(iteration_count(trace)))
    return table.sort(["count_in_iterations", "category"], descending=[True, False])


@on_counted
def launch_outliers(trace: Trace) -> pl.DataFrame:
    """Single launches whose delay is far above their kernel name's median (see
    :data:`OUTLIER_FACTOR`), longest delay first."""
    events = launch_events(trace).with_columns(
        name_median_delay_us=pl.col("launch_delay_us").median().over("name")
    )
    outlying = (pl.col("launch_delay_us") > OUTLIER_FACTOR * pl.col("name_median_delay_us")) & (
        pl.col("launch_delay_us") - pl.col("name_median_delay_us") >= OUTLIER_MIN_EXCESS_US
    )
    return (
        events.filter(outlying)
        .select(
            "name",
            "category",
            "iteration",
            "stream",
            "launch_delay_us",
            "name_median_delay_us",
            "queue",
            "launch_cpu_us",
            launch_op="op_name",
        )
        .sort(["launch_delay_us", "name"], descending=[True, False])
    )


@on_counted
def launch_health(trace: Trace) -> dict[str, float | int]:
    """Launch figures for the whole trace: launches and short kernels per iteration, the
    median launch CPU time and delay, and the median queue ahead of a launch."""
    events = launch_events(trace)
    n = iteration_count(trace)
    stats = events.select(
        launches_per_iter=pl.len() / n,
        short_kernels_per_iter=pl.col("short").sum() / n,
        launch_cpu_us_median=pl.col("launch_cpu_us").median(),
        launch_delay_us_median=pl.col("launch_delay_us").median(),
        queue_median=pl.col("queue").median(),
    ).row(0, named=True)
    return {key: (value if value is not None else 0.0) for key, value in stats.items()}
