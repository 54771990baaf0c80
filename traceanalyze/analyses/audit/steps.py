"""The steps the audit's per-iteration figures count, and those figures: the one place the
audit reads the step model, so that a new one is a change here only.

Today the step model is :func:`~traceanalyze.analyses.iterations.counted` and the accounting's
:func:`~traceanalyze.analyses.accounting.iteration_times`: a finding's ``*_per_iter`` is its
events inside the counted iterations divided by their number, and what it moves a figure by is
the difference between the figure's mean over those iterations with and without the repair.
"""

from __future__ import annotations

from dataclasses import replace

import polars as pl

from traceanalyze.analyses.accounting import COUNT_COLUMNS, ITERATION, TIME_COLUMNS, iteration_times
from traceanalyze.analyses.activities import iteration_count
from traceanalyze.analyses.iterations import _origin_of as origin_of  # the trace as loaded
from traceanalyze.analyses.iterations import counted
from traceanalyze.trace import Trace

# The per-iteration figures of the step model, by the name summary gives them.
STEP_FIGURES = tuple(f"{column}_per_iter" for column in (*COUNT_COLUMNS, *TIME_COLUMNS))


def counted_steps(trace: Trace) -> Trace:
    """``trace`` restricted to the steps that count (idempotent)."""
    return counted(trace)


def as_loaded(trace: Trace) -> Trace:
    """``trace`` as it was loaded, with every step region it marks (a counted trace keeps only
    the counted ones); found without counting anything."""
    return origin_of(trace)


def counted_rows(steps: Trace, frame: str, rows: pl.DataFrame, position: str) -> pl.DataFrame:
    """``rows`` of the loaded trace's ``frame`` (``gpu`` or ``cpu``; ``position``: the column
    holding each row's position in it) with ``iteration`` as the counted steps have it: the
    checks find faults on the frames as loaded and count steps only when they found some (a
    restricted trace keeps every row in place)."""
    iteration: pl.Series = getattr(steps, frame)["iteration"]
    return rows.with_columns(iteration=iteration.gather(rows[position]))


def step_count(steps: Trace) -> int:
    """The divisor of per-iteration figures (steps times ranks)."""
    return iteration_count(steps)


def step_means(steps: Trace) -> dict[str, float]:
    """Each of :data:`STEP_FIGURES`: its mean over the counted steps (0 without any)."""
    times = iteration_times(steps)
    if not times.height:
        return dict.fromkeys(STEP_FIGURES, 0.0)
    row = times.select(
        pl.col(column).cast(pl.Float64).mean().alias(f"{column}_per_iter")
        for column in (*COUNT_COLUMNS, *TIME_COLUMNS)
    ).row(0, named=True)
    return {name: float(value or 0.0) for name, value in row.items()}


def repaired(
    steps: Trace,
    gpu: pl.DataFrame | None = None,
    cpu: pl.DataFrame | None = None,
    iterations: pl.DataFrame | None = None,
) -> Trace:
    """``steps`` with some frames replaced (a repair the audit weighs: a new Trace object,
    so the accounting's per-Trace memo computes it afresh)."""
    return replace(
        steps,
        gpu=steps.gpu if gpu is None else gpu,
        cpu=steps.cpu if cpu is None else cpu,
        iterations=steps.iterations if iterations is None else iterations,
    )


def step_at(steps: Trace, frame: pl.DataFrame, ts: str = "ts_ns") -> pl.Series:
    """The counted step whose span (same rank) holds each row's ``ts``, null outside every
    step; in the frame's own row order."""
    rows = frame.select("rank", at=pl.col(ts)).with_row_index("_row")
    spans = steps.iterations.select(
        "rank", "iteration", start="ts_ns", end=pl.col("ts_ns") + pl.col("dur_ns")
    ).sort("start")
    found = (
        rows.filter(pl.col("at").is_not_null())
        .sort("at")
        .join_asof(spans, left_on="at", right_on="start", by="rank", check_sortedness=False)
        .select("_row", iteration=pl.when(pl.col("at") < pl.col("end")).then("iteration"))
    )
    return (
        rows.join(found, on="_row", how="left")
        .sort("_row")
        .get_column("iteration")
        .cast(pl.Int64)
        .alias("iteration")
    )


def in_steps(frame: pl.DataFrame) -> pl.DataFrame:
    """Rows of ``frame`` (with ``iteration``, of a counted trace) inside a counted step."""
    return frame.filter(pl.col("iteration").is_not_null())


__all__ = [
    "ITERATION",
    "STEP_FIGURES",
    "as_loaded",
    "counted_rows",
    "counted_steps",
    "in_steps",
    "repaired",
    "step_at",
    "step_count",
    "step_means",
]
