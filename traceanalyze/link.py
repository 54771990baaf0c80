"""Linking: who launched each GPU activity, inside which ops, in which iteration.

Done once at load time, columnar throughout:

1. CPU intervals on each thread form a call tree. Sorting boundaries (starts +1, ends -1) and
   taking a running sum gives every interval's depth; its parent is then the last interval on
   the same thread, earlier in start order, one level up (an as-of join).
2. A GPU activity joins its runtime/driver call on ``correlation``; the call's nearest ``cpu_op``
   ancestor is the launching op, its outermost user annotation the region.
3. Iterations come from ``ProfilerStep#N`` spans, else a repeated top-level annotation, else
   the whole trace is one iteration.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import polars as pl

from traceanalyze.schema import CPU_SCHEMA, GPU_SCHEMA, ITERATION_SCHEMA

THREAD = ["rank", "pid", "tid"]
RUNTIME_CATS = ("cuda_runtime", "cuda_driver")
PROFILER_STEP = re.compile(r"^ProfilerStep#(\d+)$")
# Before user_annotation existed (torch <= 1.10) the step was recorded as an op (Operator).
STEP_CATS = ("user_annotation", "cpu_op")
# At equal start and duration an annotation encloses an op, which encloses a runtime call.
_CAT_ORDER = {"user_annotation": 0, "cpu_op": 1, "cuda_runtime": 2, "cuda_driver": 3}
# A runtime call's op chain is rarely deeper than a few levels; this bounds the ancestor walk.
_MAX_ANCESTOR_STEPS = 64


@dataclass(frozen=True)
class Linked:
    cpu: pl.DataFrame
    gpu: pl.DataFrame
    iterations: pl.DataFrame
    iteration_source: str


def link(cpu: pl.DataFrame, gpu: pl.DataFrame, rank: int) -> Linked:
    """Add the linking columns of CPU_SCHEMA and GPU_SCHEMA to freshly decoded frames."""
    cpu = with_call_tree(cpu)
    iterations, source = find_iterations(cpu, gpu, rank)
    cpu = cpu.with_columns(iteration=_iteration_of(cpu["ts_ns"], iterations, source))
    gpu = link_gpu(gpu, cpu, iterations, source)
    return Linked(
        cpu.select(CPU_SCHEMA.keys()).cast(CPU_SCHEMA),  # type: ignore[arg-type]
        gpu.select(GPU_SCHEMA.keys()).cast(GPU_SCHEMA),  # type: ignore[arg-type]
        iterations,
        source,
    )


def with_call_tree(cpu: pl.DataFrame) -> pl.DataFrame:
    """Sort CPU intervals, number them (``op_id``) and add ``depth`` and ``parent_id``."""
    cpu = cpu.sort(
        [*THREAD, "ts_ns", "dur_ns", pl.col("cat").replace_strict(_CAT_ORDER, default=9)],
        descending=[False, False, False, False, True, False],
    ).with_row_index("op_id")
    cpu = cpu.with_columns(pl.col("op_id").cast(pl.Int64))
    depth = nesting_depth(cpu)
    cpu = cpu.with_columns(depth=depth)
    return cpu.with_columns(parent_id=_parent_ids(cpu))


def nesting_depth(intervals: pl.DataFrame) -> pl.Series:
    """Depth of each interval among the intervals of its thread (0 = root).

    ``intervals`` must be sorted by thread, start, longest first, with ``op_id`` increasing in
    that order. At equal times an end closes before a start opens, so back-to-back siblings do
    not nest; a zero-length interval's own end sorts after the starts at its instant so it does
    not close itself early; of two ends at one instant the inner (later started) goes first.
    """
    if not intervals.height:
        return pl.Series("depth", [], pl.Int32)
    thread = pl.struct(THREAD).rank("dense").cast(pl.Int64).alias("thread")
    base = intervals.select(thread, "ts_ns", "dur_ns", "op_id")
    # One sort key for (phase, order) at equal times: phase in the bits above 2**40.
    starts = base.select(
        "thread",
        pl.col("ts_ns").alias("t"),
        (pl.lit(_PHASE_START) + pl.col("op_id")).alias("key"),
        pl.lit(1, pl.Int32).alias("delta"),
    )
    end_phase = pl.when(pl.col("dur_ns") > 0).then(_PHASE_END).otherwise(_PHASE_INSTANT_END)
    ends = base.select(
        "thread",
        (pl.col("ts_ns") + pl.col("dur_ns")).alias("t"),
        (end_phase + pl.lit(_REVERSE) - pl.col("op_id")).alias("key"),
        pl.lit(-1, pl.Int32).alias("delta"),
    )
    boundaries = pl.concat([starts, ends]).sort(["thread", "t", "key"])
    depth = (
        boundaries.with_columns(open=pl.col("delta").cum_sum().over("thread"))
        .filter(pl.col("delta") == 1)
        .sort("key")
        .get_column("open")
    )
    return (depth - 1).cast(pl.Int32).alias("depth")


_PHASE_END, _PHASE_START, _PHASE_INSTANT_END = 0, 1 << 40, 2 << 40
_REVERSE = 1 << 39  # ends sort by descending op_id: key = phase + 2**39 - op_id


def _parent_ids(cpu: pl.DataFrame) -> pl.Series:
    """The last interval before each one (start order) on its thread at one level up."""
    keyed = cpu.select(*THREAD, "op_id", "ts_ns", "dur_ns", "depth")
    children = keyed.filter(pl.col("depth") > 0).with_columns(key_depth=pl.col("depth") - 1)
    candidates = keyed.select(
        *THREAD,
        pl.col("op_id").alias("parent_id"),
        pl.col("depth").alias("key_depth"),
        (pl.col("ts_ns") + pl.col("dur_ns")).alias("parent_end"),
        pl.col("op_id").alias("order"),
    )
    joined = children.with_columns(order=pl.col("op_id")).join_asof(
        candidates,
        on="order",
        by=[*THREAD, "key_depth"],
        strategy="backward",
        allow_exact_matches=False,
        check_sortedness=False,
    )
    # A parent must still be open when the child starts; clock rounding can break nesting.
    joined = joined.with_columns(
        parent_id=pl.when(pl.col("parent_end") >= pl.col("ts_ns")).then("parent_id")
    )
    return (
        keyed.select("op_id")
        .join(joined.select("op_id", "parent_id"), on="op_id", how="left")
        .sort("op_id")
        .get_column("parent_id")
    )


def find_iterations(cpu: pl.DataFrame, gpu: pl.DataFrame, rank: int) -> tuple[pl.DataFrame, str]:
    """Iteration spans and how they were found (see the module docstring)."""
    steps = cpu.filter(pl.col("cat").is_in(STEP_CATS) & _is_profiler_step())
    if steps.height:
        frame = steps.select(
            "rank",
            pl.col("name").str.extract(PROFILER_STEP.pattern).cast(pl.Int64).alias("iteration"),
            "name",
            "ts_ns",
            "dur_ns",
        )
        return _iteration_frame(frame), "ProfilerStep"
    repeated = _repeated_top_annotation(cpu)
    if repeated is not None:
        name, spans = repeated
        frame = spans.select(
            "rank",
            pl.int_range(pl.len(), dtype=pl.Int64).alias("iteration"),
            "name",
            "ts_ns",
            "dur_ns",
        )
        return _iteration_frame(frame), f"annotation:{name}"
    return _whole_trace(cpu, gpu, rank), "whole trace"


def _is_profiler_step() -> pl.Expr:
    return pl.col("name").str.contains(PROFILER_STEP.pattern)


def _iteration_frame(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.sort("ts_ns").cast(ITERATION_SCHEMA)  # type: ignore[arg-type]


def _repeated_top_annotation(cpu: pl.DataFrame) -> tuple[str, pl.DataFrame] | None:
    """The most repeated root-level user annotation (at least twice), with its spans."""
    roots = cpu.filter((pl.col("cat") == "user_annotation") & (pl.col("depth") == 0))
    counts = (
        roots.group_by("name")
        .agg(n=pl.len(), total=pl.col("dur_ns").sum())
        .filter(pl.col("n") >= 2)
        .sort(["n", "total", "name"], descending=[True, True, False])
    )
    if not counts.height:
        return None
    name = counts.item(0, "name")
    return name, roots.filter(pl.col("name") == name).sort("ts_ns")


def _whole_trace(cpu: pl.DataFrame, gpu: pl.DataFrame, rank: int) -> pl.DataFrame:
    spans = pl.concat(
        [cpu.select("ts_ns", "dur_ns"), gpu.select("ts_ns", "dur_ns")], how="vertical"
    )
    start = spans["ts_ns"].min()
    end = (spans["ts_ns"] + spans["dur_ns"]).max()
    frame = pl.DataFrame(
        {
            "rank": [rank],
            "iteration": [0],
            "name": ["whole trace"],
            "ts_ns": [start],
            "dur_ns": [None if start is None or end is None else end - start],  # type: ignore[operator]
        }
    )
    return frame.cast(ITERATION_SCHEMA)  # type: ignore[arg-type]


def _iteration_of(ts_ns: pl.Series, iterations: pl.DataFrame, source: str) -> pl.Series:
    """The iteration whose span holds each timestamp (null outside every span)."""
    if source == "whole trace":
        return pl.Series("iteration", [0] * len(ts_ns), dtype=pl.Int64).set(ts_ns.is_null(), None)
    points = ts_ns.to_frame("ts_ns").with_row_index("row")
    spans = iterations.select(
        pl.col("ts_ns").alias("start"),
        (pl.col("ts_ns") + pl.col("dur_ns")).alias("end"),
        "iteration",
    )
    joined = (
        points.filter(pl.col("ts_ns").is_not_null())
        .sort("ts_ns")
        .join_asof(spans, left_on="ts_ns", right_on="start", strategy="backward")
        .select("row", pl.when(pl.col("ts_ns") < pl.col("end")).then("iteration").alias("it"))
    )
    return points.join(joined, on="row", how="left").sort("row").get_column("it").alias("iteration")


def link_gpu(
    gpu: pl.DataFrame, cpu: pl.DataFrame, iterations: pl.DataFrame, source: str
) -> pl.DataFrame:
    """Join GPU activities to their launch call, launching op, annotation and iteration."""
    calls = (
        cpu.filter(pl.col("cat").is_in(RUNTIME_CATS) & pl.col("correlation").is_not_null())
        .unique(["rank", "correlation"], keep="first", maintain_order=True)
        .select(
            "rank",
            "correlation",
            pl.col("name").alias("launch_api"),
            pl.col("ts_ns").alias("launch_ts_ns"),
            pl.col("dur_ns").alias("launch_dur_ns"),
            pl.col("tid").alias("launch_tid"),
            pl.col("op_id").alias("call_id"),
        )
    )
    gpu = gpu.join(calls, on=["rank", "correlation"], how="left").with_columns(
        linked=pl.col("call_id").is_not_null()
    )
    ops = nearest_ancestor(cpu, gpu["call_id"], (pl.col("cat") == "cpu_op") & ~_is_profiler_step())
    annotations = outermost_annotation(cpu, gpu["call_id"])
    gpu = gpu.with_columns(
        op_id=ops,
        annotation=annotations,
    ).join(cpu.select("op_id", pl.col("name").alias("op_name")), on="op_id", how="left")
    if source == "whole trace":
        iteration = pl.Series("iteration", [0] * gpu.height, dtype=pl.Int64)
    else:
        iteration = _iteration_of(gpu["launch_ts_ns"], iterations, source)
    return gpu.with_columns(iteration=iteration)


def nearest_ancestor(cpu: pl.DataFrame, start_ids: pl.Series, matches: pl.Expr) -> pl.Series:
    """For each id, its nearest strict ancestor whose row satisfies ``matches``, else null.

    Walks the parent pointers of all rows at once: one join per level climbed.
    """
    table = cpu.select(
        pl.col("op_id").alias("cursor"), pl.col("parent_id").alias("next"), matches.alias("hit")
    )
    parents = cpu.select(pl.col("op_id").alias("start"), pl.col("parent_id").alias("cursor"))
    walk = (
        start_ids.alias("start")
        .to_frame()
        .with_row_index("row")
        .join(parents, on="start", how="left")
        .select("row", "cursor", found=pl.lit(None, pl.Int64))
    )
    for _ in range(_MAX_ANCESTOR_STEPS):
        if walk.filter(pl.col("found").is_null() & pl.col("cursor").is_not_null()).is_empty():
            break
        walk = (
            walk.join(table, on="cursor", how="left")
            .with_columns(found=pl.when(pl.col("hit")).then("cursor").otherwise("found"))
            .select(
                "row",
                "found",
                cursor=pl.when(pl.col("found").is_null()).then("next"),
            )
        )
    return walk.sort("row").get_column("found").alias("op_id")


def outermost_annotation(cpu: pl.DataFrame, start_ids: pl.Series) -> pl.Series:
    """Name of the outermost user annotation (not ProfilerStep#N) enclosing each call."""
    regions = cpu.filter((pl.col("cat") == "user_annotation") & ~_is_profiler_step())
    if not regions.height:
        return pl.Series("annotation", [None] * len(start_ids), dtype=pl.String)
    regions = regions.with_columns(
        depth=nesting_depth(regions.with_columns(op_id=pl.int_range(pl.len(), dtype=pl.Int64)))
    ).filter(pl.col("depth") == 0)
    calls = (
        start_ids.alias("call_id")
        .to_frame()
        .with_row_index("row")
        .join(
            cpu.select(pl.col("op_id").alias("call_id"), *THREAD, "ts_ns", "dur_ns"),
            on="call_id",
            how="left",
        )
    )
    spans = regions.select(
        *THREAD,
        pl.col("ts_ns").alias("start"),
        (pl.col("ts_ns") + pl.col("dur_ns")).alias("end"),
        pl.col("name").alias("annotation"),
    ).sort("start")
    joined = (
        calls.filter(pl.col("ts_ns").is_not_null())
        .sort("ts_ns")
        .join_asof(
            spans,
            left_on="ts_ns",
            right_on="start",
            by=THREAD,
            strategy="backward",
            check_sortedness=False,
        )
        .select(
            "row",
            pl.when(pl.col("ts_ns") + pl.col("dur_ns") <= pl.col("end")).then("annotation"),
        )
    )
    return (
        calls.select("row").join(joined, on="row", how="left").sort("row").get_column("annotation")
    )
