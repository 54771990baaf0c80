"""`compare`: the seed article's final table, made automatic, one row per variant.

The headline speed-up is GPU busy time (see :mod:`traceanalyze.analyses.step`); beside it a
wall-time speed-up from the capture's median times where the manifest has them (the measured
truth, without the profiler), else from the traces' step windows. Where both traces have
``MIN_STEPS_FOR_INTERVAL`` counted steps or more, each speed-up computed from the traces has an
interval from the per-step spread: its value with the baseline's and the variant's most and
least favourable steps (``speedup_low``, ``speedup_high``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import polars as pl

from capture.manifest import VariantResult
from traceanalyze.analyses.activities import activities, in_iterations
from traceanalyze.analyses.iterations import counted
from traceanalyze.analyses.memory.usage import memory_figures
from traceanalyze.analyses.step.model import step_model
from traceanalyze.analyses.summary import (
    WALL_FROM_MEDIAN,
    WALL_FROM_STEADY,
    WALL_FROM_TRACE,
    SteadyMedianMs,
    summary,
    wall_verdict,
)
from traceanalyze.analyses.variants.sameness import DIFFERENT, sameness
from traceanalyze.errors import UsageError
from traceanalyze.hardware.occupancy import compare_occupancy
from traceanalyze.load.variants import Variant
from traceanalyze.trace import Trace

DEFAULT_BASELINE = "naive"
# A speed-up from the traces gets an interval from the per-step spread with this many steps.
MIN_STEPS_FOR_INTERVAL = 3

COLUMNS: dict[str, pl.DataType] = {
    "variant": pl.String(),
    "status": pl.String(),
    "gpu_busy_us_per_iter": pl.Float64(),
    "speedup": pl.Float64(),
    "speedup_low": pl.Float64(),
    "speedup_high": pl.Float64(),
    "wall_us_per_iter": pl.Float64(),
    "median_ms": pl.Float64(),
    "steady_median_ms": pl.Float64(),
    "speedup_wall": pl.Float64(),
    "speedup_wall_low": pl.Float64(),
    "speedup_wall_high": pl.Float64(),
    "speedup_wall_source": pl.String(),
    "wall_source": pl.String(),
    "bound": pl.String(),
    "bound_margin_pct": pl.Float64(),
    "bound_note": pl.String(),
    "gpu_busy_pct_of_wall": pl.Float64(),
    "gpu_activity_us_per_iter": pl.Float64(),
    "gpu_kernel_us_per_iter": pl.Float64(),
    "cpu_op_us_per_iter": pl.Float64(),
    "kernels_per_iter": pl.Float64(),
    "memcpy_per_iter": pl.Float64(),
    "memset_per_iter": pl.Float64(),
    "transpose_ops_per_iter": pl.Float64(),
    "fused_kernel": pl.String(),
    "theoretical_occupancy_pct": pl.Float64(),
    "theoretical_occupancy_of_estimated_pct": pl.Float64(),
    "estimated_occupancy_pct": pl.Float64(),
    "achieved_occupancy_pct": pl.Float64(),
    "reported_coverage_pct": pl.Float64(),
    "cudnn_cpu_us_per_iter": pl.Float64(),
    "peak_increase_bytes_per_iter": pl.Float64(),
    "largest_block_bytes": pl.Int64(),
    "largest_block_op": pl.String(),
    "launch_api": pl.List(pl.String()),
    "gemm_precision": pl.List(pl.String()),
    "sdpa_backend": pl.String(),
    "relative_error": pl.Float64(),
    "description": pl.String(),
    # The per-step spread the intervals come from (not shown: the intervals are).
    "steps_counted": pl.Int64(),
    "gpu_busy_us_step_min": pl.Float64(),
    "gpu_busy_us_step_max": pl.Float64(),
    "wall_us_step_min": pl.Float64(),
    "wall_us_step_max": pl.Float64(),
    # Against the baseline: the device names, and whether the workload is the same
    # (sameness.py).
    "gpu": pl.String(),
    "same_gpu": pl.Boolean(),
    "same_workload": pl.String(),
}
# Columns only the speed-up intervals read.
SPREAD_COLUMNS = (
    "steps_counted",
    "gpu_busy_us_step_min",
    "gpu_busy_us_step_max",
    "wall_us_step_min",
    "wall_us_step_max",
)
_FROM_SUMMARY = (
    "gpu_busy_us_per_iter", "wall_us_per_iter", "gpu_activity_us_per_iter",
    "gpu_kernel_us_per_iter", "cpu_op_us_per_iter", "kernels_per_iter", "memcpy_per_iter",
    "memset_per_iter", "transpose_ops_per_iter", "cudnn_cpu_us_per_iter",
)  # fmt: skip


def variant_row(trace: Trace, median_ms: float | None = None) -> dict[str, Any]:
    """The comparison figures of one trace (speed-ups are filled in by :func:`comparison`).

    ``median_ms``, the capture's measured time per call, is the wall time that
    ``gpu_busy_pct_of_wall`` and the bound verdict use where given (``wall_source`` says which);
    else the trace's own iteration wall time.
    """
    trace = counted(trace)
    figures = summary(trace)
    model = step_model(trace)
    kernels = in_iterations(activities(trace)).filter(pl.col("kind") == "kernel")
    # Theoretical occupancy over every kernel with a footprint (one set for every row); the
    # trace's estimate beside the theoretical figure of the same kernels, with its coverage.
    occupancy = kernels.select(compare_occupancy()).row(0, named=True)
    return {
        **{key: figures[key] for key in _FROM_SUMMARY},
        **wall_verdict(model, median_ms),
        **_spread(model.steps),
        "fused_kernel": _longest(kernels.filter(pl.col("category") == "fused_attention")),
        **occupancy,
        "launch_api": _by_count(kernels, "launch_api"),
        "gemm_precision": _by_count(kernels.filter(pl.col("category") == "gemm"), "gemm_precision"),
        **memory_figures(trace),
    }


def _spread(steps: pl.DataFrame) -> dict[str, Any]:
    """How many steps count, and their least and most GPU busy and wall time."""
    row = steps.select(
        steps_counted=pl.len(),
        gpu_busy_us_step_min=pl.col("gpu_busy_us").min(),
        gpu_busy_us_step_max=pl.col("gpu_busy_us").max(),
        wall_us_step_min=pl.col("wall_us").min(),
        wall_us_step_max=pl.col("wall_us").max(),
    )
    return row.row(0, named=True)


def steady_median_ms(variant: Variant) -> float | None:
    """The capture's median time per call of the steady calls, what the trace's iterations
    are at their pace: the manifest's ``median_ms`` for a warm capture; for a cold one (its
    trace starts with the one-off first call) the median of its steady calls
    (``cold.steady_median_ms``), else none."""
    entry = variant.manifest_entry
    if entry is None:
        return None
    if variant.warm_up_calls == 0:
        steady = entry.cold.steady_median_ms if entry.cold is not None else None
        return None if steady is None else SteadyMedianMs(steady)
    return entry.median_ms


def _manifest_columns(entry: VariantResult | None) -> dict[str, Any]:
    """What the capture manifest says of a variant (all None without an entry)."""
    if entry is None:
        return dict.fromkeys(
            ("median_ms", "steady_median_ms", "sdpa_backend", "relative_error", "description")
        )
    return {
        "median_ms": entry.median_ms,
        "steady_median_ms": entry.cold.steady_median_ms if entry.cold is not None else None,
        "sdpa_backend": entry.backend,
        "relative_error": entry.relative_error,
        "description": entry.description,
    }


def comparison(variants: Sequence[Variant], baseline: str | None = None) -> pl.DataFrame:
    """One row per variant; ``speedup`` is the baseline's GPU busy time over the variant's,
    ``speedup_wall`` the same for wall time (see :func:`baseline_label` for the baseline)."""
    rows = []
    for variant in variants:
        row: dict[str, Any] = {
            "variant": variant.label,
            "status": variant.status,
            **_manifest_columns(variant.manifest_entry),
        }
        if variant.trace is not None:
            row |= variant_row(variant.trace, steady_median_ms(variant))
        rows.append(row)
    table = pl.DataFrame(rows, schema=COLUMNS)
    label = baseline_label(table, baseline)
    return _not_across_workloads(_with_speedups(_with_sameness(table, variants, label), label))


def _with_sameness(
    table: pl.DataFrame, variants: Sequence[Variant], baseline: str | None
) -> pl.DataFrame:
    """``gpu``, ``same_gpu`` and ``same_workload`` against the baseline (sameness.py)."""
    found = sameness(variants, baseline)
    label = pl.col("variant")
    return table.with_columns(
        gpu=label.replace_strict(found.gpu, default=None, return_dtype=pl.String),
        same_gpu=label.replace_strict(found.same_gpu, default=None, return_dtype=pl.Boolean),
        same_workload=label.replace_strict(found.workload, default=None, return_dtype=pl.String),
    )


def _not_across_workloads(table: pl.DataFrame) -> pl.DataFrame:
    """No speed-up between different workloads: a ratio of two unrelated traces' times is
    no speed-up of either."""
    different = pl.col("same_workload") == DIFFERENT
    speedups = [c for c in table.columns if c.startswith("speedup")]  # with their intervals
    return table.with_columns(
        pl.when(different).then(None).otherwise(pl.col(c)).alias(c) for c in speedups
    )


def baseline_label(table: pl.DataFrame, baseline: str | None) -> str | None:
    """The variant speed-ups are relative to: ``baseline`` when given (it must be one of the
    loaded variants), else ``naive`` if loaded, else the first loaded variant."""
    loaded = table.filter(pl.col("gpu_busy_us_per_iter").is_not_null())["variant"].to_list()
    return pick_baseline(loaded, baseline, "one of the loaded variants")


def pick_baseline(candidates: list[str], baseline: str | None, what: str) -> str | None:
    """``baseline`` (UsageError unless one of ``candidates``, which are ``what``), else
    ``naive`` if a candidate, else the first candidate."""
    if baseline is not None:
        if baseline not in candidates:
            raise UsageError(
                f"--baseline {baseline!r} is not {what}",
                fix="Choose one of: " + (", ".join(candidates) or "(none)") + ".",
            )
        return baseline
    if DEFAULT_BASELINE in candidates:
        return DEFAULT_BASELINE
    return candidates[0] if candidates else None


def _with_speedups(table: pl.DataFrame, baseline: str | None) -> pl.DataFrame:
    reference = table.filter(pl.col("variant") == baseline)
    if not reference.height:
        return table
    base = reference.row(0, named=True)
    # Capture medians where the baseline and the variant both use the same kind: measured
    # wall time (a cold capture's steady calls, a warm capture's repeated calls).
    by_median = (
        pl.when(pl.col("wall_source") == WALL_FROM_STEADY)
        .then(pl.lit(base["steady_median_ms"], pl.Float64) / pl.col("steady_median_ms"))
        .otherwise(pl.lit(base["median_ms"], pl.Float64) / pl.col("median_ms"))
    )
    by_trace = pl.lit(base["wall_us_per_iter"], pl.Float64) / pl.col("wall_us_per_iter")
    use_median = (pl.col("wall_source") == base["wall_source"]) & pl.col("wall_source").is_in(
        [WALL_FROM_MEDIAN, WALL_FROM_STEADY]
    )
    loaded = pl.col("gpu_busy_us_per_iter") > 0
    spread = (pl.col("steps_counted") >= MIN_STEPS_FOR_INTERVAL) & (
        (base["steps_counted"] or 0) >= MIN_STEPS_FOR_INTERVAL
    )
    by_trace_wall = pl.col("speedup_wall_source") == WALL_FROM_TRACE

    def ratio(of: str, over: str) -> pl.Expr:
        return pl.lit(base[of], pl.Float64) / pl.col(over)

    intervals = {
        "speedup_low": pl.when(loaded & spread).then(
            ratio("gpu_busy_us_step_min", "gpu_busy_us_step_max")
        ),
        "speedup_high": pl.when(loaded & spread).then(
            ratio("gpu_busy_us_step_max", "gpu_busy_us_step_min")
        ),
        "speedup_wall_low": pl.when(spread & by_trace_wall).then(
            ratio("wall_us_step_min", "wall_us_step_max")
        ),
        "speedup_wall_high": pl.when(spread & by_trace_wall).then(
            ratio("wall_us_step_max", "wall_us_step_min")
        ),
    }
    return table.with_columns(
        speedup=pl.when(loaded).then(
            pl.lit(base["gpu_busy_us_per_iter"], pl.Float64) / pl.col("gpu_busy_us_per_iter")
        ),
        speedup_wall=pl.when(loaded & use_median)
        .then(by_median)
        .when(loaded & (pl.col("wall_us_per_iter") > 0))
        .then(by_trace),
        speedup_wall_source=pl.when(loaded & use_median)
        .then(pl.col("wall_source"))
        .when(loaded & (pl.col("wall_us_per_iter") > 0))
        .then(pl.lit(WALL_FROM_TRACE)),
    ).with_columns(**intervals)


def _longest(kernels: pl.DataFrame) -> str | None:
    """The name of the kernel with the most time, if any."""
    top = (
        kernels.group_by("name")
        .agg(pl.col("dur_ns").sum())
        .sort(["dur_ns", "name"], descending=[True, False])
    )
    return top["name"].first() if top.height else None  # type: ignore[return-value]


def _by_count(frame: pl.DataFrame, column: str) -> list[str]:
    """The distinct values of ``column``, most frequent first."""
    counts = (
        frame.group_by(column).len().drop_nulls().sort(["len", column], descending=[True, False])
    )
    return counts[column].to_list()
