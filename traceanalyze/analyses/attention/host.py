"""Host cost of attention libraries, per kind, per iteration.

* cuDNN attention (``aten::_cudnn_attention_forward/backward``): the op's CPU self time per
  call; a call above ``CUDNN_PLAN_BUILD_US`` builds a plan (or misses the plan cache). In
  steady state no call should: where every call of the counted iterations does, the plan is
  rebuilt every call.
* Library planning and metadata steps (``HOST_RULES``): FlashInfer's plan, vLLM's and
  SGLang's attention metadata, flex's ``create_block_mask`` inside the step; from CPU ops and
  annotations, or from Python frames (traces recorded with ``with_stack``).
"""

from __future__ import annotations

import polars as pl

from traceanalyze.analyses.activities import iteration_count
from traceanalyze.analyses.attention.match import host_kinds
from traceanalyze.analyses.attention.rules import (
    CUDNN_ATTENTION_OPS,
    CUDNN_PLAN_BUILD_US,
    HOST_RULES,
)
from traceanalyze.analyses.cputree import with_self_time
from traceanalyze.analyses.iterations import iteration_at
from traceanalyze.trace import Trace

CUDNN_PLAN = "cudnn_plan"
HOST_COLUMNS: dict[str, pl.DataType] = {
    "kind": pl.String(),
    "name": pl.String(),
    "calls_per_iter": pl.Float64(),
    "us_per_call": pl.Float64(),
    "us_per_iter": pl.Float64(),
    "plan_builds_per_iter": pl.Float64(),
    "note": pl.String(),
}
DESCRIPTIONS = {r.kind: r.description for r in HOST_RULES} | {
    CUDNN_PLAN: "cuDNN attention's CPU self time (plan lookup; a plan build above "
    f"{CUDNN_PLAN_BUILD_US:,.0f} µs)"
}


def host_costs(trace: Trace) -> pl.DataFrame:
    """HOST_COLUMNS: one row per kind of host work and name, most time per iteration first."""
    n = iteration_count(trace)
    parts = [_cudnn(trace, n), _named(trace, n)]
    table = (
        pl.concat([p for p in parts if p.height], how="vertical_relaxed")
        if any(p.height for p in parts)
        else pl.DataFrame(schema=HOST_COLUMNS)
    )
    return table.select([pl.col(c).cast(t) for c, t in HOST_COLUMNS.items()]).sort(
        ["us_per_iter", "name"], descending=[True, False]
    )


def _cudnn(trace: Trace, n: int) -> pl.DataFrame:
    ops = trace.cpu.filter(
        (pl.col("cat") == "cpu_op") & pl.col("name").is_in(list(CUDNN_ATTENTION_OPS))
    )
    calls = with_self_time(ops, trace.cpu).filter(pl.col("iteration").is_not_null())
    if not calls.height:
        return pl.DataFrame(schema=HOST_COLUMNS)
    first = calls["iteration"].min()
    build = (pl.col("self_ns") / 1e3) > CUDNN_PLAN_BUILD_US
    later = pl.col("iteration") > first
    every = build.filter(later).all() & later.any()
    return calls.group_by("name").agg(
        kind=pl.lit(CUDNN_PLAN),
        calls_per_iter=pl.len() / n,
        us_per_call=(pl.col("self_ns") / 1e3).mean(),
        us_per_iter=(pl.col("self_ns") / 1e3).sum() / n,
        plan_builds_per_iter=build.sum() / n,
        note=pl.when(every)
        .then(pl.lit("a plan is built every call, after the first iteration too: the plan "
                     "cache misses (a shape, dtype or layout that changes each call?)"))
        .when(build.filter(later).any())
        .then(pl.lit("plans are built after the first iteration (new shapes?)"))
        .otherwise(pl.lit(None, pl.String)),
    )  # fmt: skip


def _named(trace: Trace, n: int) -> pl.DataFrame:
    """Host work the rules name: CPU ops and annotations, and Python frames."""
    intervals = trace.cpu.filter(pl.col("cat").is_in(["cpu_op", "user_annotation"])).select(
        "rank", "name", "ts_ns", "dur_ns", "iteration"
    )
    op_rules = [r for r in HOST_RULES if not r.python]
    python_rules = [r for r in HOST_RULES if r.python]
    found = [intervals.join(host_kinds(intervals["name"], op_rules), on="name")]
    if trace.python.height:
        frames = trace.python.select("rank", "name", "ts_ns", "dur_ns")
        # Match the distinct names first: a with_stack trace holds ~10^5 frames.
        named = frames.join(host_kinds(frames["name"], python_rules), on="name")
        found.append(named.with_columns(iteration=iteration_at(named, trace)))
    rows = pl.concat(found, how="diagonal_relaxed").filter(pl.col("iteration").is_not_null())
    if not rows.height:
        return pl.DataFrame(schema=HOST_COLUMNS)
    return rows.group_by("kind", "name").agg(
        calls_per_iter=pl.len() / n,
        us_per_call=(pl.col("dur_ns") / 1e3).mean(),
        us_per_iter=(pl.col("dur_ns") / 1e3).sum() / n,
        plan_builds_per_iter=pl.lit(None, pl.Float64),
        note=pl.lit(None, pl.String),
    )
