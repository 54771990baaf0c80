"""Calls: the repeated units of work whose first run is compared with the steady ones.

Found, in this order of preference:

1. ``call<i>`` annotations (``record_function("call<i>")``, what ``capture --cold`` records;
   one profiler step around all of them or one per call makes no difference);
2. the trace's iterations (``ProfilerStep#N``, else a repeated top-level annotation): the first
   step against the rest;
3. repeated regions: annotations at any depth, not nested in each other, that run the same
   sequence of outermost operators (a benchmark's ``warmup|forward`` and ``measure|forward``);
   of several such groups the one covering the most time;
4. a repeated sequence of outermost operators (no annotation at all): on each of the busiest
   threads the period that covers the longest run, at most ``MAX_PERIOD`` operators long; of
   those threads the one whose run spans the most time (the thread that drives the loop: a
   training step's forward runs on it while its backward runs on autograd's thread, which is
   busier). Each call runs from the start of its block to the start of the next, so it holds
   what other threads did meanwhile; the last block, whose end is not known, is no call.
   The calls must hold most of the work (``MIN_COVERAGE_PCT`` of the GPU activity time, as
   iterations must): a run of one operator repeated within a single step is no loop.

Operators that run inside a compile (Dynamo tracing a model on fake tensors, under
``(dynamo_timed)`` phases) are no calls: they repeat per traced layer, not per call.

Each call also gets a ``shape``: the names and recorded input shapes of its outermost
operators (null without ``record_shapes``). The first call of each shape pays the one-off work;
the later calls of that shape are its steady calls.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from traceanalyze.analyses.cputree import outermost_ops
from traceanalyze.analyses.iterations import MIN_COVERAGE_PCT, concurrent_spans
from traceanalyze.analyses.repeated import (
    SPAN,
    as_regions,
    group_spans,
    outside_compiles,
    region_groups,
)
from traceanalyze.link import STEP_CATS
from traceanalyze.trace import IterationSource, Trace

CALL_REGION = r"^call(\d+)$"
# Longest call, in outermost operators, that a repeated operator sequence is searched for.
MAX_PERIOD = 512
# Threads per rank (the busiest) searched for a repeated operator sequence.
MAX_THREADS = 4

CALL_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "call": pl.Int64(),  # 1, 2, ... in time order on each rank
    "name": pl.String(),  # the region's name, or the first operator of a repeated sequence
    "region_id": pl.Int64(),  # op_id of the call's region in trace.cpu (null: no region)
    "region_depth": pl.Int32(),  # the region's depth in the call tree (-1: no region)
    "pid": pl.Int64(),
    "tid": pl.Int64(),
    "ts_ns": pl.Int64(),
    "dur_ns": pl.Int64(),
    "shape": pl.String(),
}


@dataclass(frozen=True)
class Calls:
    """The calls of a trace and how they were found."""

    spans: pl.DataFrame  # CALL_SCHEMA
    source: str  # "annotation call<i>", "ProfilerStep", "annotation:<name>", ...

    @property
    def count(self) -> int:
        return self.spans.height


def find_calls(trace: Trace) -> Calls:
    """The calls of ``trace`` (see the module docstring); no rows when none repeat."""
    for finder in (_call_regions, _iteration_calls, _repeated_regions, _repeated_sequence):
        found = finder(trace)
        if found is not None:
            spans, source = found
            return Calls(_with_shapes(trace, _numbered(spans)), source)
    return Calls(pl.DataFrame(schema=CALL_SCHEMA), "none")


Found = tuple[pl.DataFrame, str] | None
_SPAN = SPAN


def _call_regions(trace: Trace) -> Found:
    regions = trace.cpu.filter(
        (pl.col("cat") == "user_annotation") & pl.col("name").str.contains(CALL_REGION)
    )
    if regions.height < 2:
        return None
    # A region nested in another of the same number (a re-entered record_function) is one call.
    outer = as_regions(regions).sort("region_depth").unique(["rank", "name"], keep="first")
    return outer.select(*_SPAN, order=pl.col("name").str.extract(CALL_REGION).cast(pl.Int64)), (
        "annotations call<i>"
    )


def _iteration_calls(trace: Trace) -> Found:
    if trace.iteration_source is IterationSource.WHOLE_TRACE or trace.iterations.height < 2:
        return None
    if concurrent_spans(trace.iterations):
        # Annotations running at once (per request, on several threads) are no loop's calls,
        # as they are no steps (hta_mtia_inference: 137 of 0.9-15 µs on 6 threads).
        return None
    regions = trace.cpu.filter(pl.col("cat").is_in(STEP_CATS)).join(
        trace.iterations.select("rank", "name", "ts_ns"), on=["rank", "name", "ts_ns"], how="semi"
    )
    regions = as_regions(regions).sort("region_depth").unique(["rank", "name", "ts_ns"])
    return regions.select(*_SPAN, order="ts_ns"), str(trace.iteration_source)


def _repeated_regions(trace: Trace) -> Found:
    """The group of non-nested annotations with the same operator sequence covering most time
    (:mod:`~traceanalyze.analyses.repeated`, which the iterations read too)."""
    groups = region_groups(trace)
    if not groups.height:
        return None
    chosen = group_spans(trace, groups.head(1))
    names = " / ".join(chosen["name"].unique(maintain_order=True).to_list())
    return chosen.select(*_SPAN, order="ts_ns"), f"repeated region: {names}"


def _repeated_sequence(trace: Trace) -> Found:
    """Blocks of a periodic run of outermost operators, on each rank's driving thread."""
    ops = outside_compiles(trace)
    if ops.height < 2:
        return None
    busiest = (
        ops.group_by("rank", "pid", "tid")
        .agg(busy=pl.col("dur_ns").sum())
        .sort(["rank", "busy", "pid", "tid"], descending=[False, True, False, False])
        .group_by("rank", maintain_order=True)
        .head(MAX_THREADS)
    )
    found = []
    for rank in busiest["rank"].unique().sort():  # a few threads per rank, not per event
        runs = [
            blocks
            for thread in busiest.filter(pl.col("rank") == rank).iter_rows(named=True)
            if (blocks := _periodic_blocks(_on(ops, thread))) is not None
        ]
        if runs:
            # The run spanning the most time; of equal spans the busier thread (listed first).
            found.append(max(runs, key=_time_spanned))
    spans = pl.concat([_start_to_start(blocks) for blocks in found]) if found else None
    if spans is None or spans.height < 2 or not _holds_the_work(trace, spans):
        return None
    return spans.select(*_SPAN, order="ts_ns"), "repeated operator sequence"


def _holds_the_work(trace: Trace, spans: pl.DataFrame) -> bool:
    """Whether the calls, first start to last end, hold at least ``MIN_COVERAGE_PCT`` of the
    GPU activity time (of the outermost operators' time in a trace without GPU activity): a
    repeated operator that is no loop (autograd accumulating a model's gradients one
    parameter at a time) spans a sliver of the work."""
    window = spans.group_by("rank").agg(
        first=pl.col("ts_ns").min(), last=(pl.col("ts_ns") + pl.col("dur_ns")).max()
    )
    work = trace.gpu if trace.gpu.height else outermost_ops(trace)
    inside = work.join(window, on="rank").filter(
        (pl.col("ts_ns") >= pl.col("first")) & (pl.col("ts_ns") < pl.col("last"))
    )
    total = int(work["dur_ns"].sum())
    return total > 0 and int(inside["dur_ns"].sum()) * 100 >= total * MIN_COVERAGE_PCT


def _time_spanned(blocks: pl.DataFrame) -> int:
    """From the first block's start to the last one's end, in ns."""
    return int(blocks.select(pl.col("end").max() - pl.col("ts_ns").min()).item())


def _on(ops: pl.DataFrame, thread: dict[str, object]) -> pl.DataFrame:
    """The rows of ``ops`` on one thread, in time order."""
    key = pl.DataFrame([thread]).select("rank", "pid", "tid")
    return ops.join(key, on=["rank", "pid", "tid"]).sort("ts_ns")


def _start_to_start(blocks: pl.DataFrame) -> pl.DataFrame:
    """Each block from its start to the next block's start; the last block, whose end is not
    known (what follows it may be the loop's next work or other work), is no call."""
    ends = pl.col("ts_ns").shift(-1)
    return blocks.with_columns(dur_ns=ends - pl.col("ts_ns")).drop("end").head(-1)


def _periodic_blocks(ops: pl.DataFrame) -> pl.DataFrame | None:
    """The blocks (``ts_ns`` first start, ``end`` last end) of the longest periodic run of
    operator names (``ops`` on one thread, in time order)."""
    codes = ops["name"].rank("dense")
    n = codes.len()
    best: tuple[int, int, int] | None = None  # (covered, period, start)
    for period in range(1, min(n // 2, MAX_PERIOD) + 1):  # one vector comparison per period
        run, start = _longest_true_run(codes.head(n - period) == codes.tail(n - period))
        covered = run + period
        if covered >= 2 * period and (best is None or covered > best[0]):
            best = (covered, period, start)
    if best is None:
        return None
    covered, period, start = best
    calls = covered // period
    block = ops.slice(start, calls * period).with_columns(
        block=pl.int_range(pl.len()) // period, end=pl.col("ts_ns") + pl.col("dur_ns")
    )
    return block.group_by("block", maintain_order=True).agg(
        pl.col("rank").first(),
        pl.col("name").first(),
        region_id=pl.lit(None, pl.Int64),
        region_depth=pl.lit(-1, pl.Int32),
        pid=pl.col("pid").first(),
        tid=pl.col("tid").first(),
        ts_ns=pl.col("ts_ns").min(),
        end=pl.col("end").max(),
    )


def _longest_true_run(matches: pl.Series) -> tuple[int, int]:
    """Length and start of the longest run of True in ``matches`` (0, 0 if none)."""
    runs = matches.rle().struct.unnest().with_columns(start=pl.col("len").cum_sum() - pl.col("len"))
    true = runs.filter(pl.col("value")).sort(["len", "start"], descending=[True, False])
    if not true.height:
        return 0, 0
    return int(true.item(0, "len")), int(true.item(0, "start"))


def _numbered(spans: pl.DataFrame) -> pl.DataFrame:
    """``call`` = 1, 2, ... in the order of ``order`` on each rank."""
    return (
        spans.sort("rank", "order")
        .with_columns(call=pl.int_range(1, pl.len() + 1).over("rank"))
        .select(*(c for c in CALL_SCHEMA if c != "shape"))
        .cast({c: t for c, t in CALL_SCHEMA.items() if c != "shape"})
    )


def _with_shapes(trace: Trace, spans: pl.DataFrame) -> pl.DataFrame:
    """``shape``: the outermost operators' names and input shapes in the call, in order."""
    inside = ops_in_calls(outermost_ops(trace), spans)
    described = pl.col("name") + pl.lit(" ") + pl.col("input_dims").fill_null("")
    shapes = (
        inside.sort("ts_ns")
        .group_by("rank", "call")
        .agg(shape=pl.when(pl.col("input_dims").is_not_null().any()).then(described.str.join("\n")))
    )
    return spans.join(shapes, on=["rank", "call"], how="left").select(CALL_SCHEMA.keys())


def ops_in_calls(rows: pl.DataFrame, spans: pl.DataFrame) -> pl.DataFrame:
    """``rows`` of trace.cpu inside a call: on the call's thread, starting in its span, below
    its region; with the call's ``call`` and ``region_depth``."""
    thread = ["rank", "pid", "tid"]
    starts = spans.select(
        *thread,
        "call",
        "region_depth",
        call_start=pl.col("ts_ns"),
        call_end=pl.col("ts_ns") + pl.col("dur_ns"),
    ).sort("call_start")
    joined = rows.sort("ts_ns").join_asof(
        starts,
        left_on="ts_ns",
        right_on="call_start",
        by=thread,
        strategy="backward",
        check_sortedness=False,
    )
    inside = (pl.col("ts_ns") < pl.col("call_end")) & (pl.col("depth") > pl.col("region_depth"))
    return joined.filter(inside.fill_null(value=False)).drop("call_start", "call_end")


def ops_in_time(rows: pl.DataFrame, spans: pl.DataFrame) -> pl.DataFrame:
    """``rows`` (with ``rank`` and ``ts_ns``) with ``call``: the call whose span holds the
    row's start, on any thread of the rank (null: in no call)."""
    starts = spans.select(
        "rank", "call", call_start="ts_ns", call_end=pl.col("ts_ns") + pl.col("dur_ns")
    ).sort("call_start")
    joined = rows.sort("ts_ns").join_asof(
        starts,
        left_on="ts_ns",
        right_on="call_start",
        by="rank",
        strategy="backward",
        check_sortedness=False,
    )
    inside = pl.col("ts_ns") < pl.col("call_end")
    return joined.with_columns(call=pl.when(inside).then("call")).drop("call_start", "call_end")
