"""The report's "Where the time goes": idle causes and launch health, the evidence of its
verdict (written in render/between/idle.py)."""

from __future__ import annotations

from dataclasses import dataclass

from traceanalyze.analyses.between.idle import IdleResult, idle_breakdown
from traceanalyze.analyses.between.launches import launch_health
from traceanalyze.analyses.step.model import step_model
from traceanalyze.load.variants import VariantSet
from traceanalyze.trace import Trace


@dataclass(frozen=True)
class WhereTimeGoes:
    label: str | None
    idle: IdleResult
    launches: dict[str, float | int]
    wall_us_per_iter: float  # what the idle time is a share of


def where_time_goes(trace: Trace, label: str | None = None) -> WhereTimeGoes:
    return WhereTimeGoes(
        label,
        idle_breakdown(trace),
        launch_health(trace),
        step_model(trace).means["wall_us_per_iter"],
    )


def where_time_goes_of(variants: VariantSet) -> tuple[WhereTimeGoes, ...]:
    """The section for a report on one trace of one rank; none for sets of traces or ranks."""
    traces = [v.trace for v in variants.loaded if v.trace is not None]
    if len(traces) != 1 or len(traces[0].meta) != 1:
        return ()
    return (where_time_goes(traces[0]),)
