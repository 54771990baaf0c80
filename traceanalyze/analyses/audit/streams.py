"""One stream's activities in order: ``overlapping_on_stream`` and ``duration_overflow``.

A stream runs its work in order, so on one (rank, device, stream) an activity starts after
every earlier one ended. Walking a stream by start time, an activity that starts before the
latest end so far overlaps the activity that set that end (its *blocker*). An overlap is, in
this order of precedence: a duplicated record (same name and correlation id); branches of one
graph replay; a programmatic dependent launch (the later activity launched with an extended
launch call on compute capability 9.0+, in the tail of the one before); the blocker's duration
overflowing (it runs past the
start of its next activity by more than the time it had before it); else a timing error,
one per blocker, by how far the blocker runs past the start of the first activity it overlaps.
Separately, an activity implausibly long for its kind is an overflow too.
"""

from __future__ import annotations

import polars as pl

from traceanalyze.analyses.activities import classified_activities, per_trace
from traceanalyze.analyses.audit.figures import Finding, weighed
from traceanalyze.analyses.audit.rules import (
    GRAPH_TWIN_NS,
    IMPLAUSIBLE_MIN_EXCESS_US,
    IMPLAUSIBLE_MIN_PEERS,
    IMPLAUSIBLE_RATIO,
    IMPLAUSIBLE_US,
    PDL_LAUNCH_APIS,
    PDL_MAX_OVERLAP_PCT,
    PDL_MAX_OWN_OVERLAP_PCT,
    PDL_MIN_COMPUTE_MAJOR,
)
from traceanalyze.analyses.audit.steps import (
    Weight,
    all_steps,
    counted_rows,
    counted_steps,
    step_count,
    weigh,
)
from traceanalyze.analyses.audit.text import clipped, examples, sentence
from traceanalyze.analyses.graphs import GRAPH_LAUNCH_APIS
from traceanalyze.trace import Trace

CHECK_OVERLAP = "overlapping_on_stream"
CHECK_OVERFLOW = "duration_overflow"
STREAM = ["rank", "device", "stream"]
# Overlap kinds that are faults (the others are by design); the repair of each.
_FAULTS = ("duplicate", "timing")
_KINDS = ("duplicate", "timing", "programmatic_launch", "graph_branches")
# The launch shape that makes two runs of one kernel the same work (copies and sets: size).
_SHAPE = ["kind", "name", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "bytes"]


@per_trace
def stream_walk(trace: Trace) -> pl.DataFrame:
    """Every activity in stream order with ``_row`` (its row in the gpu frame), ``end_ns``,
    the next activity's start (``next_ts``), its blocker (``b_row``, ``b_end``, ``b_*``: the
    earlier activity with the latest end, null for the first), ``overlap_ns`` (0 when it
    starts after every earlier one ended), ``how`` it overlaps (null: it does not, or its
    blocker's duration overflows) and whether it ``overflows``."""
    gpu = trace.gpu
    ordered = (
        gpu.with_row_index("_row")
        .with_columns(end_ns=pl.col("ts_ns") + pl.col("dur_ns"))
        .sort([*STREAM, "ts_ns", "end_ns"], maintain_order=True)
        .with_columns(running=pl.col("end_ns").cum_max().over(STREAM))
    )
    # The row that set the running latest end (the last to reach it), as of the row before.
    setter = pl.when(pl.col("end_ns") >= pl.col("running")).then(pl.col("_row"))
    ordered = ordered.with_columns(
        b_row=setter.forward_fill().over(STREAM).shift(1).over(STREAM),
        b_end=pl.col("running").shift(1).over(STREAM),
        next_ts=pl.col("ts_ns").shift(-1).over(STREAM),
    )
    rows = ordered["b_row"]
    ordered = ordered.with_columns(
        b_name=gpu["name"].gather(rows),
        b_correlation=gpu["correlation"].gather(rows),
        b_ts=gpu["ts_ns"].gather(rows),
        b_api=gpu["launch_api"].gather(rows),
        b_dur=gpu["dur_ns"].gather(rows),
        # min_horizontal skips nulls: the first activity of a stream has no blocker.
        overlap_ns=pl.when(pl.col("b_end").is_not_null())
        .then((pl.min_horizontal("b_end", "end_ns") - pl.col("ts_ns")).clip(0))
        .otherwise(0),
    ).with_columns(
        # An activity that starts before its launch call (bad_timestamps/before_launch): its
        # start is wrong, so what it overlaps is part of that fault, not this check's.
        raw=pl.when(~_EARLY).then(_raw_kind(trace)),
        early=_EARLY,
    )
    # An activity overflows when it runs past its next one's start by more than the time it
    # had before it, and the next one does not overlap it by design (or as its duplicate);
    # neither starts before its own launch call (that fault's).
    overflows = (
        (pl.col("end_ns") - pl.col("next_ts") > pl.col("next_ts") - pl.col("ts_ns"))
        & (pl.col("raw").shift(-1).over(STREAM) == _OTHER)
        & ~pl.col("early")
        & ~pl.col("early").shift(-1).over(STREAM)
    ).fill_null(value=False)
    ordered = ordered.with_columns(overflows=overflows)
    by_row = ordered.select("_row", "overflows", "raw", "early").sort("_row")
    # An overlap of what a duplicate (an overflowing activity, one moved before its launch)
    # covers is part of that fault: dropping the duplicate (clipping the overflow, starting
    # it after its launch) repairs it too.
    blocker_fault = (
        by_row["overflows"].gather(rows).fill_null(value=False)
        | (by_row["raw"].gather(rows) == "duplicate").fill_null(value=False)
        | by_row["early"].gather(rows).fill_null(value=False)
    )
    return ordered.with_columns(
        how=pl.when(pl.col("raw") != _OTHER)
        .then(pl.col("raw"))
        .when(pl.col("raw").is_not_null() & ~blocker_fault)
        .then(pl.lit("timing"))
    )


# An overlap that is none of the kinds by design (a timing error, or the blocker overflows).
_OTHER = "other"
# An activity that starts before its launch call (as bad_timestamps finds them).
_EARLY = (pl.col("linked") & (pl.col("ts_ns") < pl.col("launch_ts_ns"))).fill_null(value=False)


def _raw_kind(trace: Trace) -> pl.Expr:
    """How an activity overlaps its blocker: duplicate, graph_branches, programmatic_launch,
    else ``_OTHER``; null where it does not overlap."""
    # An activity without a launch call has no API, a legacy one no correlation: not the same.
    graph = (
        pl.col("launch_api").is_in(GRAPH_LAUNCH_APIS) & pl.col("b_api").is_in(GRAPH_LAUNCH_APIS)
    ).fill_null(value=False)
    same = (
        (pl.col("name") == pl.col("b_name")) & (pl.col("correlation") == pl.col("b_correlation"))
    ).fill_null(value=False)
    identical = same & (pl.col("ts_ns") == pl.col("b_ts"))
    # Inside a graph replay same-named branches may overlap; twins are one record written twice.
    twin = (
        same
        & (pl.col("dur_ns") == pl.col("b_dur"))
        & (pl.col("ts_ns") - pl.col("b_ts") <= GRAPH_TWIN_NS)
    )
    # Devices the trace says are older than Hopper cannot launch programmatically; where it
    # does not say, they may.
    older = trace.devices.filter(pl.col("compute_major") < PDL_MIN_COMPUTE_MAJOR).select(
        pl.struct("rank", "device")
    )
    tail = (pl.col("overlap_ns") <= pl.col("b_dur") * PDL_MAX_OVERLAP_PCT / 100) & (
        pl.col("overlap_ns") <= pl.col("dur_ns") * PDL_MAX_OWN_OVERLAP_PCT / 100
    )
    pdl = (
        pl.col("launch_api").is_in(PDL_LAUNCH_APIS)
        & ~pl.struct("rank", "device").is_in(older.to_series().implode())
        & tail
    )
    kind = (
        pl.when(identical | twin | (same & ~graph))
        .then(pl.lit("duplicate"))
        .when(graph & (pl.col("correlation") == pl.col("b_correlation")))
        .then(pl.lit("graph_branches"))
        .when(pdl)
        .then(pl.lit("programmatic_launch"))
        .otherwise(pl.lit(_OTHER))
    )
    return pl.when(pl.col("overlap_ns") > 0).then(kind)


def overlapping_on_stream(trace: Trace) -> list[Finding]:
    """Activities that start before the previous one on their stream ends, by kind."""
    kinds = stream_walk(trace).filter(pl.col("how").is_not_null())
    if not kinds.height:
        return []
    steps = counted_steps(trace)
    kinds = counted_rows(steps, "gpu", kinds, "_row")
    n = step_count(steps)
    found = []
    for how in _KINDS:
        rows = kinds.filter(pl.col("how") == how)
        if rows.height:
            found.append(_overlap_finding(steps, rows, how, n))
    return found


def _per_blocker(rows: pl.DataFrame) -> pl.DataFrame:
    """Timing overlaps, one per blocker (one fault: the blocker ends late or the first
    activity it overlaps starts early): the first activity it overlaps, ``covered`` (how many
    it overlaps) and ``overlap_ns`` the blocker's time past that one's start, the amount the
    repair clips (the later activity's own length, or a second one overlapped, aside)."""
    return (
        rows.sort("ts_ns", "_row")
        .group_by("b_row", maintain_order=True)
        .agg(pl.all().first(), covered=pl.len())
        .with_columns(overlap_ns=pl.col("b_end") - pl.col("ts_ns"))
        .select(*rows.columns, "covered")
    )


def _overlap_finding(steps: Trace, rows: pl.DataFrame, how: str, n: int) -> Finding:
    if how == "timing":
        rows = _per_blocker(rows)
    inside = rows.filter(pl.col("iteration").is_not_null())
    affected_us = float(inside["overlap_ns"].sum()) / 1e3 / n
    # Overlaps by design move nothing: nothing to repair.
    weight = weigh(steps, gpu=_repair(steps, rows, how)) if how in _FAULTS else Weight({}, False)
    longest = float(rows["overlap_ns"].max() or 0) / 1e3  # type: ignore[arg-type]
    return weighed(
        CHECK_OVERLAP,
        how,
        rows.height,
        affected_us,
        sentence(
            [
                f"{rows.height:,} activities overlap the previous one on their stream by "
                f"{float(rows['overlap_ns'].sum()) / 1e3:,.3f} µs in all "
                f"(longest {longest:,.3f} µs)"
                if how != "timing"
                else f"{rows.height:,} activities end after the next one on their stream "
                f"starts, by {float(rows['overlap_ns'].sum()) / 1e3:,.3f} µs in all (longest "
                f"{longest:,.3f} µs), over {int(rows['covered'].sum()):,} later activities",
                "first: "
                + examples(
                    rows,
                    pl.format(
                        "{} over {} by {} ns on stream {}",
                        clipped("name"),
                        clipped("b_name"),
                        "overlap_ns",
                        "stream",
                    ),
                ),
            ]
        ),
        weight,
    )


def _repair(steps: Trace, rows: pl.DataFrame, how: str) -> pl.DataFrame:
    """The gpu frame repaired: a duplicate dropped; a timing overlap's blocker clipped to end
    where the later activity starts."""
    gpu = all_steps(steps).gpu.with_row_index("_row")
    if how == "duplicate":
        return gpu.filter(~pl.col("_row").is_in(rows["_row"].implode())).drop("_row")
    clipped = rows.group_by("b_row").agg(until=pl.col("ts_ns").min())
    return _clip(gpu, clipped.select(_row="b_row", until="until"))


def _clip(gpu: pl.DataFrame, until: pl.DataFrame) -> pl.DataFrame:
    """``gpu`` (with ``_row``) with the rows of ``until`` ending at its ``until`` time."""
    return (
        gpu.join(until, on="_row", how="left", maintain_order="left")
        .with_columns(
            dur_ns=pl.when(pl.col("until").is_not_null())
            .then(pl.min_horizontal(pl.col("until") - pl.col("ts_ns"), "dur_ns").clip(0))
            .otherwise("dur_ns")
        )
        .drop("_row", "until")
    )


def duration_overflow(trace: Trace) -> list[Finding]:
    """Activities that run past the next one's start by more than their own plausible length,
    and activities implausibly long for their kind."""
    past = (
        stream_walk(trace)
        .filter(pl.col("overflows"))
        .with_columns(excess_ns=pl.col("end_ns") - pl.col("next_ts"), until=pl.col("next_ts"))
    )
    long = _implausible(trace).filter(~pl.col("_row").is_in(past["_row"].implode()))
    if not past.height and not long.height:
        return []
    steps = counted_steps(trace)
    n = step_count(steps)
    return [
        _overflow_finding(steps, counted_rows(steps, "gpu", rows, "_row"), finding, n)
        for finding, rows in (("past_next", past), ("implausible", long))
        if rows.height
    ]


def _implausible(trace: Trace) -> pl.DataFrame:
    """Activities beyond their kind's limit, or over IMPLAUSIBLE_RATIO times their peers'
    median by IMPLAUSIBLE_MIN_EXCESS_US; communication kernels exempt (they wait for the
    slowest rank: any length is plausible for them)."""
    limit_ns = pl.col("kind").replace_strict(
        {kind: us * 1e3 for kind, us in IMPLAUSIBLE_US.items()},
        default=None,
        return_dtype=pl.Float64,
    )
    gpu = trace.gpu.with_row_index("_row")
    # Either rule needs a duration over IMPLAUSIBLE_MIN_EXCESS_US: only such activities' shapes
    # are looked at (a window over every activity's shape was most of this check's time).
    long = gpu.filter(pl.col("dur_ns") > IMPLAUSIBLE_MIN_EXCESS_US * 1e3)
    if not long.height:
        return long.with_columns(until=pl.lit(None, pl.Int64), excess_ns=pl.lit(None, pl.Int64))
    peers = (
        gpu.join(long.select(_SHAPE).unique(), on=_SHAPE, how="semi", nulls_equal=True)
        .group_by(_SHAPE)
        .agg(peer_ns=pl.col("dur_ns").median(), peers=pl.len() - 1)
    )
    frame = long.join(peers, on=_SHAPE, how="left", nulls_equal=True, maintain_order="left")
    beyond = pl.col("dur_ns") > limit_ns
    outlier = (
        (pl.col("peers") >= IMPLAUSIBLE_MIN_PEERS)
        & (pl.col("dur_ns") > pl.col("peer_ns") * IMPLAUSIBLE_RATIO)
        & (pl.col("dur_ns") - pl.col("peer_ns") > IMPLAUSIBLE_MIN_EXCESS_US * 1e3)
    )
    plausible = pl.when(outlier).then(pl.col("peer_ns")).otherwise(limit_ns)
    found = (
        frame.filter(beyond | outlier)
        .with_columns(until=(pl.col("ts_ns") + plausible).cast(pl.Int64))
        .with_columns(excess_ns=pl.col("ts_ns") + pl.col("dur_ns") - pl.col("until"))
    )
    if not found.height:
        return found
    # The category of these few only: classifying every activity is most of the audit's time
    # on a trace where nothing is found (rows keep the gpu frame's order).
    category = classified_activities(trace)["category"].gather(found["_row"])
    return found.filter(category != "communication")


def _overflow_finding(steps: Trace, rows: pl.DataFrame, finding: str, n: int) -> Finding:
    inside = rows.filter(pl.col("iteration").is_not_null())
    affected_us = float(inside["excess_ns"].sum()) / 1e3 / n
    gpu = _clip(all_steps(steps).gpu.with_row_index("_row"), rows.select("_row", "until"))
    what = (
        "past the start of the next activity on its stream"
        if finding == "past_next"
        else ("beyond what is plausible for its kind")
    )
    return weighed(
        CHECK_OVERFLOW,
        finding,
        rows.height,
        affected_us,
        sentence(
            [
                f"{rows.height:,} activities run {what}: "
                f"{float(rows['excess_ns'].sum()) / 1e3:,.3f} µs of excess in all",
                "first: "
                + examples(
                    rows,
                    pl.format("{} ({} ns, {} ns too long)", clipped("name"), "dur_ns", "excess_ns"),
                ),
            ]
        ),
        weigh(steps, gpu=gpu),
    )
