"""`diff`: what changed between two traces, for regression hunting."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

from traceanalyze.analyses.activities import activities, in_iterations, iteration_count
from traceanalyze.analyses.configuration import configuration, differences
from traceanalyze.analyses.iterations import counted
from traceanalyze.analyses.summary import summary
from traceanalyze.display import Shown
from traceanalyze.trace import Trace

# Summary figures compared between the two traces.
FIGURES = (
    "gpu_busy_us_per_iter",
    "gpu_activity_us_per_iter",
    "gpu_kernel_us_per_iter",
    "gpu_memcpy_us_per_iter",
    "gpu_memset_us_per_iter",
    "gpu_idle_us_per_iter",
    "cpu_op_us_per_iter",
    "launch_us_per_iter",
    "wall_us_per_iter",
    "kernels_per_iter",
    "memcpy_per_iter",
    "memset_per_iter",
    "transpose_ops_per_iter",
    "cudnn_cpu_us_per_iter",
)


@dataclass(frozen=True, repr=False)  # Shown: a short repr, tables in Jupyter
class TraceDiff(Shown):
    figures: pl.DataFrame  # figure, base, new, change, change_pct
    categories: pl.DataFrame  # category, base_us, new_us, change_us
    kernels: pl.DataFrame  # name, category, status (added/removed/changed), counts and times
    warnings: tuple[str, ...] = ()  # the two traces ran different configurations


def diff(
    base: Trace,
    new: Trace,
    base_capture: dict[str, Any] | None = None,
    new_capture: dict[str, Any] | None = None,
) -> TraceDiff:
    """What changed from ``base`` to ``new``; ``*_capture`` are the manifests' configurations
    where the traces come from a capture (their differences become warnings)."""
    base, new = counted(base), counted(new)
    a, b = summary(base), summary(new)
    figures = pl.DataFrame(
        {"figure": list(FIGURES), "base": [a[f] for f in FIGURES], "new": [b[f] for f in FIGURES]},
        schema={"figure": pl.String, "base": pl.Float64, "new": pl.Float64},
    ).with_columns(_change("base", "new"))
    per_kernel = _per_kernel(base), _per_kernel(new)
    warnings = differences(configuration(base, base_capture), configuration(new, new_capture))
    return TraceDiff(figures, _categories(*per_kernel), _kernels(*per_kernel), tuple(warnings))


def _change(before: str, after: str) -> list[pl.Expr]:
    delta = pl.col(after) - pl.col(before)
    return [
        delta.alias("change"),
        pl.when(pl.col(before) != 0).then(delta / pl.col(before) * 100).alias("change_pct"),
    ]


def _categories(base: pl.DataFrame, new: pl.DataFrame) -> pl.DataFrame:
    """Time per category (kernels, memcpy and memset) from the per-kernel frames."""

    def per_category(frame: pl.DataFrame, name: str) -> pl.DataFrame:
        return frame.group_by("category").agg(pl.col("us_per_iter").sum().alias(name))

    joined = per_category(base, "base_us").join(
        per_category(new, "new_us"), on="category", how="full", coalesce=True
    )
    # The name breaks ties: a sort on the change alone left equal changes in hash order.
    return (
        joined.with_columns(pl.col("base_us", "new_us").fill_null(0.0))
        .with_columns(change_us=pl.col("new_us") - pl.col("base_us"))
        .sort([pl.col("change_us").abs(), "category"], descending=[True, False])
    )


def _per_kernel(trace: Trace) -> pl.DataFrame:
    n = iteration_count(trace)
    return (
        in_iterations(activities(trace))
        .group_by("name")
        .agg(
            pl.col("category").first(),
            count_per_iter=pl.len() / n,
            us_per_iter=pl.col("dur_ns").sum() / 1e3 / n,
        )
    )


def paired_columns() -> list[pl.Expr]:
    """Over a full join of BASE's and NEW's ``count_per_iter``/``us_per_iter`` (NEW's with the
    suffix ``_new``): ``status`` (added, removed or changed) and both sides' figures, 0 where a
    side has none."""
    return [
        pl.when(pl.col("count_per_iter").is_null())
        .then(pl.lit("added"))
        .when(pl.col("count_per_iter_new").is_null())
        .then(pl.lit("removed"))
        .otherwise(pl.lit("changed"))
        .alias("status"),
        pl.col("count_per_iter").fill_null(0.0).alias("base_count_per_iter"),
        pl.col("count_per_iter_new").fill_null(0.0).alias("new_count_per_iter"),
        pl.col("us_per_iter").fill_null(0.0).alias("base_us_per_iter"),
        pl.col("us_per_iter_new").fill_null(0.0).alias("new_us_per_iter"),
    ]


def _kernels(base: pl.DataFrame, new: pl.DataFrame) -> pl.DataFrame:
    joined = base.join(new, on="name", how="full", coalesce=True, suffix="_new")
    return (
        joined.select(
            "name",
            pl.coalesce("category", "category_new").alias("category"),
            *paired_columns(),
        )
        .with_columns(change_us=pl.col("new_us_per_iter") - pl.col("base_us_per_iter"))
        .filter(
            (pl.col("status") != "changed")
            | (pl.col("base_count_per_iter") != pl.col("new_count_per_iter"))
            | (pl.col("change_us").abs() > 0)
        )
        .sort([pl.col("change_us").abs(), "name"], descending=[True, False])
    )
