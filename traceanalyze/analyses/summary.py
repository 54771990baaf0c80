"""`summary`: per-iteration figures of a trace, the means over its counted steps.

Every figure and the verdict come from the step model (:mod:`traceanalyze.analyses.step`); for
a folder of ranks every figure is the mean per rank and step.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

import polars as pl

from traceanalyze.analyses.activities import activities, in_iterations, iteration_count, per_trace
from traceanalyze.analyses.cputree import VIEW_OPS
from traceanalyze.analyses.cudnn import cudnn_cpu_us_per_iter
from traceanalyze.analyses.graphs import graph_launches_per_iter
from traceanalyze.analyses.iterations import NOISE_PCT, choice_of, counted
from traceanalyze.analyses.step.gaps import CAUSE_NAMES
from traceanalyze.analyses.step.model import (
    WALL_FROM_MEDIAN,
    WALL_FROM_STEADY,
    WALL_FROM_TRACE,
    StepModel,
    against_wall,
    comparable,
    gpu_busy_pct_of_wall,
    step_model,
)
from traceanalyze.analyses.step.verdict import idle_column
from traceanalyze.classify import CATEGORIES
from traceanalyze.display import Shown
from traceanalyze.link import nearest_ancestor
from traceanalyze.trace import IterationSource, Trace

WHOLE_TRACE_NOTE = "whole trace taken as one iteration (no ProfilerStep or repeated annotation)"
__all__ = ["WALL_FROM_MEDIAN", "WALL_FROM_STEADY", "WALL_FROM_TRACE", "Summary", "summary"]


# eq=False: compared as a Mapping (equal to the dict of the same keys and values).
@dataclass(frozen=True, kw_only=True, repr=False, eq=False)
class Summary(Shown, Mapping[str, Any]):
    """The `summary` command's record: one field per stable key of the README, in the JSON's
    order. Frozen (it is memoised per Trace and shared) and read like the JSON object too:
    ``s["kernels_per_iter"]``, ``dict(s)``. ``variant`` names the trace of a variant set and
    leads the record; it is left out for a single trace."""

    variant: str | None = None
    iterations: int
    ranks: int
    iteration_source: IterationSource
    iteration_note: str | None
    iterations_left_out: int
    iteration_coverage_pct: float | None
    kernels_per_iter: float
    memcpy_per_iter: float
    memset_per_iter: float
    gpu_activity_us_per_iter: float
    gpu_kernel_us_per_iter: float
    gpu_memcpy_us_per_iter: float
    gpu_memset_us_per_iter: float
    gpu_busy_us_per_iter: float
    gpu_span_us_per_iter: float
    gpu_idle_us_per_iter: float
    cpu_op_us_per_iter: float
    launch_us_per_iter: float
    cpu_span_us_per_iter: float
    wall_us_per_iter: float
    compute_us_per_iter: float
    communication_us_per_iter: float
    exposed_communication_us_per_iter: float
    exposed_copy_us_per_iter: float
    carried_in_us_per_iter: float
    idle_us_by_cause: dict[str, float]
    spread_per_iter: dict[str, float | None]
    wall_source: str
    gpu_busy_pct_of_wall: float | None
    bound: str
    bound_margin_pct: float | None
    bound_note: str
    transpose_ops_per_iter: float
    graph_launches_per_iter: float
    cudnn_cpu_us_per_iter: float
    category_us: dict[str, float]
    category_count: dict[str, float]
    launch_apis: dict[str, float]
    gpu_activities_outside_iterations_total: int
    gpu_activities_without_launch_total: int
    cpu_ops_outside_iterations_total: int
    # The audit's warnings about the figures above (`traceanalyze audit`); None: not audited
    # (the key is then left out, as ``variant`` is for a single trace).
    audit_warnings: dict[str, str] | None = None

    def __iter__(self) -> Iterator[str]:
        return (
            f.name
            for f in fields(self)
            if f.name not in _OPTIONAL or getattr(self, f.name) is not None
        )

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __getitem__(self, key: str) -> Any:
        if key not in _SUMMARY_KEYS or (key in _OPTIONAL and getattr(self, key) is None):
            raise KeyError(key)
        return getattr(self, key)

    def __repr__(self) -> str:
        """The headline figures; every key is ``dict(summary)`` away."""
        named = f"variant={self.variant!r}, " if self.variant is not None else ""
        return (
            f"Summary({named}kernels_per_iter={self.kernels_per_iter:g}, "
            f"gpu_busy_us_per_iter={self.gpu_busy_us_per_iter:.1f}, "
            f"cpu_op_us_per_iter={self.cpu_op_us_per_iter:.1f}, bound={self.bound!r}, "
            f"iterations={self.iterations}, ... {len(self)} keys)"
        )

    def of_variant(self, label: str | None) -> Summary:
        """The same record, named as a variant's (``label`` None: as a single trace's)."""
        return replace(self, variant=label)

    def audited(self, warnings: dict[str, str]) -> Summary:
        """The same record with the audit's warnings about its figures."""
        return replace(self, audit_warnings=warnings)


@per_trace
def summary(trace: Trace) -> Summary:
    """The per-iteration summary (keys are a public contract, listed in the README), over the
    iterations that count (:func:`~traceanalyze.analyses.iterations.counted`)."""
    trace = counted(trace)
    n = iteration_count(trace)
    model = step_model(trace)
    gpu = in_iterations(activities(trace))
    # One launch call per correlation: a graph launch starts many activities.
    launches = gpu.filter(pl.col("linked")).unique(["rank", "correlation"], keep="first")
    return Summary(**{
        "iterations": trace.iterations["iteration"].n_unique(),
        "ranks": len(trace.meta),
        "iteration_source": trace.iteration_source,
        "iteration_note": iteration_note(trace),
        "iterations_left_out": int((~choice_of(trace).table["counted"]).sum()),
        "iteration_coverage_pct": choice_of(trace).coverage_pct,
        **{key: model.means[key] for key in MEAN_KEYS},
        "idle_us_by_cause": {c: model.means[f"{idle_column(c)}_per_iter"] for c in CAUSE_NAMES},
        "spread_per_iter": spread(model.steps),
        **wall_verdict(model, None),
        "transpose_ops_per_iter": _view_ops(trace) / n,
        "graph_launches_per_iter": graph_launches_per_iter(trace),
        "cudnn_cpu_us_per_iter": cudnn_cpu_us_per_iter(trace),
        "category_us": _per_category(gpu, n, us=True),
        "category_count": _per_category(gpu, n, us=False),
        "launch_apis": _per_iteration(launches, "launch_api", n, us=False),
        **_without_iteration(trace.gpu),
        "cpu_ops_outside_iterations_total": int(
            trace.cpu.filter(pl.col("cat") == "cpu_op")["iteration"].null_count()
        ),
    })  # fmt: skip


_SUMMARY_KEYS = frozenset(f.name for f in fields(Summary))
# Keys left out of the record while None.
_OPTIONAL = frozenset({"variant", "audit_warnings"})


def _without_iteration(gpu: pl.DataFrame) -> dict[str, int]:
    """The GPU activities no iteration holds, by what they are: launched by a call outside
    every iteration, or with no launch call in the trace (no iteration can be given)."""
    outside = gpu.filter(pl.col("iteration").is_null())
    launched = int(outside["linked"].sum())
    return {
        "gpu_activities_outside_iterations_total": launched,
        "gpu_activities_without_launch_total": outside.height - launched,
    }


def iteration_note(trace: Trace) -> str | None:
    """What a reader must know about how iterations were found and which were left out
    (None for profiler steps that all count)."""
    chosen = choice_of(trace).note
    found = None
    source = trace.iteration_source
    if source is IterationSource.WHOLE_TRACE and chosen is None:
        found = WHOLE_TRACE_NOTE
    if source.kind is IterationSource.ANNOTATION:
        name = source.region
        found = f"iterations are the repeated top-level annotation `{name}` (no ProfilerStep)"
    return "; ".join(p for p in (found, chosen) if p) or None


# The per-step means the summary gives, in its JSON's order.
MEAN_KEYS = tuple(
    f"{c}_per_iter"
    for c in (
        "kernels", "memcpy", "memset", "gpu_activity_us", "gpu_kernel_us", "gpu_memcpy_us",
        "gpu_memset_us", "gpu_busy_us", "gpu_span_us", "gpu_idle_us", "cpu_op_us", "launch_us",
        "cpu_span_us", "wall_us", "compute_us", "communication_us", "exposed_communication_us",
        "exposed_copy_us", "carried_in_us",
    )
)  # fmt: skip
# Columns whose spread over the iterations the summary shows beside the mean.
SPREAD_COLUMNS = ("kernels", "gpu_busy_us", "gpu_idle_us", "cpu_op_us", "wall_us")


SPREAD_STATS = ("min", "median", "max")
# Every key of ``spread_per_iter``, whatever the trace (a fixed schema).
SPREAD_KEYS = tuple(f"{c}_{stat}" for c in SPREAD_COLUMNS for stat in SPREAD_STATS)


def spread(times: pl.DataFrame) -> dict[str, float | None]:
    """``spread_per_iter``: ``<column>_min``, ``_median`` and ``_max`` over the iterations for
    each column of ``SPREAD_COLUMNS``, null for a column whose max and min differ by no more
    than ``NOISE_PCT`` of its median (all null with fewer than two iterations). Every key is
    there on every trace."""
    spread: dict[str, float | None] = dict.fromkeys(SPREAD_KEYS)
    if times.height < 2:
        return spread
    row = times.select(
        expr
        for c in SPREAD_COLUMNS
        for expr in (
            pl.col(c).cast(pl.Float64).min().alias(f"{c}_min"),
            pl.col(c).cast(pl.Float64).median().alias(f"{c}_median"),
            pl.col(c).cast(pl.Float64).max().alias(f"{c}_max"),
        )
    ).row(0, named=True)
    varying = [
        c
        for c in SPREAD_COLUMNS
        if row[f"{c}_max"] - row[f"{c}_min"] > abs(row[f"{c}_median"]) * NOISE_PCT / 100
    ]
    return spread | {f"{c}_{stat}": row[f"{c}_{stat}"] for c in varying for stat in SPREAD_STATS}


def _view_ops(trace: Trace) -> int:
    """CPU-side transpose/permute views inside iterations, each counted once: aten::t runs
    aten::transpose inside itself, and counting both doubled every ``.t()``."""
    cpu = trace.cpu
    views = cpu.filter(
        (pl.col("cat") == "cpu_op")
        & pl.col("name").is_in(VIEW_OPS)
        & pl.col("iteration").is_not_null()
    )
    inside_a_view = nearest_ancestor(cpu, views["op_id"], pl.col("name").is_in(VIEW_OPS))
    return int(inside_a_view.is_null().sum())


def _per_category(frame: pl.DataFrame, n: int, *, us: bool) -> dict[str, float]:
    """Time (``us``) or activities per iteration of every category, in the taxonomy's order
    (0 for one the trace lacks: the keys are the same on every trace)."""
    found = _per_iteration(frame, "category", n, us=us)
    return {category: found.get(category, 0.0) for category in CATEGORIES}


def _per_iteration(frame: pl.DataFrame, key: str, n: int, *, us: bool) -> dict[str, float]:
    value = pl.col("dur_ns").sum() / 1e3 if us else pl.len()
    grouped = (
        frame.group_by(key).agg(value=value / n).sort(["value", key], descending=[True, False])
    )
    return dict(zip(grouped[key].to_list(), grouped["value"].to_list(), strict=True))


class SteadyMedianMs(float):
    """A cold capture's median time per call over its steady calls (the one-off first call
    left out): a capture median whose source the wall figures name differently."""


def wall_verdict(model: StepModel, median_ms: float | None) -> dict[str, Any]:
    """``wall_source``, ``gpu_busy_pct_of_wall``, ``bound``, ``bound_margin_pct`` and
    ``bound_note`` of a summary, against one wall time: the capture's median (the measured
    truth, without the profiler) where given, else the steps' windows in the trace."""
    steady = isinstance(median_ms, SteadyMedianMs)
    judged = against_wall(model, median_ms, steady=steady)
    source = model.wall_source
    if median_ms:
        source = WALL_FROM_STEADY if steady else WALL_FROM_MEDIAN
    unlike = bool(median_ms) and not comparable(model, median_ms)  # type: ignore[arg-type]
    return {
        "wall_source": source,
        "gpu_busy_pct_of_wall": None if unlike else gpu_busy_pct_of_wall(model, median_ms),
        "bound": judged.bound,
        "bound_margin_pct": judged.margin_pct,
        "bound_note": judged.note,
    }


def verdict_fields(trace: Trace, median_ms: float | None) -> dict[str, Any]:
    """``bound``, ``bound_margin_pct`` and ``bound_note`` as `summary` gives them for
    ``trace`` against ``median_ms``: what every command that states a bound shows."""
    fields = wall_verdict(step_model(trace), median_ms)
    return {key: fields[key] for key in ("bound", "bound_margin_pct", "bound_note")}


def summary_with_wall(trace: Trace, median_ms: float | None) -> Summary:
    """The summary, its wall share and bound verdict against the capture's median where
    given (``wall_source`` says which): what the summary and check commands report."""
    figures = summary(trace)
    return replace(figures, **wall_verdict(step_model(trace), median_ms))
