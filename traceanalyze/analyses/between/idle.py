"""`idle`: why the GPU sits idle in the steps, split into causes that add up, and the blocking
calls behind the syncs.

The idle time is the step model's ``gpu_idle_us`` (:mod:`traceanalyze.analyses.step`): per
step, the window's time with nothing running on the rank's GPU, leading and trailing stretches
included. It is made of gaps, each with one cause decided by causality
(:mod:`traceanalyze.analyses.step.gaps`): whether the work that ends it was already queued, or
else what the launching thread did until it launched it. ``by_stream`` attributes each gap to
the stream whose activity ends it; ``syncs`` prices every blocking call (``aten::item``,
``.cpu()``, a synchronize) by the CPU time it blocked and the GPU work it waited for.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from traceanalyze.analyses.activities import activities, in_iterations, iteration_count
from traceanalyze.analyses.iterations import counted, on_counted
from traceanalyze.analyses.step.clock import offset_note, one_stream
from traceanalyze.analyses.step.gaps import CAUSE_NAMES, CAUSES, QUEUED, QUEUED_ONE_STREAM_MEANING
from traceanalyze.analyses.step.model import step_model
from traceanalyze.display import Shown
from traceanalyze.trace import Trace

LARGEST_GAPS = 10
OPS_PER_GAP = 3


@dataclass(frozen=True, repr=False)  # Shown: a short repr, tables in Jupyter
class IdleResult(Shown):
    """Idle time per step split by cause; ``causes`` adds up to ``gpu_idle_us_per_iter``."""

    gpu_idle_us_per_iter: float
    causes: pl.DataFrame  # cause, us_per_iter, gaps_per_iter, share_of_idle_pct
    by_stream: pl.DataFrame  # rank, device, stream, cause, us_per_iter
    largest_gaps: pl.DataFrame  # the longest gaps with the CPU ops during them
    iterations: int
    # 0 when the counted iterations have no GPU activity: then there is no GPU timeline to be
    # idle, and an idle time of 0 is no evidence of a busy GPU.
    gpu_activities_per_iter: float
    # Blocking calls per op (and Python line): SYNC_COLUMNS of the step model.
    syncs: pl.DataFrame
    wall_us_per_iter: float
    bound: str
    # Why the causes cannot be read (the GPU's clock is offset from the CPU's), or None.
    clock_note: str | None = None
    # Every rank's work runs on one stream with no stream waits: `queued` then names no other
    # stream (gaps.QUEUED_ONE_STREAM_MEANING).
    one_stream: bool = False

    def meanings(self) -> dict[str, str]:
        """Each cause and what it means on this trace (``queued`` from the streams' evidence)."""
        return definitions() | ({QUEUED: QUEUED_ONE_STREAM_MEANING} if self.one_stream else {})


@on_counted
def idle_breakdown(trace: Trace, largest: int = LARGEST_GAPS) -> IdleResult:
    """The idle gaps of the counted steps by cause, per stream, the ``largest`` gaps and the
    blocking calls."""
    trace = counted(trace)
    model = step_model(trace)
    gaps = model.gaps
    n = iteration_count(trace)
    total_ns = int(gaps["gap_ns"].sum())
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
            share_of_idle_pct=pl.col("gap_ns").fill_null(0) / max(total_ns, 1) * 100,
        )
    )
    by_stream = (
        gaps.group_by("rank", "device", "stream", "cause")
        .agg(us_per_iter=pl.col("gap_ns").sum() / 1e3 / n)
        .sort(["rank", "device", "stream", "us_per_iter"], descending=[False, False, False, True])
    )
    busy = in_iterations(activities(trace)).height / n
    return IdleResult(
        model.means["gpu_idle_us_per_iter"],
        causes,
        by_stream,
        _largest_gaps(trace, gaps, largest),
        n,
        busy,
        model.syncs(trace),
        model.means["wall_us_per_iter"],
        model.verdict.bound,
        offset_note(list(model.clock)) if model.clock else None,
        one_stream(trace),
    )


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
