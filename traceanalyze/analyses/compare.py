"""`compare`: the seed article's final table, made automatic, one row per variant."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import polars as pl

from traceanalyze.analyses.activities import activities, in_iterations
from traceanalyze.analyses.summary import summary
from traceanalyze.load.variants import Variant
from traceanalyze.names import readable_names
from traceanalyze.occupancy import duration_weighted_mean
from traceanalyze.trace import Trace

COLUMNS = {
    "variant": pl.String,
    "status": pl.String,
    "gpu_us_per_iter": pl.Float64,
    "cpu_us_per_iter": pl.Float64,
    "speedup": pl.Float64,
    "kernels_per_iter": pl.Float64,
    "memcpy_per_iter": pl.Float64,
    "memset_per_iter": pl.Float64,
    "transpose_ops_per_iter": pl.Float64,
    "fused_kernel": pl.String,
    "fused_kernel_full": pl.String,
    "theoretical_occupancy_pct": pl.Float64,
    "achieved_occupancy_pct": pl.Float64,
    "cudnn_planning_us_per_iter": pl.Float64,
    "launch_api": pl.String,
    "gemm_precision": pl.String,
    "bound": pl.String,
    "median_ms": pl.Float64,
    "relative_error": pl.Float64,
}


FUSED_KERNEL_WIDTH = 48


def variant_row(trace: Trace) -> dict[str, Any]:
    """The comparison figures of one trace (speed-up is filled in by :func:`comparison`)."""
    figures = summary(trace)
    kernels = in_iterations(activities(trace)).filter(pl.col("kind") == "kernel")
    fused = (
        kernels.filter(pl.col("category") == "fused_attention")
        .group_by("name")
        .agg(pl.col("dur_ns").sum())
        .sort("dur_ns", descending=True)
        .head(1)
    )
    return {
        "gpu_us_per_iter": figures["gpu_kernel_us_per_iter"],
        "cpu_us_per_iter": figures["cpu_us_per_iter"],
        "kernels_per_iter": figures["kernels_per_iter"],
        "memcpy_per_iter": figures["memcpy_per_iter"],
        "memset_per_iter": figures["memset_per_iter"],
        "transpose_ops_per_iter": figures["transpose_ops_per_iter"],
        "fused_kernel_full": fused["name"].first(),
        "theoretical_occupancy_pct": _weighted(kernels, "theoretical_occupancy_pct"),
        "achieved_occupancy_pct": _weighted(kernels, "achieved_occupancy_pct"),
        "cudnn_planning_us_per_iter": figures["cudnn_planning_us_per_iter"],
        "launch_api": _joined_counts(kernels, "launch_api"),
        "gemm_precision": _joined_values(
            kernels.filter(pl.col("category") == "gemm"), "gemm_precision"
        ),
        "bound": figures["bound"],
    }


def comparison(variants: Sequence[Variant], baseline: str | None = "naive") -> pl.DataFrame:
    """One row per variant; ``speedup`` is baseline GPU time over the variant's GPU time.

    The baseline is the variant labelled ``baseline`` if present, else the first loaded one.
    """
    rows = []
    for variant in variants:
        row: dict[str, Any] = {"variant": variant.label, "status": variant.status}
        if variant.trace is not None:
            row |= variant_row(variant.trace)
        row["median_ms"] = variant.manifest_entry.get("median_ms")
        row["relative_error"] = variant.manifest_entry.get("relative_error")
        rows.append(row)
    table = pl.DataFrame(rows, schema=COLUMNS)
    reference = _baseline_gpu_us(table, baseline)
    return table.with_columns(
        # A narrow column: readable names cut at 48 characters, never two kernels alike.
        fused_kernel=readable_names(table["fused_kernel_full"], width=FUSED_KERNEL_WIDTH),
        speedup=pl.when(pl.col("gpu_us_per_iter") > 0).then(
            pl.lit(reference) / pl.col("gpu_us_per_iter")
        ),
    )


def baseline_label(table: pl.DataFrame, baseline: str | None) -> str | None:
    """The variant speed-ups are relative to: ``baseline`` if loaded, else the first loaded."""
    loaded = table.filter(pl.col("gpu_us_per_iter").is_not_null())["variant"].to_list()
    if baseline in loaded:
        return baseline
    return loaded[0] if loaded else None


def _baseline_gpu_us(table: pl.DataFrame, baseline: str | None) -> float | None:
    label = baseline_label(table, baseline)
    rows = table.filter(pl.col("variant") == label)
    return rows["gpu_us_per_iter"].first() if rows.height else None  # type: ignore[return-value]


# A time-weighted occupancy speaks for the variant only if it covers most of its kernel time:
# cuDNN's main kernel reports none, and its helpers' 100% must not stand for the variant.
MIN_COVERAGE = 0.5


def _weighted(kernels: pl.DataFrame, column: str) -> float | None:
    """Time-weighted mean of ``column``; None when known for under half the kernel time."""
    known = pl.col(column).is_not_null() & pl.col(column).is_not_nan()
    value, coverage = kernels.select(
        duration_weighted_mean(column),
        pl.col("dur_ns").filter(known).sum() / pl.col("dur_ns").sum(),
    ).row(0)
    if value is None or coverage is None or coverage < MIN_COVERAGE:
        return None
    return float(value)


def _joined_counts(frame: pl.DataFrame, column: str) -> str | None:
    counts = (
        frame.group_by(column).len().drop_nulls().sort(["len", column], descending=[True, False])
    )
    if not counts.height:
        return None
    if counts.height == 1:
        return counts[column].first()  # type: ignore[return-value]
    return ", ".join(counts[column].to_list())


def _joined_values(frame: pl.DataFrame, column: str) -> str | None:
    values = frame[column].drop_nulls().unique().sort().to_list()
    return ", ".join(values) if values else None
