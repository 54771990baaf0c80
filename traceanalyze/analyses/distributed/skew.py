"""Collective skew: how far apart the ranks of a job start the same collective.

The same collective is the same communication kernel name at the same occurrence (0 for the
first launch of that name in the iteration, 1 for the second, ...) in the same iteration
(``ProfilerStep#N`` numbers every rank's steps alike).

Each rank's trace is on its own host's clock, and hosts' clocks are not synchronised (they can
be milliseconds, or with a monotonic clock days, apart), so raw start times of different hosts
cannot be compared. A collective, though, completes on all its ranks at nearly the same moment:
no rank can finish an all-reduce before the last one has joined it. So by default (``ALIGN_ENDS``)
each rank's clock offset is estimated as the median, over the collectives it shares with the
reference rank (the lowest), of its end minus the reference rank's end, and starts are compared
after subtracting it. The median ignores a few collectives that do not end together. Clock drift
within one trace (parts per million over seconds) is left alone. ``ALIGN_NONE`` compares raw
clocks: right only when every rank ran on one host, whose processes share a clock.
"""

from __future__ import annotations

import polars as pl

from traceanalyze.analyses.activities import classified_activities
from traceanalyze.query import IN_MEMORY
from traceanalyze.trace import Trace

ALIGN_ENDS = "collective-ends"
ALIGN_NONE = "none"
ALIGNMENTS = (ALIGN_ENDS, ALIGN_NONE)
COLLECTIVE = ["iteration", "name", "occurrence"]

COLLECTIVE_SCHEMA = {
    "rank": pl.Int32(),
    "iteration": pl.Int64(),
    "name": pl.String(),
    "occurrence": pl.Int64(),
    "ts_ns": pl.Int64(),
    "end_ns": pl.Int64(),
}


def collective_starts(trace: Trace) -> pl.DataFrame:
    """One row per communication kernel launched in an iteration: ``COLLECTIVE_SCHEMA``."""
    # One query (in-memory engine) instead of three eager steps.
    kernels = (
        classified_activities(trace)
        .lazy()
        .filter(pl.col("iteration").is_not_null())
        .filter((pl.col("kind") == "kernel") & (pl.col("category") == "communication"))
    )
    occurrence = pl.col("ts_ns").rank("ordinal").over("rank", "iteration", "name") - 1
    return (
        kernels.select(
            "rank",
            "iteration",
            "name",
            occurrence=occurrence.cast(pl.Int64),
            ts_ns="ts_ns",
            end_ns=pl.col("ts_ns") + pl.col("dur_ns"),
        )
        .sort("rank", "iteration", "ts_ns")
        .collect(engine=IN_MEMORY)
    )


def clock_offsets(collectives: pl.DataFrame, ranks: pl.Series, align: str) -> pl.DataFrame:
    """``rank``, ``offset_ns``: what to subtract from each rank's times to compare them with
    the reference rank's. A rank sharing no collective with it has no row (it cannot be
    aligned); with ``ALIGN_NONE`` every rank's offset is 0."""
    if align == ALIGN_NONE:
        return pl.DataFrame({"rank": ranks, "offset_ns": 0.0}, schema=_OFFSETS)
    reference = collectives.filter(pl.col("rank") == ranks.min()).select(
        *COLLECTIVE, reference_end_ns="end_ns"
    )
    return (
        collectives.join(reference, on=COLLECTIVE, how="inner")
        .group_by("rank")
        .agg(offset_ns=(pl.col("end_ns") - pl.col("reference_end_ns")).median())
        .cast(_OFFSETS)  # type: ignore[arg-type]
        .sort("rank")
    )


_OFFSETS = {"rank": pl.Int32(), "offset_ns": pl.Float64()}


def collective_skew(collectives: pl.DataFrame, offsets: pl.DataFrame) -> pl.DataFrame:
    """One row per collective run by two or more aligned ranks: how many ran it, the spread of
    their starts, the first and last to start (none when they start together), and the mean
    duration; widest spread first."""
    aligned = collectives.join(offsets, on="rank", how="inner").with_columns(
        start_ns=pl.col("ts_ns") - pl.col("offset_ns")
    )
    start = pl.col("start_ns")
    spread = start.max() - start.min()
    # Among ranks that start at the same moment, the lowest is named.
    first = pl.col("rank").filter(start == start.min()).min()
    last = pl.col("rank").filter(start == start.max()).min()
    return (
        aligned.group_by(COLLECTIVE)
        .agg(
            ranks=pl.len().cast(pl.Int64),
            start_spread_us=spread / 1e3,
            first_rank=pl.when(spread > 0).then(first),
            last_rank=pl.when(spread > 0).then(last),
            mean_us=(pl.col("end_ns") - pl.col("ts_ns")).mean() / 1e3,
        )
        .filter(pl.col("ranks") >= 2)
        .sort(["start_spread_us", *COLLECTIVE], descending=[True, False, False, False])
    )


def alignment_notes(
    collectives: pl.DataFrame, offsets: pl.DataFrame, ranks: pl.Series, align: str
) -> list[str]:
    """What a reader must know about how the collectives were compared."""
    if not collectives.height:
        return ["No communication kernels in the iterations: no overlap and no collective skew."]
    reference = int(ranks.min())  # type: ignore[arg-type]
    if align == ALIGN_NONE:
        notes = ["Clocks compared raw (--align none): right only when every rank ran on one host."]
    else:
        notes = [
            "Trace clocks of different hosts are not synchronised: each rank's clock offset is "
            f"the median, over the collectives it shares with rank {reference}, of its "
            f"collective end minus rank {reference}'s (a collective completes on all ranks at "
            "nearly the same moment); starts are compared after subtracting it."
        ]
    unaligned = sorted(set(ranks.to_list()) - set(offsets["rank"].to_list()))
    if unaligned:
        shown = ", ".join(str(r) for r in unaligned)
        notes.append(
            f"Rank(s) {shown} share no collective with rank {reference}: their clocks cannot "
            "be aligned, so they are left out of the collective skew."
        )
    return notes
