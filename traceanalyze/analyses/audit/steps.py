"""The steps the audit's per-iteration figures count, and those figures: the one place the
audit reads the step model, so that a new one is a change here only.

A finding's ``*_per_iter`` is its events inside the counted steps
(:func:`~traceanalyze.analyses.iterations.counted`, the default rule: the audit weighs the trace,
not a user's choice of steps) divided by their number. What a finding moves a figure by is the
difference between the step model's mean (:func:`~traceanalyze.analyses.step.model.step_model`)
with and without the repair: the repair is made on the frames of every step of the trace (the
model's windows start where the step before ended, so it is given every step, and counts them
by the same rule again).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import polars as pl

from traceanalyze.analyses.iterations import _origin_of as origin_of  # the trace as loaded
from traceanalyze.analyses.iterations import choice_of, counted
from traceanalyze.analyses.step.model import step_model
from traceanalyze.analyses.step.times import STEP_COLUMNS
from traceanalyze.analyses.step.window import STEP
from traceanalyze.trace import Trace

ITERATION = STEP
# The per-iteration figures of the step model, by the name summary gives them.
STEP_FIGURES = tuple(f"{column}_per_iter" for column in STEP_COLUMNS)


def as_loaded(trace: Trace) -> Trace:
    """``trace`` as it was loaded, with every step region it marks (a counted trace keeps only
    the counted ones); found without counting anything."""
    return origin_of(trace)


def counted_steps(trace: Trace) -> Trace:
    """The trace as loaded, restricted to the steps that count by the default rule."""
    return counted(as_loaded(trace))


def all_steps(steps: Trace) -> Trace:
    """The counted trace's every step (the regions the counted ones were chosen from): what a
    repair starts from. Its frames hold the same rows in the same order."""
    return choice_of(steps).regions


def counted_rows(steps: Trace, frame: str, rows: pl.DataFrame, position: str) -> pl.DataFrame:
    """``rows`` of the loaded trace's ``frame`` (``gpu`` or ``cpu``; ``position``: the column
    holding each row's position in it) with ``iteration`` as the counted steps have it: the
    checks find faults on the frames as loaded and count steps only when they found some (a
    restricted trace keeps every row in place)."""
    iteration: pl.Series = getattr(steps, frame)["iteration"]
    return rows.with_columns(iteration=iteration.gather(rows[position]))


def step_count(steps: Trace) -> int:
    """The divisor of per-iteration figures (steps times ranks)."""
    return max(steps.iterations.height, 1)


def step_means(steps: Trace) -> dict[str, float]:
    """Each of :data:`STEP_FIGURES`: the step model's mean over the counted steps."""
    means = step_model(steps).means
    return {name: float(means.get(name, 0.0)) for name in STEP_FIGURES}


def step_rows(steps: Trace) -> pl.DataFrame:
    """The step model's row of each counted step (``STEP_COLUMNS``), with its start."""
    return step_model(steps).steps.join(
        steps.iterations.select(*STEP, "name", "ts_ns", "dur_ns"), on=STEP
    )


@dataclass(frozen=True)
class Weight:
    """What a repair changes: each figure's move (in its unit, per iteration; figures that do
    not move left out), whether the bound verdict changes, and each moved figure's value with
    the fault minus its value once repaired (``deltas``, signed: a figure the fault inflates
    has a positive delta, one it deflates a negative one)."""

    moves: dict[str, float]
    verdict_changes: bool
    deltas: dict[str, float] = field(default_factory=dict)


# Moves smaller than this (in a figure's unit) are rounding, not a move.
_NOISE = 1e-9


def weigh(
    steps: Trace,
    gpu: pl.DataFrame | None = None,
    cpu: pl.DataFrame | None = None,
    iterations: pl.DataFrame | None = None,
) -> Weight:
    """The step model with frames of :func:`all_steps` replaced (the repair), against the
    counted steps as they are."""
    every = all_steps(steps)
    fixed = replace(
        every,
        gpu=every.gpu if gpu is None else gpu,
        cpu=every.cpu if cpu is None else cpu,
        iterations=every.iterations if iterations is None else iterations,
    )
    before, after = step_model(steps), step_model(fixed)
    deltas = {
        name: float(before.means.get(name, 0.0)) - float(after.means.get(name, 0.0))
        for name in STEP_FIGURES
    }
    changed = after.verdict.bound != before.verdict.bound
    moved = {k: v for k, v in deltas.items() if abs(v) > _NOISE}
    return Weight({k: abs(v) for k, v in moved.items()}, changed, moved)


def step_at(every: Trace, frame: pl.DataFrame, ts: str = "ts_ns") -> pl.Series:
    """The step of ``every`` whose span (same rank) holds each row's ``ts``, null outside every
    step; in the frame's own row order."""
    rows = frame.select("rank", at=pl.col(ts)).with_row_index("_row")
    spans = every.iterations.select(
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
