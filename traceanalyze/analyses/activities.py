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
    """The gpu frame plus ``category``, ``gemm_precision`` and the occupancy columns."""
    classified = classify(trace.gpu, trace.cpu)
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
