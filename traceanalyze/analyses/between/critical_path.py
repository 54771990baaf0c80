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

import numpy as np
import polars as pl

from traceanalyze.analyses.activities import iteration_count, per_trace
from traceanalyze.analyses.between.critical_graph import (
    KIND_COPY,
    KIND_GAP,
    THREAD_LANE,
    cpu_segments,
    gpu_nodes,
    iteration_bounds,
    name_codes,
    sync_calls,
)
from traceanalyze.analyses.between.critical_segments import PathRows, path_rows
from traceanalyze.analyses.between.critical_slack import items
from traceanalyze.analyses.between.critical_threads import Crossings, thread_edges
from traceanalyze.analyses.between.critical_walk import Runs, walk
from traceanalyze.analyses.iterations import on_counted
from traceanalyze.analyses.step.clock import offset_note
from traceanalyze.analyses.step.model import step_model
from traceanalyze.display import Shown
from traceanalyze.trace import Trace

ITERATION = ["rank", "iteration"]
# Slack is computed for this many items, longest on the path first.
TOP_ITEMS = 20


@dataclass(frozen=True, repr=False)  # Shown: a short repr, tables in Jupyter
class CriticalPath(Shown):
    """The critical path of a trace's iterations, as means per iteration."""

    span_us_per_iter: float
    length_us_per_iter: float
    by_kind: pl.DataFrame  # kind, us_per_iter (adds up to length_us_per_iter)
    by_thread: pl.DataFrame  # rank, thread, autograd_engine, us_per_iter (CPU threads only)
    items: pl.DataFrame  # name, kind, us_per_iter, slack_us_per_iter
    iterations: pl.DataFrame  # rank, iteration, span_us, length_us
    segments: pl.DataFrame  # rank, iteration, kind, name, lane, start_ns, end_ns (forward order)
    notes: tuple[str, ...] = ()  # what the trace lacks for a sure path
    # The step model's verdict (the same as `summary`'s), which the path's make-up explains.
    bound: str | None = None
    bound_margin_pct: float | None = None
    bound_note: str | None = None


@per_trace
@on_counted
def critical_path(trace: Trace) -> CriticalPath:
    """The critical path of each iteration (README, "Critical path")."""
    gpu = gpu_nodes(trace)
    segs = cpu_segments(trace)
    bounds = iteration_bounds(trace, gpu)
    syncs = sync_calls(trace)
    names = name_codes(trace.cpu["name"])
    crossings = thread_edges(trace, segs, names)
    runs = walk(segs, gpu, bounds, trace.cpu, syncs, crossings.edges)
    rows = path_rows(runs, segs, gpu, trace, syncs, names)
    n = iteration_count(trace)
    per_run = rows.runs.with_columns(rows.per_run_ns())
    lengths = per_run.group_by(ITERATION).agg(length_ns=pl.col("dur_ns").sum())
    per_iteration = (
        bounds.select(*ITERATION, span_us=(pl.col("hi_ns") - pl.col("lo_ns")) / 1e3)
        .join(lengths, on=ITERATION, how="left")
        .select(*ITERATION, "span_us", length_us=pl.col("length_ns").fill_null(0) / 1e3)
    )
    model = step_model(trace)
    verdict = model.verdict
    return CriticalPath(
        bound=verdict.bound,
        bound_margin_pct=verdict.margin_pct,
        bound_note=verdict.note,
        span_us_per_iter=_mean_per_iter(per_iteration["span_us"], n),
        length_us_per_iter=_mean_per_iter(per_iteration["length_us"], n),
        by_kind=_by_kind(rows, n),
        by_thread=_by_thread(per_run, crossings, n),
        items=items(rows, _terminal(runs), n, TOP_ITEMS),
        iterations=per_iteration,
        segments=rows.strings(),
        notes=_notes(trace, syncs, crossings)
        + ((offset_note(list(model.clock)),) if model.clock else ()),
    )


NO_SYNC = (
    "the trace records no synchronisation calls (cudaStreamSynchronize, cudaDeviceSynchronize, "
    "blocking copies; PyTorch records them from 2.1 with CUDA sync events enabled), so CPU time "
    "spent waiting for the GPU inside other calls counts as CPU time on the path"
)


UNLINKED_ENGINE = (
    "thread {tid} runs the autograd engine's backward ops, but no thread is seen waiting for it "
    "alone (the thread that called backward recorded other work meanwhile), so the path "
    "reaches those ops only through their launches and syncs"
)


def _notes(trace: Trace, syncs: pl.Series, crossings: Crossings) -> tuple[str, ...]:
    notes = [NO_SYNC] if trace.gpu.height and not len(syncs) else []
    notes += [UNLINKED_ENGINE.format(tid=tid) for _, tid in crossings.unlinked]  # a few
    return tuple(notes)


def _mean_per_iter(values: pl.Series, n: int) -> float:
    return float(values.fill_null(0).sum()) / n


_NODE_SCHEMA = {
    "rank": pl.Int32(),
    "iteration": pl.Int64(),
    "at_ns": pl.Int64(),
    "margin_ns": pl.Int64(),
    "tau_ns": pl.Int64(),
}


def _terminal(runs: Runs) -> pl.DataFrame:
    """The nodes that are no segment's start: each iteration's end (a node just after its
    last segment) and the crossings between threads (at the first segment after them)."""
    ends = pl.DataFrame(runs.terminal, schema=_NODE_SCHEMA, orient="row")
    crossings = pl.DataFrame(runs.crossings, schema=_NODE_SCHEMA, orient="row")
    return pl.concat([ends.with_columns(pl.col("at_ns") + 1), crossings])


def _by_kind(rows: PathRows, n: int) -> pl.DataFrame:
    kinds = len(rows.kinds)
    present = np.flatnonzero(np.bincount(rows.kind, minlength=kinds))
    # Whole nanoseconds, summed exactly (below 2**53), divided as everywhere else.
    sums = np.bincount(rows.kind, weights=rows.end - rows.start, minlength=kinds)
    totals = pl.DataFrame(
        {"kind": rows.kinds.gather(present), "dur_ns": np.rint(sums[present]).astype(np.int64)}
    )
    return totals.select("kind", us_per_iter=pl.col("dur_ns") / 1e3 / n).sort(
        ["us_per_iter", "kind"], descending=[True, False]
    )


def _by_thread(per_run: pl.DataFrame, crossings: Crossings, n: int) -> pl.DataFrame:
    """The path's time on each CPU thread (from each run's, ``per_run``: rank, lane,
    dur_ns), with whether the thread runs the autograd engine."""
    engine = crossings.engine_threads.rename({"tid": "thread"}).with_columns(
        autograd_engine=pl.lit(value=True)
    )
    # Summed per run first (a run is on one lane), then per lane: a few hundred rows.
    threads = (
        per_run.filter(pl.col("lane").str.starts_with(THREAD_LANE) & (pl.col("dur_ns") > 0))
        .group_by("rank", "lane")
        .agg(pl.col("dur_ns").sum())
        .select(
            "rank",
            thread=pl.col("lane").str.strip_prefix(THREAD_LANE).cast(pl.Int64),
            us_per_iter=pl.col("dur_ns") / 1e3 / n,
        )
    )
    return (
        threads.join(engine, on=["rank", "thread"], how="left")
        .select(
            "rank",
            "thread",
            pl.col("autograd_engine").fill_null(value=False),
            "us_per_iter",
        )
        .sort(["us_per_iter", "rank", "thread"], descending=[True, False, False])
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
