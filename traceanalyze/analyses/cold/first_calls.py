"""`cold`: the one-off work of a first call, against the steady calls, by cause.

A trace that starts before the first call (``python -m capture --cold``) holds the one-off
work a user pays at start-up or on every new shape: cuDNN plan builds, cuBLAS heuristics,
Triton autotuning and compilation, lazy CUDA initialisation, allocator growth. Calls are found
as :mod:`traceanalyze.analyses.calls` says; the first call of each shape is compared with the
*median steady call* of that shape: the later call of that shape whose time is the median
(the lower middle one for an even count), so that every figure of the comparison comes from
one real call and the parts add up.

Two sides, each adding up exactly:

* ``cpu``: the call's span on the CPU (with ``capture --cold``'s synchronize inside each call,
  its wall time), split over the call's CPU tree on its thread: each interval's self time goes
  to the cause :mod:`traceanalyze.analyses.cold.rules` gives it and to the outermost operator
  it is in; the rest of the span (the region's own time) is ``other`` outside any operator.
* ``gpu``: the GPU activity time launched from the call's tree, by the cause of the launch's
  context and the operator that launched it.

Only the call's own thread is split: work another thread does meanwhile (autograd's backward
thread) is not in the tree, and the call's wait for it shows as ``other``.

``excess_us`` = ``first_call_us`` - ``steady_us``: the one-off work (negative where the first
call was faster). "Planning" names only the measured first-call excess of the ``cudnn_plan``
cause (``cudnn_planning_us``); the steady CPU time of cuDNN ops is ``cudnn_cpu_us_per_iter``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import polars as pl

from traceanalyze.analyses.activities import per_trace
from traceanalyze.analyses.calls import Calls, find_calls, ops_in_calls
from traceanalyze.analyses.cold.caches import cache_evidence
from traceanalyze.analyses.cold.rules import OTHER, causes
from traceanalyze.analyses.cputree import outermost_ops, with_self_time
from traceanalyze.link import PROFILER_STEP, RUNTIME_CATS
from traceanalyze.trace import Trace

SIDES = ("cpu", "gpu")
CALL_KEY = ["rank", "call"]
_PART = ["side", "cause", "op_name"]
_MAX_DEPTH = 64

# Per call: its role, its two sides' totals and its wall time.
CALL_COLUMNS = ("rank", "call", "name", "shape_index", "role", "cpu_us", "gpu_us", "wall_us")
FIRST = "first"
NEW_SHAPE = "first of a new shape"
STEADY = "steady"
# The comparison of each first call (of each shape) with its median steady call.
EXCESS_COLUMNS = (
    "rank", "call", "steady_call", "steady_calls", "side", "cause", "op_name",
    "first_call_us", "steady_us", "excess_us", "share_of_excess_pct",
)  # fmt: skip


@dataclass(frozen=True)
class ColdStart:
    """The calls of one trace and the excess of each first call, with how they were found."""

    calls: pl.DataFrame  # CALL_COLUMNS
    excess: pl.DataFrame  # EXCESS_COLUMNS
    source: str  # how the calls were found (see calls.find_calls)
    notes: tuple[str, ...]  # what a reader must know (shapes ignored, calls without steady)
    caches: pl.DataFrame  # caches.EVIDENCE_COLUMNS
    # On the first rank, before call 1 began: outermost operators that ended, GPU activities
    # that started (signs that the process ran work before its first call in the trace).
    earlier_work: tuple[int, int]


@dataclass(frozen=True)
class TracedTimes:
    """The trace's call 1 and the median of its shape's steady calls, on the first rank."""

    first_call_us: float | None
    steady_us: float | None
    steady_calls: int


def cold_start(trace: Trace, shapes: Sequence[int | str] | None = None) -> ColdStart:
    """The cold-start comparison of ``trace`` (no rows when it has fewer than two calls).

    ``shapes``, one per call in order (a capture manifest's sequence lengths), replace the
    shapes read from the trace, which cannot see a shape inside a compiled region."""
    found, parts, walls = _measured(trace)
    spans, notes = _with_given_shapes(found.spans, shapes)
    roles, more = _roles(spans)
    notes += more
    totals = parts.group_by(*CALL_KEY, "side").agg(us=pl.col("us").sum())
    calls = _call_table(roles, totals, walls)
    references = _median_steady_calls(roles, totals)
    if roles.height and not references.height:
        notes += ("no call repeats another's shape: there is no steady call to compare with",)
    return ColdStart(
        calls,
        _excess(parts, references),
        found.source,
        notes,
        cache_evidence(trace, found.spans),
        _earlier_work(trace, found.spans),
    )


def traced_times(calls: pl.DataFrame) -> TracedTimes:
    """Call 1's wall time and the (lower) median wall time of the later calls of its shape,
    on the first rank: the trace's time per call, under the profiler.

    The one place cold reads a trace's steady time per call. ``wall_us`` is the accounting
    model's wall time (the longer of the call's CPU span and the span of the GPU work it
    launched), as summary's ``wall_us_per_iter``, but over the steady calls alone: summary's
    mean holds every counted step, the first (cold) one included, and a trace marking calls
    with numbered annotations is one whole-trace step to it. The step model may take over
    here once it leaves the first step out."""
    if not calls.height:
        return TracedTimes(None, None, 0)
    mine = calls.filter(pl.col("rank") == calls["rank"].min())
    first = mine.filter(pl.col("role") == FIRST)["wall_us"]
    steady = (
        mine.filter((pl.col("role") == STEADY) & (pl.col("shape_index") == 1))["wall_us"]
        .drop_nulls()
        .sort()
    )
    median = float(steady[(steady.len() - 1) // 2]) if steady.len() else None
    return TracedTimes(float(first[0]) if first.len() else None, median, steady.len())


def _earlier_work(trace: Trace, spans: pl.DataFrame) -> tuple[int, int]:
    """On the first rank: outermost operators that ended and GPU activities that started
    before call 1 began."""
    if not spans.height:
        return 0, 0
    first = spans.sort("rank", "call").row(0, named=True)
    mine = pl.col("rank") == first["rank"]
    before = pl.col("ts_ns") < first["ts_ns"]
    ops = outermost_ops(trace).filter(mine & (pl.col("ts_ns") + pl.col("dur_ns") <= first["ts_ns"]))
    return ops.height, trace.gpu.filter(mine & before).height


@per_trace
def _measured(trace: Trace) -> tuple[Calls, pl.DataFrame, pl.DataFrame]:
    """The calls, their parts by side, cause and operator, and their wall times."""
    found = find_calls(trace)
    rows = _call_rows(trace, found)
    launched = _launched(trace, rows)
    return found, _parts(found.spans, rows, launched), _walls(found.spans, launched)


def _with_given_shapes(
    spans: pl.DataFrame, shapes: Sequence[int | str] | None
) -> tuple[pl.DataFrame, tuple[str, ...]]:
    if shapes is None or not spans.height:
        return spans, ()
    counts = spans.group_by("rank").len()["len"].unique().to_list()
    if counts != [len(shapes)]:
        held = " or ".join(str(c) for c in counts)
        return spans, (
            f"the manifest lists {len(shapes)} calls, the trace holds {held}: shapes are "
            "read from the trace",
        )
    given = pl.Series("shape", [str(s) for s in shapes], pl.String)
    return spans.with_columns(shape=pl.lit(given).gather(pl.col("call") - 1)), ()


def _roles(spans: pl.DataFrame) -> tuple[pl.DataFrame, tuple[str, ...]]:
    """Per call: ``shape_index`` (1, 2, ... in order of first appearance) and whether it is
    the first of its shape. Shapes are ignored (with a note) when no two calls share one."""
    ordered = spans.sort(CALL_KEY)
    shape = pl.col("shape").fill_null("")
    notes: tuple[str, ...] = ()
    repeated = ordered.select(shape.is_duplicated().over("rank").any()).item()
    if ordered.height and not repeated:
        shape = pl.lit("")
        if ordered["shape"].is_not_null().any():
            notes = ("every call has other input shapes: call 1 is compared with all later calls",)
    first_seen = pl.col("call").min().over("rank", "_shape")
    roles = ordered.with_columns(_shape=shape).with_columns(
        shape_index=(first_seen.rank("dense").over("rank")).cast(pl.Int64),
        first_of_shape=pl.col("call") == first_seen,
    )
    return roles.select(*CALL_KEY, "name", "shape_index", "first_of_shape"), notes


def _call_table(roles: pl.DataFrame, totals: pl.DataFrame, walls: pl.DataFrame) -> pl.DataFrame:
    """Per call: its role, ``cpu_us`` (span), ``gpu_us`` (activity time) and ``wall_us``."""
    sides = [
        totals.filter(pl.col("side") == side).select(*CALL_KEY, pl.col("us").alias(f"{side}_us"))
        for side in SIDES
    ]
    table = roles.with_columns(
        role=pl.when(~pl.col("first_of_shape"))
        .then(pl.lit(STEADY))
        .when(pl.col("shape_index") == 1)
        .then(pl.lit(FIRST))
        .otherwise(pl.lit(NEW_SHAPE))
    )
    for side in [*sides, walls]:
        table = table.join(side, on=CALL_KEY, how="left")
    return table.with_columns(pl.col("cpu_us", "gpu_us").fill_null(0.0)).select(CALL_COLUMNS)


def _median_steady_calls(roles: pl.DataFrame, totals: pl.DataFrame) -> pl.DataFrame:
    """Per first call (of a shape) and side: the steady call of that shape whose total is the
    (lower) median, and how many steady calls there are."""
    steady = roles.filter(~pl.col("first_of_shape")).join(totals, on=CALL_KEY)
    ranked = steady.sort("us", "call").with_columns(
        position=pl.int_range(pl.len()).over("rank", "shape_index", "side"),
        count=pl.len().over("rank", "shape_index", "side"),
    )
    median = ranked.filter(pl.col("position") == (pl.col("count") - 1) // 2).select(
        "rank", "shape_index", "side", steady_call="call", steady_calls="count"
    )
    firsts = roles.filter(pl.col("first_of_shape")).select(*CALL_KEY, "shape_index")
    return firsts.join(median, on=["rank", "shape_index"]).drop("shape_index")


PARTS_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(), "call": pl.Int64(), "side": pl.String(), "cause": pl.String(),
    "op_name": pl.String(), "us": pl.Float64(),
}  # fmt: skip


def _call_rows(trace: Trace, found: Calls) -> pl.DataFrame:
    """The CPU intervals inside the calls with their self time, cause, the cause of their
    context and the outermost operator they are in."""
    cpu = trace.cpu
    rows = with_self_time(ops_in_calls(cpu, found.spans), cpu)
    return pl.concat([rows, causes(cpu, rows["op_id"])], how="horizontal").with_columns(
        op_name=_outermost_operator(cpu, rows)
    )


def _launched(trace: Trace, rows: pl.DataFrame) -> pl.DataFrame:
    """The GPU activities launched from the calls, each with its launch's call, context cause
    and operator (a graph launch or a cuDNN call can launch several)."""
    launches = rows.filter(pl.col("cat").is_in(RUNTIME_CATS) & pl.col("correlation").is_not_null())
    launches = launches.unique(["rank", "correlation"], keep="first").select(
        "rank", "correlation", "call", cause="context_cause", op_name="op_name"
    )
    return trace.gpu.select("rank", "correlation", "ts_ns", "dur_ns").join(
        launches, on=["rank", "correlation"]
    )


def _parts(spans: pl.DataFrame, rows: pl.DataFrame, launched: pl.DataFrame) -> pl.DataFrame:
    """Per call, side, cause and outermost operator: microseconds. The cpu side adds up to the
    call's span (what no interval holds is ``other`` outside operators), the gpu side to its
    GPU activity time."""
    cpu_parts = rows.group_by(*CALL_KEY, "cause", "op_name").agg(ns=pl.col("self_ns").sum())
    inside = cpu_parts.group_by(CALL_KEY).agg(inside=pl.col("ns").sum())
    remainder = spans.join(inside, on=CALL_KEY, how="left").select(
        *CALL_KEY,
        cause=pl.lit(OTHER),
        op_name=pl.lit(None, pl.String),
        ns=pl.col("dur_ns") - pl.col("inside").fill_null(0),
    )
    gpu_parts = launched.group_by(*CALL_KEY, "cause", "op_name").agg(ns=pl.col("dur_ns").sum())
    sides = [
        pl.concat([cpu_parts, remainder], how="vertical_relaxed").with_columns(side=pl.lit("cpu")),
        gpu_parts.with_columns(side=pl.lit("gpu")),
    ]
    return (
        pl.concat(sides, how="diagonal_relaxed")
        .group_by(*CALL_KEY, *_PART)
        .agg(us=pl.col("ns").sum() / 1e3)
        .select(PARTS_SCHEMA.keys())
        .cast(PARTS_SCHEMA)  # type: ignore[arg-type]
    )


def _walls(spans: pl.DataFrame, launched: pl.DataFrame) -> pl.DataFrame:
    """Per call, ``wall_us``: the longer of its CPU span and the span of the GPU activities it
    launched (first start to last end), as in the accounting model."""
    gpu = launched.group_by(CALL_KEY).agg(
        gpu_span_ns=(pl.col("ts_ns") + pl.col("dur_ns")).max() - pl.col("ts_ns").min()
    )
    return spans.join(gpu, on=CALL_KEY, how="left").select(
        *CALL_KEY,
        wall_us=pl.max_horizontal("dur_ns", pl.col("gpu_span_ns").fill_null(0)) / 1e3,
    )


def _outermost_operator(cpu: pl.DataFrame, rows: pl.DataFrame) -> pl.Series:
    """The name of the outermost operator (not a profiler step) each row is in, itself
    included, below its call's region; null for time outside every operator."""
    is_op = cpu.select(
        (pl.col("cat") == "cpu_op") & ~pl.col("name").str.contains(PROFILER_STEP.pattern)
    ).to_series()
    depth, parents = pl.lit(cpu["depth"]), pl.lit(cpu["parent_id"])
    walk = rows.select(cursor="op_id", floor="region_depth", top=pl.lit(None, pl.Int64))
    for _ in range(_MAX_DEPTH):
        live = pl.col("cursor").is_not_null() & (depth.gather("cursor") > pl.col("floor"))
        if not walk.select(live.any()).item():
            break
        walk = walk.with_columns(
            top=pl.when(live & pl.lit(is_op).gather("cursor")).then("cursor").otherwise("top"),
            cursor=pl.when(live).then(parents.gather("cursor")),
        )
    return cpu["name"].gather(walk["top"]).alias("op_name")


def _excess(parts: pl.DataFrame, references: pl.DataFrame) -> pl.DataFrame:
    """First call against its median steady call, per side, cause and operator."""
    keys = [*CALL_KEY, *_PART]
    first = parts.join(references.select(*CALL_KEY, "side").unique(), on=[*CALL_KEY, "side"])
    steady = parts.join(
        references.select("rank", "side", call="steady_call", first_call="call"),
        on=["rank", "side", "call"],
    ).select("rank", call="first_call", side="side", cause="cause", op_name="op_name", us="us")
    joined = first.rename({"us": "first_call_us"}).join(
        steady.rename({"us": "steady_us"}), on=keys, how="full", coalesce=True, nulls_equal=True
    )
    return (
        joined.with_columns(pl.col("first_call_us", "steady_us").fill_null(0.0))
        .join(references, on=[*CALL_KEY, "side"])
        .with_columns(excess_us=pl.col("first_call_us") - pl.col("steady_us"))
        .with_columns(share_of_excess_pct=share_of_excess())
        .sort(
            ["rank", "call", "side", "excess_us", "cause", "op_name"],
            descending=[False, False, False, True, False, False],
            nulls_last=True,
        )
        .select(EXCESS_COLUMNS)
    )


def share_of_excess() -> pl.Expr:
    """A row's share of its call and side's total excess (none when that total is not
    positive: a share of a saving means nothing)."""
    total = pl.col("excess_us").sum().over(*CALL_KEY, "side")
    return pl.when(total > 0).then(pl.col("excess_us") / total * 100)
