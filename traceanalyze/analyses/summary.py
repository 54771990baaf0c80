"""`summary`: per-iteration figures of a trace, the means over its iterations.

Times follow the accounting model of :mod:`traceanalyze.analyses.accounting`; for a folder of
ranks every figure is the mean per rank and iteration.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

import polars as pl

from traceanalyze.analyses.accounting import (
    COUNT_COLUMNS,
    TIME_COLUMNS,
    iteration_times,
    not_the_same_work,
    verdict,
)
from traceanalyze.analyses.activities import activities, in_iterations, iteration_count, per_trace
from traceanalyze.analyses.cputree import VIEW_OPS
from traceanalyze.analyses.cudnn import cudnn_cpu_us_per_iter
from traceanalyze.analyses.graphs import graph_launches_per_iter
from traceanalyze.analyses.iterations import NOISE_PCT, choice_of, counted
from traceanalyze.display import Shown
from traceanalyze.link import nearest_ancestor
from traceanalyze.trace import IterationSource, Trace

WHOLE_TRACE_NOTE = "whole trace taken as one iteration (no ProfilerStep or repeated annotation)"
WALL_FROM_TRACE = "the trace's iteration span"
WALL_FROM_MEDIAN = "capture median"
WALL_FROM_STEADY = "cold capture's steady median (one-off first calls left out)"


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
    spread_per_iter: dict[str, float]
    wall_source: str
    gpu_busy_pct_of_wall: float | None
    bound: str | None
    bound_note: str | None
    transpose_ops_per_iter: float
    graph_launches_per_iter: float
    cudnn_cpu_us_per_iter: float
    category_us: dict[str, float]
    category_count: dict[str, float]
    launch_apis: dict[str, float]
    gpu_activities_outside_iterations_total: int
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
    times = iteration_times(trace)
    means = _means(times)
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
        **means,
        "spread_per_iter": spread(times),
        **wall_verdict(means, None),
        "transpose_ops_per_iter": _view_ops(trace) / n,
        "graph_launches_per_iter": graph_launches_per_iter(trace),
        "cudnn_cpu_us_per_iter": cudnn_cpu_us_per_iter(trace),
        "category_us": _per_iteration(gpu, "category", n, us=True),
        "category_count": _per_iteration(gpu, "category", n, us=False),
        "launch_apis": _per_iteration(launches, "launch_api", n, us=False),
        "gpu_activities_outside_iterations_total": int(trace.gpu["iteration"].null_count()),
        "cpu_ops_outside_iterations_total": int(
            trace.cpu.filter(pl.col("cat") == "cpu_op")["iteration"].null_count()
        ),
    })  # fmt: skip


_SUMMARY_KEYS = frozenset(f.name for f in fields(Summary))
# Keys left out of the record while None.
_OPTIONAL = frozenset({"variant", "audit_warnings"})


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


# Columns whose spread over the iterations the summary shows beside the mean.
SPREAD_COLUMNS = ("kernels", "gpu_busy_us", "gpu_idle_us", "cpu_op_us", "wall_us")


def spread(times: pl.DataFrame) -> dict[str, float]:
    """``spread_per_iter``: ``<column>_min``, ``_median`` and ``_max`` over the iterations for
    each column of ``SPREAD_COLUMNS`` whose max and min differ by more than ``NOISE_PCT`` of
    its median (empty when every column is that steady)."""
    if times.height < 2:
        return {}
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
    return {f"{c}_{stat}": row[f"{c}_{stat}"] for c in varying for stat in ("min", "median", "max")}


def _means(times: pl.DataFrame) -> dict[str, float]:
    """``<column>_per_iter``: the mean of each count and time column over the iterations."""
    columns = [*COUNT_COLUMNS, *TIME_COLUMNS]
    if not times.height:
        return {f"{c}_per_iter": 0.0 for c in columns}
    row = times.select(pl.col(c).cast(pl.Float64).mean().alias(f"{c}_per_iter") for c in columns)
    return row.row(0, named=True)


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


def _per_iteration(frame: pl.DataFrame, key: str, n: int, *, us: bool) -> dict[str, float]:
    value = pl.col("dur_ns").sum() / 1e3 if us else pl.len()
    grouped = (
        frame.group_by(key).agg(value=value / n).sort(["value", key], descending=[True, False])
    )
    return dict(zip(grouped[key].to_list(), grouped["value"].to_list(), strict=True))


class SteadyMedianMs(float):
    """A cold capture's median time per call over its steady calls (the one-off first call
    left out): a capture median whose source the wall figures name differently."""


def wall_verdict(figures: Mapping[str, Any], median_ms: float | None) -> dict[str, Any]:
    """``wall_source``, ``gpu_busy_pct_of_wall``, ``bound`` and ``bound_note`` of a summary,
    against one wall time: the capture's median (the measured truth, without the profiler)
    where given, else the trace's. A profiled run's GPU busy time can exceed the unprofiled
    median by a few percent: the share is then capped at 100 and ``bound_note`` says so."""
    wall_us, source = (
        (median_ms * 1e3, _median_source(median_ms))
        if median_ms
        else (figures["wall_us_per_iter"], WALL_FROM_TRACE)
    )
    busy = figures["gpu_busy_us_per_iter"]
    judged = verdict(busy, wall_us, figures["cpu_op_us_per_iter"], source)
    unlike = not_the_same_work(busy, wall_us, source) if median_ms else None
    if unlike is not None:
        return {"wall_source": source, "gpu_busy_pct_of_wall": None, "bound": None,
                "bound_note": unlike.note}  # fmt: skip
    return {
        "wall_source": source,
        "gpu_busy_pct_of_wall": min(busy / wall_us * 100, 100.0) if wall_us else None,
        "bound": judged.bound,
        "bound_note": judged.note,
    }


def _median_source(median_ms: float) -> str:
    return WALL_FROM_STEADY if isinstance(median_ms, SteadyMedianMs) else WALL_FROM_MEDIAN


def summary_with_wall(trace: Trace, median_ms: float | None) -> Summary:
    """The summary, its wall share and bound verdict against the capture's median where
    given (``wall_source`` says which): what the summary and check commands report."""
    figures = summary(trace)
    return replace(figures, **wall_verdict(figures, median_ms))
