"""GPU activities with everything the analyses share: category, GEMM precision, occupancy.

Analyses that others build on are memoised per Trace (:func:`per_trace`): a report asks for the
summary, the kernel table and the memory traffic of one trace from several places.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import TypeVar

import polars as pl

from traceanalyze.classify import classify
from traceanalyze.occupancy import theoretical_occupancy
from traceanalyze.trace import Trace

R = TypeVar("R")

# Inside a CUDA graph a memory copy or set node can run as a kernel of the runtime's own
# (`memcpy128`): by its own name it is the copy or set the eager run makes with
# cudaMemcpyAsync / cudaMemsetAsync, and counts as one.
GRAPH_LAUNCHES = ("cudaGraphLaunch", "hipGraphLaunch")
GRAPH_TRANSFER_KERNELS: dict[str, str] = {"memcpy": r"^memcpy\d*$", "memset": r"^memset\d*$"}


def transfer_kind() -> pl.Expr:
    """``kind`` with the copy and set kernels of a replayed CUDA graph as memcpy/memset."""
    graph_kernel = (pl.col("kind") == "kernel") & pl.col("launch_api").is_in(GRAPH_LAUNCHES)
    kind = pl.col("kind")
    for transfer, pattern in GRAPH_TRANSFER_KERNELS.items():
        kind = (
            pl.when(graph_kernel & pl.col("name").str.contains(pattern))
            .then(pl.lit(transfer))
            .otherwise(kind)
        )
    return kind.alias("kind")


def per_trace(analysis: Callable[[Trace], R]) -> Callable[[Trace], R]:
    """Compute ``analysis(trace)`` once per Trace object (kept while the Trace lives).

    Results are shared: callers must not mutate them (frames are immutable anyway).
    """
    memo: weakref.WeakKeyDictionary[Trace, R] = weakref.WeakKeyDictionary()

    @functools.wraps(analysis)
    def memoised(trace: Trace) -> R:
        if trace not in memo:
            memo[trace] = analysis(trace)
        return memo[trace]

    return memoised


@per_trace
def activities(trace: Trace) -> pl.DataFrame:
    """The gpu frame plus ``category``, ``gemm_precision`` and the occupancy columns; a
    replayed graph's copy and set kernels are memcpy/memset (:func:`transfer_kind`)."""
    classified = classify(trace.gpu, trace.cpu).with_columns(transfer_kind())
    transfer = pl.col("kind").is_in(list(GRAPH_TRANSFER_KERNELS))
    classified = classified.with_columns(
        category=pl.when(transfer).then(pl.col("kind")).otherwise(pl.col("category"))
    )
    frame = theoretical_occupancy(classified, trace.devices).with_columns(
        # Occupancy is a property of kernels; copies and sets have no launch footprint.
        *(
            pl.when(pl.col("kind") == "kernel").then(pl.col(c)).alias(c)
            for c in ("theoretical_occupancy_pct", "occupancy_limiter", "achieved_occupancy_pct")
        )
    )
    return frame


def in_iterations(frame: pl.DataFrame) -> pl.DataFrame:
    """Rows that belong to an iteration (activities launched before the window have none)."""
    return frame.filter(pl.col("iteration").is_not_null())


def iteration_count(trace: Trace) -> int:
    """The divisor of per-iteration figures: iterations times ranks (one row per rank and step),
    so a multi-rank trace reports the mean per rank and iteration."""
    return max(trace.iterations.height, 1)
