"""`critical-path`: per iteration, the chain of work that set its length, and what freeing an
item of it would buy.

The path is walked back from the end of the iteration's window (the span of its slower side:
the step, or its GPU span on its longest device, whichever is longer, so the window's length
is the accounting's ``wall_us``; :func:`critical_graph.iteration_bounds`) through each node's
last-arriving predecessor (:mod:`critical_graph`, :mod:`critical_walk`) to the window's start.
Its segments tile the window, so the path's length equals the span, and the span the wall
time, by construction (a test checks both on every trace).

*Slack* of an item (a kernel, copy, op or call name): how much the iteration would shrink if
every piece of it on the path took no time: a first-order estimate that keeps the path. Each
node on the path can move earlier only until its other predecessor (the one that arrived
first) binds: by its ``margin_ns``, plus however far that predecessor itself moves, taken as
the freed time on the path before ``tau_ns``, the point where the other predecessor's chain
leaves the CPU (a launch call or a sync call's start). So freeing pieces shrinks the iteration
by ``min(F, min_j(margin_j + F - own_j))``, ``F`` the freed time on the path and ``own_j`` the
freed time between ``tau_j`` and node j; the iteration's end is a node whose margin is the gap
to the other side's end. Items off the path have
slack 0 and no item's slack exceeds its own time on the path.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from traceanalyze.analyses.activities import iteration_count, per_trace
from traceanalyze.analyses.between.critical_graph import (
    KIND_COPY,
    KIND_GAP,
    cpu_segments,
    gpu_nodes,
    iteration_bounds,
    owner_columns,
    sync_calls,
)
from traceanalyze.analyses.between.critical_walk import Runs, walk
from traceanalyze.analyses.iterations import on_counted
from traceanalyze.analyses.step.model import step_model
from traceanalyze.display import Shown
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
    "tau_ns": pl.Int64(),
}


@dataclass(frozen=True, repr=False)  # Shown: a short repr, tables in Jupyter
class CriticalPath(Shown):
    """The critical path of a trace's iterations, as means per iteration."""

    span_us_per_iter: float
    length_us_per_iter: float
    by_kind: pl.DataFrame  # kind, us_per_iter (adds up to length_us_per_iter)
    items: pl.DataFrame  # name, kind, us_per_iter, slack_us_per_iter
    iterations: pl.DataFrame  # rank, iteration, span_us, length_us
    segments: pl.DataFrame  # rank, iteration, kind, name, lane, start_ns, end_ns (forward order)
    notes: tuple[str, ...] = ()  # what the trace lacks for a sure path
    # The step model's verdict (the same as `summary`'s), which the path's make-up explains.
    bound: str | None = None
    bound_margin_pct: float | None = None
    bound_note: str | None = None

    def record(self) -> dict[str, object]:
        """The JSON object of ``critical-path --format json``."""
        return {
            "bound": self.bound,
            "bound_margin_pct": self.bound_margin_pct,
            "bound_note": self.bound_note,
            "span_us_per_iter": self.span_us_per_iter,
            "length_us_per_iter": self.length_us_per_iter,
            "by_kind": self.by_kind.to_dicts(),
            "items": self.items.to_dicts(),
            "notes": list(self.notes),
        }


@per_trace
@on_counted
def critical_path(trace: Trace) -> CriticalPath:
    """The critical path of each iteration (README, "Critical path")."""
    gpu = gpu_nodes(trace)
    segs = cpu_segments(trace)
    bounds = iteration_bounds(trace, gpu)
    syncs = sync_calls(trace)
    runs = walk(segs, gpu, bounds, trace.cpu, syncs)
    segments = path_segments(runs, segs, gpu, trace)
    n = iteration_count(trace)
    lengths = segments.group_by(ITERATION).agg(
        length_ns=(pl.col("end_ns") - pl.col("start_ns")).sum()
    )
    per_iteration = (
        bounds.select(*ITERATION, span_us=(pl.col("hi_ns") - pl.col("lo_ns")) / 1e3)
        .join(lengths, on=ITERATION, how="left")
        .select(*ITERATION, "span_us", length_us=pl.col("length_ns").fill_null(0) / 1e3)
    )
    verdict = step_model(trace).verdict
    return CriticalPath(
        bound=verdict.bound,
        bound_margin_pct=verdict.margin_pct,
        bound_note=verdict.note,
        span_us_per_iter=_mean_per_iter(per_iteration["span_us"], n),
        length_us_per_iter=_mean_per_iter(per_iteration["length_us"], n),
        by_kind=_by_kind(segments, n),
        items=_items(segments, _terminal(runs), n),
        iterations=per_iteration,
        segments=segments.drop("margin_ns", "tau_ns"),
        notes=_notes(trace, syncs),
    )


NO_SYNC = (
    "the trace records no synchronisation calls (cudaStreamSynchronize, cudaDeviceSynchronize, "
    "blocking copies; PyTorch records them from 2.1 with CUDA sync events enabled), so CPU time "
    "spent waiting for the GPU inside other calls counts as CPU time on the path"
)


def _notes(trace: Trace, syncs: pl.Series) -> tuple[str, ...]:
    if trace.gpu.height and not len(syncs):
        return (NO_SYNC,)
    return ()


def _mean_per_iter(values: pl.Series, n: int) -> float:
    return float(values.fill_null(0).sum()) / n


def path_segments(runs: Runs, segs: pl.DataFrame, gpu: pl.DataFrame, trace: Trace) -> pl.DataFrame:
    """The walk's runs expanded into segments in forward time order per iteration, trimmed so
    that they never overlap (clock jitter can make neighbours overlap by a few ns)."""
    cpu = _expand_cpu(runs, segs, trace)
    on_gpu = _expand_gpu(runs, gpu)
    single = pl.DataFrame(
        [(*r[:3], 0, *r[3:]) for r in runs.single],
        schema=_SEGMENT_SCHEMA,
        orient="row",
    )
    frames = [
        f.select(list(_SEGMENT_SCHEMA)).cast(pl.Schema(_SEGMENT_SCHEMA))
        for f in (cpu, on_gpu, single)
    ]
    # Walk order (seq, and within a run sub) is backward in time, so its reverse is forward:
    # one sort. The rows come mostly in that order already, which Polars' sort is quick on.
    forward = pl.concat(frames).sort(
        [*ITERATION, "seq", "sub"], descending=[False, False, True, True]
    )
    # Each segment ends where the next one starts (the earliest start after it, walked back).
    later_start = pl.col("start_ns").shift(-1).cum_min(reverse=True).over(ITERATION)
    trimmed = forward.with_columns(
        end_ns=pl.min_horizontal("end_ns", later_start.fill_null(pl.col("end_ns")))
    ).with_columns(start_ns=pl.min_horizontal("start_ns", "end_ns"))
    # Trimmed, non-empty segments do not overlap, so they are in start order already: no
    # second sort.
    return trimmed.filter(pl.col("end_ns") > pl.col("start_ns")).select(
        *ITERATION, "kind", "name", "lane", "start_ns", "end_ns", "margin_ns", "tau_ns"
    )


def _expanded(
    runs: list[tuple[int, int, int, int, int, int, int]],
    index: str,
    rows: pl.DataFrame,
    template: str,
    column: str,
) -> pl.DataFrame:
    """One row per ``index`` of each run (``first`` to ``last``) beside the row of ``rows`` it
    points at (the row number), with ``lane``: ``template`` filled with ``column``. A run is on
    one thread or stream, so its lane is made once per run and gathered (formatting it on
    every row cost more than the rest of the expansion)."""
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
    ).with_row_index("run")
    lanes = frame.select(pl.format(template, pl.lit(rows[column].gather(frame["first"]))))
    ranged = frame.with_columns(pl.int_ranges("first", pl.col("last") + 1).alias(index)).explode(
        index
    )
    picked = rows.drop("rank", index).gather(ranged[index])
    return pl.concat([ranged, picked], how="horizontal").with_columns(
        lane=pl.lit(lanes.to_series()).gather("run")
    )


def _clip(start: pl.Expr, end: pl.Expr) -> dict[str, pl.Expr]:
    return {
        "start_ns": pl.max_horizontal(start, "bottom"),
        "end_ns": pl.min_horizontal(end, "top"),
    }


def _expand_cpu(runs: Runs, segs: pl.DataFrame, trace: Trace) -> pl.DataFrame:
    ranged = _expanded(runs.cpu, "seg", segs, "thread {}", "tid")
    ranged = pl.concat([ranged, owner_columns(trace, ranged["owner"])], how="horizontal")
    return ranged.select(
        *ITERATION,
        "seq",
        "kind",
        "name",
        "lane",
        sub=-pl.col("seg"),
        margin_ns=pl.lit(None, pl.Int64),
        tau_ns=pl.lit(None, pl.Int64),
        **_clip(pl.col("start_ns"), pl.col("end_ns")),
    )


def _expand_gpu(runs: Runs, gpu: pl.DataFrame) -> pl.DataFrame:
    ranged = _expanded(runs.gpu, "g", gpu.drop("iteration"), "stream {}", "stream")
    work = ranged.select(
        *ITERATION,
        "seq",
        "lane",
        "kind",
        "name",
        "margin_ns",
        "tau_ns",
        sub=-2 * pl.col("g"),
        **_clip(pl.col("ts_ns"), pl.col("end_ns")),
    )
    # Between two activities of a run: the stream waiting for the next one to start.
    gaps = ranged.filter(pl.col("g") != pl.col("first")).select(
        *ITERATION,
        "seq",
        "lane",
        kind=pl.lit(KIND_GAP),
        name=pl.lit(KIND_GAP),
        margin_ns=pl.lit(None, pl.Int64),
        tau_ns=pl.lit(None, pl.Int64),
        sub=-2 * pl.col("g") + 1,
        **_clip(pl.min_horizontal("prev_end_ns", "ts_ns"), pl.col("ts_ns")),
    )
    return pl.concat([work, gaps])


def _terminal(runs: Runs) -> pl.DataFrame:
    return pl.DataFrame(
        runs.terminal,
        schema={
            "rank": pl.Int32(),
            "iteration": pl.Int64(),
            "at_ns": pl.Int64(),
            "margin_ns": pl.Int64(),
            "tau_ns": pl.Int64(),
        },
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
    named = segments.filter(pl.col("kind") != KIND_GAP).with_row_index("row")
    # One pass over the names: each item's time and its pieces (rows of ``named``), so the
    # top items' pieces are a gather, not a second match of every segment's name.
    items = (
        named.group_by("name", "kind")
        .agg(us_per_iter=dur.sum() / 1e3 / n, rows="row")
        .sort(["us_per_iter", "name"], descending=[True, False])
        .head(TOP_ITEMS)
        .with_row_index("item")
    )
    numbered = items.select("item", "rows").explode("rows")
    pieces = named.gather(numbered["rows"]).with_columns(numbered["item"])
    return items.join(_slack(segments, pieces, terminal), on="item", how="left").select(
        "name", "kind", "us_per_iter", slack_us_per_iter=pl.col("slack_ns").fill_null(0) / 1e3 / n
    )


# An item's pieces in one iteration.
_ITEM_KEY = ["item", *ITERATION]


def _slack(segments: pl.DataFrame, pieces: pl.DataFrame, terminal: pl.DataFrame) -> pl.DataFrame:
    """Per item (``item``, the number of its ``pieces``): the iteration shrink if its pieces
    on the path were free, summed over iterations (module docstring). Only nodes with a margin
    can bind, and they are few, so the freed time before each of them comes from as-of joins
    on time."""
    # An item's pieces in an iteration come in path order, which is start order (the path's
    # segments do not overlap): the running sum and the as-of joins need no sort.
    freed = pieces.with_columns(
        before_ns=(pl.col("end_ns") - pl.col("start_ns")).cum_sum().over(_ITEM_KEY)
    )
    totals = freed.group_by(_ITEM_KEY).agg(total_ns=pl.col("before_ns").max())
    # The iteration's end is a node too, just after the last segment.
    nodes = pl.concat(
        [
            segments.filter(pl.col("margin_ns").is_not_null()).select(
                *ITERATION, at_ns="start_ns", margin_ns="margin_ns", tau_ns="tau_ns"
            ),
            terminal.filter(pl.col("margin_ns").is_not_null()).with_columns(pl.col("at_ns") + 1),
        ]
    )
    bounds = nodes.join(totals, on=ITERATION)
    bounds = _freed_before(_freed_before(bounds, freed, "at_ns"), freed, "tau_ns")
    # Freed time between where the other chain joins and the node moves this chain only.
    own = pl.col("freed_before_at_ns") - pl.col("freed_before_tau_ns")
    bound = bounds.group_by(_ITEM_KEY).agg(
        bound_ns=(pl.col("margin_ns") + pl.col("total_ns") - own).min()
    )
    per_iteration = totals.join(bound, on=_ITEM_KEY, how="left").select(
        "item", slack_ns=pl.min_horizontal("total_ns", "bound_ns")
    )
    return per_iteration.group_by("item").agg(pl.col("slack_ns").sum())


def _freed_before(nodes: pl.DataFrame, freed: pl.DataFrame, at: str) -> pl.DataFrame:
    """``nodes`` plus ``freed_before_<at>``: the item's path time before the time in ``at``."""
    pieces = freed.select(*_ITEM_KEY, "start_ns", "end_ns", "before_ns")
    joined = nodes.sort(at).join_asof(
        pieces,
        left_on=at,
        right_on="start_ns",
        by=_ITEM_KEY,
        strategy="backward",
        allow_exact_matches=False,
        check_sortedness=False,
    )
    # The last piece may reach past `at`: only its part before `at` counts.
    before = pl.col("before_ns") - (pl.col("end_ns") - pl.col(at)).clip(lower_bound=0)
    return joined.with_columns(before.fill_null(0).alias(f"freed_before_{at}")).drop(
        "start_ns", "end_ns", "before_ns"
    )


# Kinds of path time spent on the GPU; the rest (ops, launches, runtime calls, sync waits,
# annotations) is the CPU's. Gaps are neither.
def is_gpu_kind(kind: pl.Expr) -> pl.Expr:
    return kind.str.starts_with("kernel:") | (kind == KIND_COPY)


def path_shares(path: CriticalPath) -> tuple[float, float]:
    """The GPU's and the CPU's share of the path's length, in % (gaps are neither)."""
    shares = path.by_kind.select(
        gpu=pl.col("us_per_iter").filter(is_gpu_kind(pl.col("kind"))).sum(),
        gap=pl.col("us_per_iter").filter(pl.col("kind") == KIND_GAP).sum(),
    ).row(0)
    gpu_pct = shares[0] / path.length_us_per_iter * 100
    # The CPU's share is the rest; rounding can leave -1e-15 on an all-GPU path ("-0%").
    return gpu_pct, max(0.0, 100 - gpu_pct - shares[1] / path.length_us_per_iter * 100)
