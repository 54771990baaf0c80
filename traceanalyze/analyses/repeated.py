"""Repeated regions: annotations that run the same operators again, found once for every user.

A trace without step annotations often still marks its repeated work: a benchmark's
``warmup|forward`` and ``measure|forward`` regions run the same sequence of outermost operators.
Both :mod:`~traceanalyze.analyses.iterations` (which takes them as steps) and
:mod:`~traceanalyze.analyses.calls` (which takes them as calls for `cold`) read them from here,
so the two commands find the same regions (this module sits below both; it imports neither).

A group is the annotations (any depth, not ProfilerStep, not a compile phase) of one rank whose
outermost operators, in call order, have the same names, at least two of them and none nested
in another; of several groups the one covering the most time (then the most members, then the
earliest).
"""

from __future__ import annotations

import polars as pl

from traceanalyze.analyses.cputree import outermost_ops
from traceanalyze.link import PROFILER_STEP, nearest_ancestor
from traceanalyze.trace import Trace

# Dynamo and Inductor at compile time: dynamo_timed phases and the events around them. Operators
# run inside them (Dynamo tracing a model on fake tensors) repeat per traced layer, not per call.
COMPILING = (
    r"\(dynamo_timed\)$|^dynamo$|^entire_frame_compile$|compile_id=|^torch/_(dynamo|inductor)/"
)
# The columns of a found region (a call's or a step's span before numbering).
SPAN = ("rank", "name", "region_id", "region_depth", "pid", "tid", "ts_ns", "dur_ns")
# Ancestor chains are short; this bounds the walk from an operator to its annotations.
_MAX_DEPTH = 64


def region_groups(trace: Trace) -> pl.DataFrame:
    """Every group of repeated regions (module docstring), best first: ``rank``,
    ``signature``, ``covered`` (ns), ``members``, ``first`` (ns); no rows when none repeat."""
    members = _members(trace)
    if members is None:
        return pl.DataFrame(schema={"rank": pl.Int32, "signature": pl.String, "covered": pl.Int64})
    nested = (pl.col("ts_ns") < pl.col("previous_end")).fill_null(value=False)
    return (
        members.with_columns(nested=nested.any().over("rank", "signature"))
        .filter((pl.col("members") >= 2) & ~pl.col("nested"))
        .group_by("rank", "signature")
        .agg(covered=pl.col("dur_ns").sum(), members=pl.len(), first=pl.col("ts_ns").min())
        .sort(["covered", "members", "first"], descending=[True, True, False])
    )


def group_spans(trace: Trace, groups: pl.DataFrame) -> pl.DataFrame:
    """The regions of ``groups`` (rows of :func:`region_groups`): ``SPAN`` columns, in time
    order."""
    members = _members(trace)
    assert members is not None  # groups came from region_groups: there are regions
    chosen = members.join(groups.select("rank", "signature"), on=["rank", "signature"], how="semi")
    return chosen.select(*SPAN).sort("rank", "ts_ns")


def outside_compiles(trace: Trace) -> pl.DataFrame:
    """The outermost operators that are not compile phases and run in none (Dynamo traces a
    model on fake tensors inside them: its operators repeat per layer, not per call)."""
    ops = outermost_ops(trace)
    compiling = pl.col("name").str.contains(COMPILING)
    inside = nearest_ancestor(trace.cpu, ops["op_id"], compiling).is_not_null()
    return ops.filter(~inside & ~ops.select(compiling).to_series())


def as_regions(rows: pl.DataFrame) -> pl.DataFrame:
    """Rows of trace.cpu as regions: their op_id and depth under the span's names."""
    return rows.with_columns(region_id=pl.col("op_id"), region_depth=pl.col("depth"))


def _members(trace: Trace) -> pl.DataFrame | None:
    signatures = _region_signatures(trace)
    if not signatures.height:
        return None
    return signatures.sort("ts_ns").with_columns(
        previous_end=(pl.col("ts_ns") + pl.col("dur_ns")).shift(1).over("rank", "signature"),
        members=pl.len().over("rank", "signature"),
    )


def _region_signatures(trace: Trace) -> pl.DataFrame:
    """Each annotation (not ProfilerStep) with the names of the outermost operators under it,
    in call order, as one string; annotations without operators are left out."""
    cpu = trace.cpu
    is_region = (
        (pl.col("cat") == "user_annotation")
        & ~pl.col("name").str.contains(PROFILER_STEP.pattern)
        & ~pl.col("name").str.contains(COMPILING)
    )
    regions = cpu.select(is_region.alias("region")).to_series()
    if not regions.any():
        return pl.DataFrame()
    ops = outside_compiles(trace).select("op_id", "ts_ns", op_name="name")
    parents = pl.lit(cpu["parent_id"])
    walk = ops.with_columns(cursor=parents.gather("op_id"))
    pairs = []
    for _ in range(_MAX_DEPTH):
        walk = walk.filter(pl.col("cursor").is_not_null())
        if not walk.height:
            break
        hit = pl.lit(regions).gather("cursor")
        pairs.append(walk.filter(hit).select("cursor", "ts_ns", "op_name"))
        walk = walk.with_columns(cursor=parents.gather("cursor"))
    if not pairs:
        return pl.DataFrame()
    signatures = (
        pl.concat(pairs)
        .sort("ts_ns")
        .group_by("cursor")
        .agg(signature=pl.col("op_name").str.join("\n"))
    )
    found = cpu.join(signatures, left_on="op_id", right_on="cursor")
    return as_regions(found).select(*SPAN, "signature")
