"""GPU activities with everything the analyses share: category, GEMM precision, occupancy.

Computed once per Trace and memoised: a report runs many analyses over the same trace.
"""

from __future__ import annotations

import weakref

import polars as pl

from traceanalyze.classify import classify
from traceanalyze.occupancy import theoretical_occupancy
from traceanalyze.trace import Trace

_MEMO: weakref.WeakKeyDictionary[Trace, pl.DataFrame] = weakref.WeakKeyDictionary()


def activities(trace: Trace) -> pl.DataFrame:
    """The gpu frame plus ``category``, ``gemm_precision`` and the occupancy columns."""
    cached = _MEMO.get(trace)
    if cached is not None:
        return cached
    classified = classify(trace.gpu, trace.cpu)
    frame = theoretical_occupancy(classified, trace.devices).with_columns(
        # Occupancy is a property of kernels; copies and sets have no launch footprint.
        *(
            pl.when(pl.col("kind") == "kernel").then(pl.col(c)).alias(c)
            for c in ("theoretical_occupancy_pct", "occupancy_limiter", "achieved_occupancy_pct")
        )
    )
    _MEMO[trace] = frame
    return frame


def in_iterations(frame: pl.DataFrame) -> pl.DataFrame:
    """Rows that belong to an iteration (activities launched before the window have none)."""
    return frame.filter(pl.col("iteration").is_not_null())


def iteration_count(trace: Trace) -> int:
    """The divisor of per-iteration figures: iterations times ranks (one row per rank and step),
    so a multi-rank trace reports the mean per rank and iteration."""
    return max(trace.iterations.height, 1)
