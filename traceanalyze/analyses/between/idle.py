"""`idle`: why the GPU sits idle inside the iterations, split into causes that add up.

The idle time is the accounting model's ``gpu_idle_us``: per iteration and device, the GPU span
minus the busy time (the union of the activities across streams). Those are exactly the *device
gaps*: stretches between the iteration's first and last activity where no stream runs anything.
Each device gap ends when some activity starts, on some stream; that activity's stream gap (the
time since the previous activity on its own stream ended) contains the device gap, so the gap is
attributed to that stream and classified by that activity's launch, by the first rule of
:data:`CAUSES` that applies. Per-stream gaps that another stream's work covers are not idle
device time and are not split (``streams`` shows each stream's own idle time).
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from traceanalyze.analyses.activities import activities, in_iterations, iteration_count, per_trace
from traceanalyze.analyses.iterations import on_counted
from traceanalyze.display import Shown
from traceanalyze.link import RUNTIME_CATS
from traceanalyze.trace import Trace

DEVICE = ["rank", "iteration", "device"]
# A gap shorter than this before an activity that was already launched is the GPU's own
# dispatch overhead between queued work (HTA's default threshold is 30 µs).
LAUNCH_OVERHEAD_MAX_US = 10.0
# Calls that block the CPU until GPU work finishes, or make a stream wait (CUDA runtime and
# driver, HIP). A blocking memcpy is the synchronous API (cudaMemcpy, hipMemcpy).
SYNC_CALLS = (
    "cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize",
    "cudaStreamWaitEvent", "cudaMemcpy", "cudaMemcpy2D", "cudaMemset", "cuCtxSynchronize",
    "cuStreamSynchronize", "cuEventSynchronize", "cuStreamWaitEvent", "cuMemcpyDtoH_v2",
    "cuMemcpyHtoD_v2", "hipDeviceSynchronize", "hipStreamSynchronize", "hipEventSynchronize",
    "hipStreamWaitEvent", "hipMemcpy", "hipMemset",
)  # fmt: skip
LARGEST_GAPS = 10
OPS_PER_GAP = 3


@dataclass(frozen=True)
class IdleCause:
    """A cause of a device gap: its name, the condition on the gap's columns (``gap_ns``,
    ``gap_start_ns``, ``launch_end_ns``, ``sync_overlaps``) and what it means."""

    cause: str
    applies: pl.Expr
    meaning: str


# First match wins; the last always applies, so every gap gets exactly one cause.
CAUSES: tuple[IdleCause, ...] = (
    IdleCause(
        "sync",
        pl.col("sync_overlaps"),
        "a synchronisation call (device/stream/event synchronize, stream wait on an event, "
        "blocking memcpy) runs on the CPU during the gap",
    ),
    IdleCause(
        "host_wait",
        pl.col("launch_end_ns") > pl.col("gap_start_ns"),
        "the launch call of the activity that ends the gap returned after the gap began: the "
        "GPU waited for the CPU",
    ),
    IdleCause(
        "launch_overhead",
        pl.col("gap_ns") < LAUNCH_OVERHEAD_MAX_US * 1e3,
        f"the next activity was already launched and the gap is under "
        f"{LAUNCH_OVERHEAD_MAX_US:g} µs: dispatch overhead between queued work",
    ),
    IdleCause(
        "other",
        pl.lit(True),
        "the next activity was launched before the gap and still waited longer (e.g. for an "
        "event of another device or stream)",
    ),
)
CAUSE_NAMES = tuple(c.cause for c in CAUSES)


@dataclass(frozen=True, repr=False)  # Shown: a short repr, tables in Jupyter
class IdleResult(Shown):
    """Idle time per iteration split by cause; ``causes`` adds up to ``gpu_idle_us_per_iter``."""

    gpu_idle_us_per_iter: float
    causes: pl.DataFrame  # cause, us_per_iter, gaps_per_iter, share_of_idle_pct
    by_stream: pl.DataFrame  # rank, device, stream, cause, us_per_iter
    largest_gaps: pl.DataFrame  # the longest gaps with the CPU ops during them
    iterations: int
    # 0 when the counted iterations have no GPU activity: then there is no GPU timeline to be
    # idle, and an idle time of 0 is no evidence of a busy GPU.
    gpu_activities_per_iter: float


def _cause() -> pl.Expr:
    expr: pl.Expr = pl.lit(None, pl.String)
    for rule in reversed(CAUSES):
        expr = pl.when(rule.applies).then(pl.lit(rule.cause)).otherwise(expr)
    return expr


@per_trace
@on_counted
def device_gaps(trace: Trace) -> pl.DataFrame:
    """One row per device gap inside an iteration: where it starts and ends, the activity that
    ends it (its stream, name, launch call) and its cause."""
    gaps = activity_gaps(in_iterations(activities(trace)), DEVICE)
    return _with_sync(gaps, trace).with_columns(cause=_cause())


def activity_gaps(gpu: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """Per group of ``by`` (rows of the gpu frame), every gap: where an activity starts after
    every earlier one of its group has ended. With ``by`` (rank, iteration, device) these are
    the accounting model's idle time (span minus the union of the intervals), exactly."""
    ordered = gpu.sort([*by, "ts_ns", "stream", "launch_ts_ns"]).with_columns(
        gap_start_ns=(pl.col("ts_ns") + pl.col("dur_ns")).cum_max().shift(1).over(by)
    )
    return ordered.filter(pl.col("ts_ns") > pl.col("gap_start_ns")).select(
        *dict.fromkeys([*by, "stream"]),
        "gap_start_ns",
        gap_end_ns=pl.col("ts_ns"),
        gap_ns=pl.col("ts_ns") - pl.col("gap_start_ns"),
        next_activity=pl.col("name"),
        launch_ts_ns="launch_ts_ns",
        launch_end_ns=pl.col("launch_ts_ns") + pl.col("launch_dur_ns"),
        launch_api="launch_api",
    )


def _with_sync(gaps: pl.DataFrame, trace: Trace) -> pl.DataFrame:
    """Add ``sync_overlaps``: some sync call of the rank starts before the gap ends and ends
    after it starts (the latest end among calls started before the gap's end, by an as-of
    join on the calls sorted by start)."""
    calls = (
        trace.cpu.filter(pl.col("cat").is_in(RUNTIME_CATS) & pl.col("name").is_in(SYNC_CALLS))
        .select("rank", call_ts_ns="ts_ns", call_end_ns=pl.col("ts_ns") + pl.col("dur_ns"))
        .sort("call_ts_ns")
        .with_columns(reach_ns=pl.col("call_end_ns").cum_max().over("rank"))
    )
    joined = gaps.sort("gap_end_ns").join_asof(
        calls.select("rank", "call_ts_ns", "reach_ns"),
        left_on="gap_end_ns",
        right_on="call_ts_ns",
        by="rank",
        strategy="backward",
        allow_exact_matches=False,
        check_sortedness=False,  # sorted by the key; Polars cannot check it within groups
    )
    return joined.with_columns(
        sync_overlaps=(pl.col("reach_ns") > pl.col("gap_start_ns")).fill_null(False)
    ).drop("call_ts_ns", "reach_ns")


@on_counted
def idle_breakdown(trace: Trace, largest: int = LARGEST_GAPS) -> IdleResult:
    """The device gaps of the iterations by cause, per stream, and the ``largest`` gaps."""
    gaps = device_gaps(trace)
    n = iteration_count(trace)
    # The accounting model's gpu_idle_us (span minus busy per iteration and device) is the sum
    # of these gaps by construction; summing them here spares building the CPU figures too.
    idle_us = int(gaps["gap_ns"].sum()) / 1e3 / n
    causes = (
        pl.DataFrame({"cause": CAUSE_NAMES})
        .join(
            gaps.group_by("cause").agg(gap_ns=pl.col("gap_ns").sum(), gaps=pl.len()),
            on="cause",
            how="left",
        )
        .select(
            "cause",
            us_per_iter=pl.col("gap_ns").fill_null(0) / 1e3 / n,
            gaps_per_iter=pl.col("gaps").fill_null(0) / n,
            share_of_idle_pct=pl.col("gap_ns").fill_null(0) / max(gaps["gap_ns"].sum(), 1) * 100,
        )
    )
    by_stream = (
        gaps.group_by("rank", "device", "stream", "cause")
        .agg(us_per_iter=pl.col("gap_ns").sum() / 1e3 / n)
        .sort(["rank", "device", "stream", "us_per_iter"], descending=[False, False, False, True])
    )
    busy = in_iterations(activities(trace)).height / n
    return IdleResult(idle_us, causes, by_stream, _largest_gaps(trace, gaps, largest), n, busy)


def _largest_gaps(trace: Trace, gaps: pl.DataFrame, largest: int) -> pl.DataFrame:
    """The longest gaps, each with the CPU ops and runtime calls that overlap it most (the
    deepest first at equal overlap: the innermost op says what the CPU was doing)."""
    steps = trace.iterations.select("rank", "iteration", step_ts_ns="ts_ns")
    top = (
        gaps.sort(["gap_ns", "gap_start_ns"], descending=[True, False])
        .head(largest)
        .with_row_index("gap")
        .join(steps, on=["rank", "iteration"])
    )
    cpu = trace.cpu.filter(pl.col("cat") != "user_annotation").select(
        "rank", "name", "depth", op_ts_ns="ts_ns", op_end_ns=pl.col("ts_ns") + pl.col("dur_ns")
    )
    # Two inequalities only (an interval join); the rank is matched after, as an equality
    # beside them makes Polars fall back to a much slower join.
    during = (
        top.select("gap", "rank", "gap_start_ns", "gap_end_ns")
        .join_where(
            cpu,
            pl.col("op_ts_ns") < pl.col("gap_end_ns"),
            pl.col("op_end_ns") > pl.col("gap_start_ns"),
        )
        .filter(pl.col("rank") == pl.col("rank_right"))
    )
    ops = (
        during.with_columns(
            overlap_ns=pl.min_horizontal("op_end_ns", "gap_end_ns")
            - pl.max_horizontal("op_ts_ns", "gap_start_ns")
        )
        .sort(["gap", "overlap_ns", "depth"], descending=[False, True, True])
        .group_by("gap", maintain_order=True)
        .agg(cpu_ops=pl.col("name").unique(maintain_order=True).head(OPS_PER_GAP).str.join(", "))
    )
    return (
        top.join(ops, on="gap", how="left")
        .sort("gap")
        .select(
            "iteration",
            "device",
            "stream",
            gap_us=pl.col("gap_ns") / 1e3,
            starts_at_us=(pl.col("gap_start_ns") - pl.col("step_ts_ns")) / 1e3,
            cause="cause",
            next_activity="next_activity",
            launch_api="launch_api",
            cpu_ops=pl.col("cpu_ops").fill_null(""),
        )
    )


def definitions() -> dict[str, str]:
    """Each cause and what it means, in rule order."""
    return {rule.cause: rule.meaning for rule in CAUSES}
