"""Where a step's window went: compute, exposed communication, exposed copies and idle.

At every instant of a window the rank's GPU is doing one of four things, in this order of
precedence: running a compute kernel (any kernel but a collective), else a collective kernel
(communication that no compute hides: *exposed*), else a memory copy or set (exposed copies),
else nothing (idle). So

    wall = compute + exposed communication + exposed copies + idle,
    busy = compute + exposed communication + exposed copies.

A collective kernel's time includes the time it waits for its peers: it is the time the
collective takes on this rank, not the link's transfer time. ``communication_us`` is all of it
(hidden or not). ``carried_in_us`` is the busy time of work the step did not launch (launched
before it began: by an earlier step, before the profiler started, or outside every step).
"""

from __future__ import annotations

import polars as pl

from traceanalyze.analyses.activities import classified_activities
from traceanalyze.analyses.step.window import STEP, busy_in_windows, own_busy_in_windows
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
    split = split.join(own_busy_in_windows(gpu, windows, "_own_ns"), on=STEP, how="left")
    split = split.with_columns(pl.col(*unions, "_own_ns").fill_null(0))
    return split.select(
        *STEP,
        "gpu_busy_ns",
        "compute_ns",
        "communication_ns",
        exposed_communication_ns=pl.col("_kernels_ns") - pl.col("compute_ns"),
        exposed_copy_ns=pl.col("gpu_busy_ns") - pl.col("_kernels_ns"),
        carried_in_ns=pl.col("gpu_busy_ns") - pl.col("_own_ns"),
    )
