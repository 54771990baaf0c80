"""``clock_skew``: how far apart the rank clocks of a folder of ranks are.

A collective that needs every rank's data (all-reduce, all-gather, reduce-scatter, all-to-all,
barrier) completes on all its ranks at nearly the same moment, so on every rank's own clock its
end marks one instant. The same collective is matched across ranks as ``ranks`` matches them
(the same kernel name at the same occurrence in the same iteration), and only where every rank
that runs it runs that name as often in that iteration (the same sequence). A rank's offset is
the median, over the collectives it shares with the lowest rank, of its end minus that rank's;
it is trusted when those differences agree (their median absolute deviation from the offset
within ``CLOCK_SPREAD_US`` or ``CLOCK_SPREAD_PCT`` of the collectives' median duration).
Point-to-point send/recv is left out: a pair of ranks, not the group, ends it.
"""

from __future__ import annotations

from dataclasses import replace

import polars as pl

from traceanalyze.analyses.audit.figures import Finding
from traceanalyze.analyses.audit.rules import (
    CLOCK_SKEW_WARN_US,
    CLOCK_SPREAD_PCT,
    CLOCK_SPREAD_US,
    ENDS_TOGETHER,
)
from traceanalyze.analyses.audit.steps import counted_steps, step_count
from traceanalyze.analyses.audit.text import sentence
from traceanalyze.analyses.distributed.comms import Comms, collective_kind, comms
from traceanalyze.analyses.distributed.skew import COLLECTIVE, collective_starts
from traceanalyze.analyses.step.model import step_model
from traceanalyze.trace import Trace

CHECK_CLOCKS = "clock_skew"
CHECK_GPU_CLOCK = "gpu_clock_offset"
# The estimate of each rank: its offset, from how many collectives, how far they disagree.
OFFSET_SCHEMA = {
    "rank": pl.Int32(),
    "offset_ns": pl.Float64(),
    "collectives": pl.Int64(),
    "spread_ns": pl.Float64(),
    "trusted": pl.Boolean(),
}


def ending_together(collectives: pl.DataFrame) -> pl.DataFrame:
    """The collectives (skew.COLLECTIVE_SCHEMA rows) that must end together on every rank,
    where every rank that runs a name in an iteration runs it as often."""
    kinds = collectives.filter(collective_kind(pl.col("name")).is_in(ENDS_TOGETHER))
    counts = kinds.group_by("rank", "iteration", "name").agg(times=pl.len())
    same = counts.group_by("iteration", "name").agg(
        same=pl.col("times").n_unique() == 1, ranks=pl.len()
    )
    agreed = same.filter(pl.col("same") & (pl.col("ranks") >= 2)).select("iteration", "name")
    return kinds.join(agreed, on=["iteration", "name"], how="semi")


def estimate_offsets(collectives: pl.DataFrame) -> pl.DataFrame:
    """Per rank (:data:`OFFSET_SCHEMA`): its clock minus the lowest rank's, from the
    collectives of ``collectives`` that must end together; a rank sharing none has no row."""
    usable = ending_together(collectives)
    if not usable.height:
        return pl.DataFrame(schema=OFFSET_SCHEMA)
    reference = usable["rank"].min()
    ends = usable.filter(pl.col("rank") == reference).select(*COLLECTIVE, reference_ns="end_ns")
    differences = usable.join(ends, on=COLLECTIVE).with_columns(
        difference=pl.col("end_ns") - pl.col("reference_ns"),
        duration=pl.col("end_ns") - pl.col("ts_ns"),
    )
    offset = pl.col("difference").median()
    limit = pl.max_horizontal(
        pl.lit(CLOCK_SPREAD_US * 1e3), pl.col("duration").median() * CLOCK_SPREAD_PCT / 100
    )
    return (
        differences.group_by("rank")
        .agg(
            offset_ns=offset,
            collectives=pl.len(),
            spread_ns=(pl.col("difference") - offset).abs().median(),
            limit=limit,
        )
        .with_columns(trusted=pl.col("spread_ns") <= pl.col("limit"))
        .select(OFFSET_SCHEMA.keys())
        .cast(OFFSET_SCHEMA)  # type: ignore[arg-type]
        .sort("rank")
    )


def clock_skew(trace: Trace) -> list[Finding]:
    """The offset of each rank's clock, where the trace holds two or more ranks."""
    ranks = sorted(m.rank for m in trace.meta)
    if len(ranks) < 2:
        return []
    steps = counted_steps(trace)
    collectives = collective_starts(steps)
    offsets = estimate_offsets(collectives)
    trusted = offsets.filter(pl.col("trusted"))
    by_rank = {int(r): float(o) / 1e3 for r, o in trusted.select("rank", "offset_ns").iter_rows()}
    unknown = [r for r in ranks if r not in by_rank]
    used = ending_together(collectives)
    affected_us = float((used["end_ns"] - used["ts_ns"]).sum() or 0) / 1e3 / step_count(steps)
    found = []
    if unknown:
        found.append(_not_estimable(offsets, unknown, used.height))
    if len(by_rank) >= 2:
        widest = max(abs(o) for o in by_rank.values())
        finding = "skewed" if widest >= CLOCK_SKEW_WARN_US else "aligned"
        found.append(
            Finding(
                CHECK_CLOCKS,
                finding,
                len(by_rank),
                affected_us,
                sentence(
                    [
                        f"offsets from rank {min(by_rank)}'s clock: "
                        + ", ".join(f"rank {r} {o:+,.3f} µs" for r, o in sorted(by_rank.items())),
                        f"from {used.height:,} collective kernels that end together "
                        f"(tolerance {CLOCK_SKEW_WARN_US:g} µs)",
                    ]
                ),
                {"clock_offset_us": widest} if finding == "skewed" else {},
                offsets_us=by_rank,
            )
        )
    return found


def _not_estimable(offsets: pl.DataFrame, unknown: list[int], used: int) -> Finding:
    loose = offsets.filter(~pl.col("trusted"))
    # One row per rank whose collectives disagree: a handful.
    disagree = ", ".join(
        f"rank {r}: ends ±{s / 1e3:,.1f} µs around {o / 1e3:+,.1f} µs"
        for r, o, s in loose.select("rank", "offset_ns", "spread_ns").iter_rows()
    )
    return Finding(
        CHECK_CLOCKS,
        "not_estimable",
        len(unknown),
        0.0,
        sentence(
            [
                "rank(s) " + ", ".join(map(str, unknown)) + " cannot be aligned",
                "no collective that must end together (all-reduce, all-gather, reduce-scatter, "
                "all-to-all, barrier; send/recv pairs ranks) is run alike by the ranks"
                if not used
                else "",
                f"their shared collectives do not end together ({disagree})" if disagree else "",
            ]
        ),
    )


def trusted_offsets(collectives: pl.DataFrame) -> pl.DataFrame:
    """``rank``, ``offset_ns`` of the ranks whose offset :func:`estimate_offsets` trusts (the
    reference rank's is 0): what ``--clock-align`` subtracts from each rank's times."""
    return estimate_offsets(collectives).filter(pl.col("trusted")).select("rank", "offset_ns")


def offsets_note(offsets: pl.DataFrame, ranks: list[int]) -> str:
    """What ``--clock-align`` did, in one sentence."""
    shown = ", ".join(
        f"rank {r} {o / 1e3:+,.3f} µs" for r, o in offsets.select("rank", "offset_ns").iter_rows()
    )  # one row per rank
    left = sorted(set(ranks) - set(offsets["rank"].to_list()))
    unaligned = (
        f"; rank(s) {', '.join(map(str, left))} left on their own clock (no collective that "
        "ends together agrees on an offset)"
        if left
        else ""
    )
    applied = f"subtracted {shown}" if shown else "no offset to apply"
    return (
        "Clocks aligned with the audit's clock_skew offsets (--clock-align; each rank's end of "
        f"the collectives that must end together, against the lowest rank's): {applied}"
        f"{unaligned}."
    )


def aligned_comms(trace: Trace) -> Comms:
    """`comms` of ``trace`` on aligned clocks (``--clock-align``): each call's ``ts_ns`` on the
    lowest rank's clock, ``clock_offset_us`` what was subtracted from it (null for a rank left
    on its own clock), and a note saying so."""
    offsets = trusted_offsets(collective_starts(counted_steps(trace)))
    result = comms(counted_steps(align_clocks(trace, offsets)))
    subtracted = offsets.select("rank", clock_offset_us=pl.col("offset_ns") / 1e3)
    calls = result.calls.join(subtracted, on="rank", how="left", maintain_order="left")
    note = offsets_note(offsets, sorted(m.rank for m in trace.meta)).rstrip(".")
    return replace(result, calls=calls, notes=(*result.notes, note))


def align_clocks(trace: Trace, offsets: pl.DataFrame) -> Trace:
    """``trace`` with each rank's times less its offset (``trusted_offsets``): on the lowest
    rank's clock (the input Trace is left as it is)."""
    shift = offsets.select("rank", _shift=pl.col("offset_ns").round(0).cast(pl.Int64))
    return replace(
        trace,
        gpu=_shifted(trace.gpu, shift),
        cpu=_shifted(trace.cpu, shift),
        flows=_shifted(trace.flows, shift),
        instants=_shifted(trace.instants, shift),
        iterations=_shifted(trace.iterations, shift),
        memory=_shifted(trace.memory, shift),
        python=_shifted(trace.python, shift),
    )


def _shifted(frame: pl.DataFrame, shift: pl.DataFrame) -> pl.DataFrame:
    """``frame`` with every time column (``ts_ns``, ``launch_ts_ns``) less its rank's shift."""
    if not frame.height or not shift.height:
        return frame
    times = [c for c in ("ts_ns", "launch_ts_ns") if c in frame.columns]
    return (
        frame.join(shift, on="rank", how="left", maintain_order="left")
        .with_columns(pl.col(times) - pl.col("_shift").fill_null(0))
        .drop("_shift")
    )


def gpu_clock_offset(trace: Trace) -> list[Finding]:
    """Ranks whose GPU clock is offset from their CPU clock, or drifts from it (the step
    model's rule, :mod:`~traceanalyze.analyses.step.clock`): the step model then gives no idle
    cause or verdict, and says why. The model is the one every per-step figure of the audit
    reads (built once per trace)."""
    steps = counted_steps(trace)
    offsets = step_model(steps).clock
    # A handful of ranks: the offset shown, and the doubt where the trace cannot tell.
    return [
        Finding(
            CHECK_GPU_CLOCK,
            finding,
            sum(o.launches for o in mine),
            0.0,
            sentence([o.describe() for o in mine]),
            verdict_changes=True,
        )
        for finding, mine in (
            (kind, [o for o in offsets if o.finding == kind])
            for kind in ("offset", "drift", "unclear")
        )
        if mine
    ]
