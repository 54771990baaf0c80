"""`ranks`: one row per rank of a job, the stragglers, and how far apart collectives start.

The work splits in two so that an engine (:mod:`traceanalyze.engine`) can run the first half
where each rank's file is, one rank at a time:

* :func:`rank_work`, a pure function of a (single-rank) Trace, gives that rank's row and the
  start and end of each of its collectives: a few hundred rows, cheap to send between processes.
* :func:`ranks_analysis` reads only those small results, so a folder of 64 ranks needs no more
  memory than the ranks being converted at the time.

Times follow :mod:`traceanalyze.analyses.accounting`: per rank, means over its iterations.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import polars as pl

from traceanalyze.analyses.accounting import ITERATION, busy_and_span_query
from traceanalyze.analyses.activities import classified_activities
from traceanalyze.analyses.audit import audit
from traceanalyze.analyses.audit.clocks import offsets_note, trusted_offsets
from traceanalyze.analyses.audit.figures import COMMAND_FIGURES
from traceanalyze.analyses.distributed.comms import collective_calls
from traceanalyze.analyses.distributed.skew import (
    ALIGN_ENDS,
    ALIGNMENTS,
    alignment_notes,
    clock_offsets,
    collective_skew,
    collective_starts,
)
from traceanalyze.analyses.iterations import on_counted
from traceanalyze.analyses.step.model import step_model
from traceanalyze.display import Shown
from traceanalyze.errors import UsageError
from traceanalyze.query import IN_MEMORY
from traceanalyze.trace import Skipped, Trace, TraceMeta

COMMUNICATION = "communication"
DEFAULT_STRAGGLER_PCT = 10.0
# The alignment `ranks --clock-align` reports (the audit's clock_skew offsets).
CLOCK_ALIGN = "clock-align"
_DEVICE = [*ITERATION, "device"]

# The rank table's columns, in order (the JSON keys of `ranks --format json`).
RANK_COLUMNS = (
    "rank",
    "iterations",
    "wall_us_per_iter",
    "wall_pct_over_median",
    "straggler",
    "gpu_busy_us_per_iter",
    "gpu_kernel_us_per_iter",
    "communication_kernel_us_per_iter",
    "exposed_communication_us_per_iter",
    "overlap_pct_of_communication",
    "collective_busbw_gbps_median",
    "gpu_idle_us_per_iter",
    "clock_offset_us",
    "collectives_started_last",
)


@dataclass(frozen=True)
class RankWork:
    """What one trace contributes to the folder's analysis (small frames only)."""

    meta: tuple[TraceMeta, ...]
    rows: pl.DataFrame  # one row per rank: the per-rank columns of RANK_COLUMNS
    collectives: pl.DataFrame  # see skew.collective_starts
    # The audit's warnings about figures `ranks` prints (`traceanalyze audit` of the rank).
    audit_warnings: tuple[str, ...] = ()


@dataclass(frozen=True, repr=False)  # Shown: a short repr, tables in Jupyter
class RanksResult(Shown):
    ranks: pl.DataFrame  # one row per rank, RANK_COLUMNS
    collectives: pl.DataFrame  # one row per collective run on two or more ranks, widest first
    median_wall_us_per_iter: float | None
    straggler_pct: float
    alignment: str
    notes: tuple[str, ...]
    median_start_spread_us: float | None = None
    max_start_spread_us: float | None = None
    skipped: tuple[Skipped, ...] = ()  # files of the folder that are not traces, with why
    audit_warnings: tuple[str, ...] = ()  # the ranks' audit warnings (see RankWork)

    @property
    def stragglers(self) -> list[int]:
        return self.ranks.filter(pl.col("straggler"))["rank"].to_list()


@on_counted
def rank_work(trace: Trace) -> RankWork:
    """The per-rank half: pure, from one loaded trace (a trace of several ranks gives a row
    for each)."""
    warnings = audit(trace).warnings_for(COMMAND_FIGURES["ranks"])
    where = trace.path.name
    return RankWork(
        trace.meta,
        rank_rows(trace),
        collective_starts(trace),
        tuple(f"{where}: {key}: {text}" for key, text in warnings.items()),
    )


def rank_rows(trace: Trace) -> pl.DataFrame:
    """Per rank: step (wall) time, GPU busy, kernel, communication kernel and exposed
    communication time, the overlap share and GPU idle time, means over the iterations."""
    figures = ("communication_kernel_us", "communication_busy_us", "device_exposed_us")
    # The step model's figures per rank (one definition each, docs/time.md: the wall and the
    # exposed communication are the summary's, per rank); the overlap share is this table's
    # own, per device (a device's collective is hidden only by its own compute).
    step_figures = ("wall_us", "gpu_busy_us", "gpu_kernel_us", "gpu_idle_us")
    # One query (in-memory engine) over the two small per-iteration tables.
    per_iteration = (
        step_model(trace)
        .steps.lazy()
        .select(*ITERATION, *step_figures, "exposed_communication_us")
        .join(_communication_times(trace).lazy(), on=ITERATION, how="left")
        # An iteration without communication has none of it, not an unknown amount.
        .with_columns(pl.col(figures).fill_null(0.0))
    )
    busy = pl.col("communication_busy_us").sum()
    overlapped = busy - pl.col("device_exposed_us").sum()
    return (
        per_iteration.group_by("rank")
        .agg(
            iterations=pl.len(),
            wall_us_per_iter=pl.col("wall_us").mean(),
            gpu_busy_us_per_iter=pl.col("gpu_busy_us").mean(),
            gpu_kernel_us_per_iter=pl.col("gpu_kernel_us").mean(),
            communication_kernel_us_per_iter=pl.col("communication_kernel_us").mean(),
            exposed_communication_us_per_iter=pl.col("exposed_communication_us").mean(),
            overlap_pct_of_communication=pl.when(busy > 0).then(overlapped / busy * 100),
            gpu_idle_us_per_iter=pl.col("gpu_idle_us").mean(),
        )
        .with_columns(pl.col("iterations").cast(pl.Int64))
        .join(_bus_bandwidth(trace), on="rank", how="left")
        .sort("rank")
        .collect(engine=IN_MEMORY)
    )


def _bus_bandwidth(trace: Trace) -> pl.LazyFrame:
    """Per rank: the median bus bandwidth of its collective calls (`comms`), where known."""
    return (
        collective_calls(trace)
        .lazy()
        .group_by("rank")
        .agg(collective_busbw_gbps_median=pl.col("busbw_gbps").median())
    )


def _communication_times(trace: Trace) -> pl.DataFrame:
    """Per (rank, iteration): communication kernel time, the union of the communication
    kernels' intervals, and the part of that union with no compute kernel running.

    On each device C is the union of the communication kernels, K the union of the other
    kernels; exposed = |C| - |C and K| = |C or K| - |K|, three interval unions: C and K by
    device and kind of kernel, C or K by device, in one query (its ~25 eager steps were
    ~10 ms of a 15 MB rank, most of it each step's fixed cost).
    """
    kernels = (
        classified_activities(trace)
        .filter(pl.col("iteration").is_not_null() & (pl.col("kind") == "kernel"))
        .select(*_DEVICE, "ts_ns", "dur_ns", communication=pl.col("category") == COMMUNICATION)
    )
    by_kind = busy_and_span_query(kernels, [*_DEVICE, "communication"])
    either = busy_and_span_query(kernels, _DEVICE).select(*_DEVICE, either_ns="busy_ns")
    busy, communication = pl.col("busy_ns"), pl.col("communication")
    per_device = (
        by_kind.group_by(_DEVICE)
        .agg(
            has_c=communication.any(),
            c_ns=busy.filter(communication).sum(),
            # A device with no compute kernel has K empty: 0.
            k_ns=busy.filter(~communication).sum(),
        )
        # Only the devices that run communication kernels.
        .filter("has_c")
        .join(either, on=_DEVICE, how="left")
        .group_by(ITERATION)
        .agg(
            communication_busy_us=pl.col("c_ns").sum() / 1e3,
            device_exposed_us=(pl.col("either_ns") - pl.col("k_ns")).sum() / 1e3,
        )
    )
    durations = (
        kernels.lazy()
        .filter(communication)
        .group_by(ITERATION)
        .agg(communication_kernel_us=pl.col("dur_ns").sum() / 1e3)
    )
    return durations.join(per_device, on=ITERATION, how="left").collect(engine=IN_MEMORY)


def ranks_analysis(
    works: Sequence[RankWork],
    *,
    straggler_pct: float = DEFAULT_STRAGGLER_PCT,
    align: str = ALIGN_ENDS,
    clock_align: bool = False,
) -> RanksResult:
    """The folder half: stragglers and collective skew from the per-rank results alone;
    ``clock_align`` aligns the clocks with the audit's offsets instead of ``align``'s."""
    if align not in ALIGNMENTS:
        raise UsageError(
            f"unknown clock alignment {align!r}", fix=f"Use one of: {', '.join(ALIGNMENTS)}."
        )
    if straggler_pct < 0:
        raise UsageError(
            f"a straggler threshold of {straggler_pct}% is negative",
            fix="Give a threshold of 0% or more (the default is 10%).",
        )
    rows = pl.concat([w.rows for w in works]).sort("rank")
    collectives = pl.concat([w.collectives for w in works])
    offsets = (
        trusted_offsets(collectives)
        if clock_align
        else clock_offsets(collectives, rows["rank"], align)
    )
    notes = (
        [offsets_note(offsets, rows["rank"].to_list())]
        if clock_align and collectives.height
        else alignment_notes(collectives, offsets, rows["rank"], align)
    )
    skew = collective_skew(collectives, offsets)
    median = rows["wall_us_per_iter"].median()
    over = (pl.col("wall_us_per_iter") / median - 1) * 100 if median else pl.lit(None)
    last = skew.group_by(rank="last_rank").agg(collectives_started_last=pl.len())
    ranks = (
        rows.with_columns(wall_pct_over_median=over.cast(pl.Float64))
        .with_columns(straggler=(pl.col("wall_pct_over_median") > straggler_pct).fill_null(False))
        .join(
            offsets.select("rank", clock_offset_us=pl.col("offset_ns") / 1e3), on="rank", how="left"
        )
        .join(last.with_columns(pl.col("rank").cast(pl.Int32)), on="rank", how="left")
        .with_columns(pl.col("collectives_started_last").cast(pl.Int64).fill_null(0))
        .select(RANK_COLUMNS)
    )
    spreads = skew.select(
        median=pl.col("start_spread_us").median(), max=pl.col("start_spread_us").max()
    ).row(0)
    return RanksResult(
        ranks=ranks,
        collectives=skew,
        median_wall_us_per_iter=_number(median),
        straggler_pct=straggler_pct,
        alignment=CLOCK_ALIGN if clock_align else align,
        notes=tuple(notes),
        median_start_spread_us=_number(spreads[0]),
        max_start_spread_us=_number(spreads[1]),
        audit_warnings=tuple(line for w in works for line in w.audit_warnings),
    )


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) else None


# One sentence per figure of the rank table, printed with it (and in the README).
RANK_DEFINITIONS: dict[str, str] = {
    "wall_pct_over_median": "how much longer the rank's step time is than the median over "
    "all ranks, in percent (negative: shorter)",
    "straggler": "the step time exceeds the median by more than the threshold; in a "
    "synchronous job the other ranks wait for it inside their collectives, so a straggler "
    "can also show as the rank with the least exposed communication",
    "communication_kernel_us_per_iter": "the communication kernels' (NCCL/RCCL) part of the "
    "GPU kernel time",
    "overlap_pct_of_communication": "the share of the time communication kernels run (their "
    "union per device) during which a compute kernel runs too on the same device",
    "clock_offset_us": "the rank's clock minus the reference rank's, estimated from "
    "collective ends (see the alignment note)",
    "collectives_started_last": "how many collectives the rank started last, on aligned "
    "clocks: the rank the others waited for (ties name the lowest rank)",
    "start_spread_us": "for one collective (the same kernel name, the same occurrence in the "
    "same iteration on every rank), the latest start minus the earliest, on aligned clocks",
}
