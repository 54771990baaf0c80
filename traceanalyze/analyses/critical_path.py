"""`critical-path`: per iteration, the chain of work that set its length, and what freeing an
item of it would buy.

The path is walked back from the iteration's end (the later of its CPU end and its last GPU
activity's end) through each node's last-arriving predecessor (:mod:`critical_graph`,
:mod:`critical_walk`) to the iteration's start. Its segments tile the iteration, so the path's
length equals the span by construction (a test checks it on every trace).

*Slack* of an item (a kernel, copy, op or call name): how much the iteration would shrink if
every piece of it on the path took no time, with the path's other dependencies unchanged.
Each node on the path can move earlier only until its other predecessor (the one that arrived
first) binds, by at most its ``margin_ns``; so freeing pieces ``F`` shrinks the iteration by
``min(F_0, min_j(margin_j + F_j))`` where ``F_j`` is the freed time from node j to the end, the
iteration's end having the gap to the other side's end as its margin. Items off the path have
slack 0 and no item's slack exceeds its own time on the path.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from traceanalyze.analyses.activities import iteration_count, per_trace
from traceanalyze.analyses.critical_graph import (
    KIND_GAP,
    cpu_segments,
    gpu_nodes,
    iteration_bounds,
)
from traceanalyze.analyses.critical_walk import Runs, walk
from traceanalyze.trace import Trace

ITERATION = ["rank", "iteration"]
# Slack is computed for this many items, longest on the path first.
TOP_ITEMS = 20
_SEGMENT_SCHEMA = {
    "rank": pl.Int32(),
    "iteration": pl.Int64(),
    "seq": pl.Int64(),
    "sub": pl.Int64(),
    "kind": pl.String(),
    "name": pl.String(),
    "lane": pl.String(),
    "start_ns": pl.Int64(),
    "end_ns": pl.Int64(),
    "margin_ns": pl.Int64(),
}


@dataclass(frozen=True)
class CriticalPath:
    """The critical path of a trace's iterations, as means per iteration."""

    span_us_per_iter: float
    length_us_per_iter: float
    by_kind: pl.DataFrame  # kind, us_per_iter (adds up to length_us_per_iter)
    items: pl.DataFrame  # name, kind, us_per_iter, slack_us_per_iter
    iterations: pl.DataFrame  # rank, iteration, span_us, length_us
    segments: pl.DataFrame  # rank, iteration, kind, name, lane, start_ns, end_ns (forward order)

    def record(self) -> dict[str, object]:
        """The JSON object of ``critical-path --format json``."""
        return {
            "span_us_per_iter": self.span_us_per_iter,
            "length_us_per_iter": self.length_us_per_iter,
            "by_kind": self.by_kind.to_dicts(),
            "items": self.items.to_dicts(),
        }


@per_trace
def critical_path(trace: Trace) -> CriticalPath:
    """The critical path of each iteration (README, "Critical path")."""
    gpu = gpu_nodes(trace)
    segs = cpu_segments(trace)
    bounds = iteration_bounds(trace, gpu)
    runs = walk(segs, gpu, bounds)
    segments = path_segments(runs, segs, gpu)
    n = iteration_count(trace)
    lengths = segments.group_by(ITERATION).agg(
        length_ns=(pl.col("end_ns") - pl.col("start_ns")).sum()
    )
    per_iteration = (
        bounds.select(*ITERATION, span_us=(pl.col("hi_ns") - pl.col("lo_ns")) / 1e3)
        .join(lengths, on=ITERATION, how="left")
        .select(*ITERATION, "span_us", length_us=pl.col("length_ns").fill_null(0) / 1e3)
    )
    return CriticalPath(
        span_us_per_iter=_mean_per_iter(per_iteration["span_us"], n),
        length_us_per_iter=_mean_per_iter(per_iteration["length_us"], n),
        by_kind=_by_kind(segments, n),
        items=_items(segments, _terminal(runs), n),
        iterations=per_iteration,
        segments=segments.drop("margin_ns"),
    )


def _mean_per_iter(values: pl.Series, n: int) -> float:
    return float(values.fill_null(0).sum()) / n


def path_segments(runs: Runs, segs: pl.DataFrame, gpu: pl.DataFrame) -> pl.DataFrame:
    """The walk's runs expanded into segments in forward time order per iteration, trimmed so
    that they never overlap (clock jitter can make neighbours overlap by a few ns)."""
    cpu = _expand_cpu(runs, segs)
    on_gpu = _expand_gpu(runs, gpu)
    single = pl.DataFrame(
        [(*r[:3], 0, *r[3:]) for r in runs.single],
        schema=_SEGMENT_SCHEMA,
        orient="row",
    )
    frames = [f.select(list(_SEGMENT_SCHEMA)).cast(_SEGMENT_SCHEMA) for f in (cpu, on_gpu, single)]
    backward = pl.concat(frames).sort([*ITERATION, "seq", "sub"])
    # Walk order is backward in time: each segment ends where the one before it started.
    later_start = pl.col("start_ns").shift(1).cum_min().over(ITERATION)
    trimmed = backward.with_columns(
        end_ns=pl.min_horizontal("end_ns", later_start.fill_null(pl.col("end_ns")))
    ).with_columns(start_ns=pl.min_horizontal("start_ns", "end_ns"))
    return (
        trimmed.filter(pl.col("end_ns") > pl.col("start_ns"))
        .sort([*ITERATION, "start_ns"])
        .select(*ITERATION, "kind", "name", "lane", "start_ns", "end_ns", "margin_ns")
    )


def _ranges(runs: list[tuple[int, int, int, int, int, int, int]], index: str) -> pl.DataFrame:
    frame = pl.DataFrame(
        runs,
        schema={
            "rank": pl.Int32(),
            "iteration": pl.Int64(),
            "seq": pl.Int64(),
            "first": pl.Int64(),
            "last": pl.Int64(),
            "bottom": pl.Int64(),
            "top": pl.Int64(),
        },
        orient="row",
    )
    return frame.with_columns(pl.int_ranges("first", pl.col("last") + 1).alias(index)).explode(
        index
    )


def _clip(start: pl.Expr, end: pl.Expr) -> dict[str, pl.Expr]:
    return {
        "start_ns": pl.max_horizontal(start, "bottom"),
        "end_ns": pl.min_horizontal(end, "top"),
    }


def _expand_cpu(runs: Runs, segs: pl.DataFrame) -> pl.DataFrame:
    ranged = _ranges(runs.cpu, "seg").join(segs.drop("rank"), on="seg")
    return ranged.select(
        *ITERATION,
        "seq",
        "kind",
        "name",
        sub=-pl.col("seg"),
        lane=pl.format("thread {}", "tid"),
        margin_ns=pl.lit(None, pl.Int64),
        **_clip(pl.col("start_ns"), pl.col("end_ns")),
    )


def _expand_gpu(runs: Runs, gpu: pl.DataFrame) -> pl.DataFrame:
    ranged = _ranges(runs.gpu, "g").join(gpu.drop("rank", "iteration"), on="g")
    lane = pl.format("stream {}", "stream")
    work = ranged.select(
        *ITERATION,
        "seq",
        "kind",
        "name",
        "margin_ns",
        sub=-2 * pl.col("g"),
        lane=lane,
        **_clip(pl.col("ts_ns"), pl.col("end_ns")),
    )
    # Between two activities of a run: the stream waiting for the next one to start.
    gaps = ranged.filter(pl.col("g") != pl.col("first")).select(
        *ITERATION,
        "seq",
        kind=pl.lit(KIND_GAP),
        name=pl.lit(KIND_GAP),
        margin_ns=pl.lit(None, pl.Int64),
        sub=-2 * pl.col("g") + 1,
        lane=lane,
        **_clip(pl.min_horizontal("prev_end_ns", "ts_ns"), pl.col("ts_ns")),
    )
    return pl.concat([work, gaps])


def _terminal(runs: Runs) -> pl.DataFrame:
    return pl.DataFrame(
        runs.terminal,
        schema={"rank": pl.Int32(), "iteration": pl.Int64(), "end_margin_ns": pl.Int64()},
        orient="row",
    )


def _by_kind(segments: pl.DataFrame, n: int) -> pl.DataFrame:
    return (
        segments.group_by("kind")
        .agg(us_per_iter=(pl.col("end_ns") - pl.col("start_ns")).sum() / 1e3 / n)
        .sort(["us_per_iter", "kind"], descending=[True, False])
    )


def _items(segments: pl.DataFrame, terminal: pl.DataFrame, n: int) -> pl.DataFrame:
    """Named items on the path (gaps left out), longest first, with their slack."""
    dur = pl.col("end_ns") - pl.col("start_ns")
    named = segments.filter(pl.col("kind") != KIND_GAP)
    items = (
        named.group_by("name", "kind")
        .agg(us_per_iter=dur.sum() / 1e3 / n)
        .sort(["us_per_iter", "name"], descending=[True, False])
        .head(TOP_ITEMS)
    )
    return items.join(_slack(segments, terminal, items), on=["name", "kind"], how="left").select(
        "name", "kind", "us_per_iter", slack_us_per_iter=pl.col("slack_ns").fill_null(0) / 1e3 / n
    )


def _slack(segments: pl.DataFrame, terminal: pl.DataFrame, items: pl.DataFrame) -> pl.DataFrame:
    """Per item: the iteration shrink if its pieces on the path were free, summed over
    iterations (module docstring)."""
    group = ["name_item", "kind_item", *ITERATION]
    each = (
        items.select(name_item="name", kind_item="kind")
        .join(segments, how="cross")
        .sort([*group, "start_ns"])
    )
    freed = pl.when(
        (pl.col("name") == pl.col("name_item")) & (pl.col("kind") == pl.col("kind_item"))
    )
    each = each.with_columns(
        freed_ns=freed.then(pl.col("end_ns") - pl.col("start_ns")).otherwise(0)
    )
    # Freed time from each node to the iteration's end (the nodes are in forward order).
    each = each.with_columns(after_ns=pl.col("freed_ns").reverse().cum_sum().reverse().over(group))
    per_iteration = (
        each.group_by(group)
        .agg(
            total_ns=pl.col("freed_ns").sum(),
            bound_ns=(pl.col("margin_ns") + pl.col("after_ns")).min(),
        )
        .join(terminal, on=ITERATION, how="left")
        .select(
            name="name_item",
            kind="kind_item",
            slack_ns=pl.min_horizontal("total_ns", "bound_ns", "end_margin_ns"),
        )
    )
    return per_iteration.group_by("name", "kind").agg(pl.col("slack_ns").sum())
