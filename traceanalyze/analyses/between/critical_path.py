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
    SYNC_CALLS,
    cpu_segments,
    gpu_nodes,
    iteration_bounds,
)
from traceanalyze.analyses.between.critical_walk import Runs, walk
from traceanalyze.analyses.iterations import on_counted
from traceanalyze.display import Shown
from traceanalyze.link import RUNTIME_CATS
from traceanalyze.names import readable_names
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

    def record(self) -> dict[str, object]:
        """The JSON object of ``critical-path --format json``."""
        return {
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
    runs = walk(segs, gpu, bounds, trace.cpu["name"])
    segments = path_segments(runs, segs, gpu, trace.cpu["name"])
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
        segments=segments.drop("margin_ns", "tau_ns"),
        notes=_notes(trace),
    )


NO_SYNC = (
    "the trace records no synchronisation calls (cudaStreamSynchronize, cudaDeviceSynchronize, "
    "blocking copies; PyTorch records them from 2.1 with CUDA sync events enabled), so CPU time "
    "spent waiting for the GPU inside other calls counts as CPU time on the path"
)


def _notes(trace: Trace) -> tuple[str, ...]:
    calls = trace.cpu.filter(pl.col("cat").is_in(RUNTIME_CATS))
    if trace.gpu.height and not calls.filter(pl.col("name").is_in(SYNC_CALLS)).height:
        return (NO_SYNC,)
    return ()


def _mean_per_iter(values: pl.Series, n: int) -> float:
    return float(values.fill_null(0).sum()) / n


def path_segments(
    runs: Runs, segs: pl.DataFrame, gpu: pl.DataFrame, names: pl.Series
) -> pl.DataFrame:
    """The walk's runs expanded into segments in forward time order per iteration, trimmed so
    that they never overlap (clock jitter can make neighbours overlap by a few ns)."""
    cpu = _expand_cpu(runs, segs, names)
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


def _gathered(ranged: pl.DataFrame, rows: pl.DataFrame, index: str) -> pl.DataFrame:
    """``ranged`` beside the rows of ``rows`` its ``index`` column points at (the row number)."""
    picked = rows.drop("rank", index).gather(ranged[index])
    return pl.concat([ranged, picked], how="horizontal")


def _clip(start: pl.Expr, end: pl.Expr) -> dict[str, pl.Expr]:
    return {
        "start_ns": pl.max_horizontal(start, "bottom"),
        "end_ns": pl.min_horizontal(end, "top"),
    }


def _expand_cpu(runs: Runs, segs: pl.DataFrame, names: pl.Series) -> pl.DataFrame:
    ranged = _gathered(_ranges(runs.cpu, "seg"), segs, "seg")
    ranged = ranged.with_columns(name=names.gather(ranged["owner"]).fill_null(KIND_GAP))
    return ranged.select(
        *ITERATION,
        "seq",
        "kind",
        "name",
        sub=-pl.col("seg"),
        lane=pl.format("thread {}", "tid"),
        margin_ns=pl.lit(None, pl.Int64),
        tau_ns=pl.lit(None, pl.Int64),
        **_clip(pl.col("start_ns"), pl.col("end_ns")),
    )


def _expand_gpu(runs: Runs, gpu: pl.DataFrame) -> pl.DataFrame:
    ranged = _gathered(_ranges(runs.gpu, "g"), gpu.drop("iteration"), "g")
    lane = pl.format("stream {}", "stream")
    work = ranged.select(
        *ITERATION,
        "seq",
        "kind",
        "name",
        "margin_ns",
        "tau_ns",
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
        tau_ns=pl.lit(None, pl.Int64),
        sub=-2 * pl.col("g") + 1,
        lane=lane,
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
    iterations (module docstring). Only nodes with a margin can bind, and they are few, so the
    freed time before each of them comes from as-of joins on time."""
    key = ["name", "kind", *ITERATION]
    freed = (
        segments.join(items.select("name", "kind"), on=["name", "kind"])
        .sort("start_ns")
        .with_columns(before_ns=(pl.col("end_ns") - pl.col("start_ns")).cum_sum().over(key))
    )
    totals = freed.group_by(key).agg(total_ns=pl.col("before_ns").max())
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
    bound = bounds.group_by(key).agg(
        bound_ns=(pl.col("margin_ns") + pl.col("total_ns") - own).min()
    )
    per_iteration = totals.join(bound, on=key, how="left").select(
        "name", "kind", slack_ns=pl.min_horizontal("total_ns", "bound_ns")
    )
    return per_iteration.group_by("name", "kind").agg(pl.col("slack_ns").sum())


def _freed_before(nodes: pl.DataFrame, freed: pl.DataFrame, at: str) -> pl.DataFrame:
    """``nodes`` plus ``freed_before_<at>``: the item's path time before the time in ``at``."""
    key = ["name", "kind", *ITERATION]
    pieces = freed.select(*key, "start_ns", "end_ns", "before_ns")
    joined = nodes.sort(at).join_asof(
        pieces,
        left_on=at,
        right_on="start_ns",
        by=key,
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


# A path is called GPU- (CPU-) bound when that side holds at least this share of its length.
BOUND_MIN_PCT = 50.0


def path_shares(path: CriticalPath) -> tuple[float, float]:
    """The GPU's and the CPU's share of the path's length, in % (gaps are neither)."""
    shares = path.by_kind.select(
        gpu=pl.col("us_per_iter").filter(is_gpu_kind(pl.col("kind"))).sum(),
        gap=pl.col("us_per_iter").filter(pl.col("kind") == KIND_GAP).sum(),
    ).row(0)
    gpu_pct = shares[0] / path.length_us_per_iter * 100
    # The CPU's share is the rest; rounding can leave -1e-15 on an all-GPU path ("-0%").
    return gpu_pct, max(0.0, 100 - gpu_pct - shares[1] / path.length_us_per_iter * 100)


def path_verdict(path: CriticalPath) -> str:
    """One sentence from the path's time by kind: which side the path runs through, and the
    item whose freeing would buy most."""
    if path.length_us_per_iter <= 0:
        return "No iterations with a span: no critical path."
    gpu_pct, cpu_pct = path_shares(path)
    if gpu_pct >= BOUND_MIN_PCT:
        side = f"GPU-bound: {gpu_pct:.0f}% of the critical path is GPU work"
    elif cpu_pct >= BOUND_MIN_PCT:
        side = f"CPU-bound: {cpu_pct:.0f}% of the critical path is CPU time (ops, launches, calls)"
    else:
        side = f"mixed: the critical path is {gpu_pct:.0f}% GPU work and {cpu_pct:.0f}% CPU time"
    best = path.items.sort("slack_us_per_iter", descending=True).head(1)
    if not best.height or best["slack_us_per_iter"][0] <= 0:
        return side + "."
    name, slack = readable_names(best["name"])[0], best["slack_us_per_iter"][0]
    return f"{side}; freeing `{name}` would shorten an iteration by at most {slack:,.1f} µs."
