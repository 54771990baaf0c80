"""GEMM shape findings: per GEMM op (its recorded shapes and data type) and kernel, what the
shape and the kernel's name say slows it down, with the fix (rules:
:mod:`traceanalyze.analyses.roofline.gemm_rules`).

One row per (op, shapes, dtype, kernel) with GEMM kernels inside the counted iterations:
``count_per_iter``, ``us_per_iter``, ``share_of_gpu_activity_pct`` (of all GPU activity in the
iterations), the shape (``gemm_m``, ``gemm_n``, ``gemm_k`` and ``flops`` per call, where the
op was modelled), ``gemm_precision``, ``kernel_sm`` against ``gpu_sm``,
``kernel_align_elements``, ``misaligned_dims``, ``dims_aligned`` (N and K both multiples of
their data type's; null where unknown) and ``causes``: ``alignment`` (a leading
dimension off its data type's multiple, or a kernel that loads under 16 bytes at a time),
``architecture`` (a kernel built for an older GPU, beside an alignment cause or on a GEMM of
1 GFLOP or more per call), ``precision`` (fp32 on the CUDA cores), in that order. Most time
first.
"""

from __future__ import annotations

import polars as pl

from traceanalyze.analyses.activities import per_trace
from traceanalyze.analyses.iterations import on_counted
from traceanalyze.analyses.roofline.gemm_rules import (
    ALIGNMENT,
    ARCHITECTURE,
    PRECISION,
    dims_aligned,
)
from traceanalyze.analyses.roofline.model import attributed_activities
from traceanalyze.trace import Trace

GEMM_COLUMNS = (
    "op_name", "shapes", "dtype", "name", "count_per_iter", "us_per_iter",
    "share_of_gpu_activity_pct", "gemm_m", "gemm_n", "gemm_k", "flops", "gemm_precision",
    "kernel_sm", "gpu_sm", "kernel_align_elements", "misaligned_dims", "dims_aligned", "causes",
)  # fmt: skip
_KEY = ["op_name", "shapes", "dtype", "name"]


@per_trace
@on_counted
def gemm_table(trace: Trace) -> pl.DataFrame:
    """GEMM kernels per op and shape with what slows them (see the module docstring)."""
    frame = attributed_activities(trace)
    n = max(trace.iterations.height, 1)
    total_ns = frame["dur_ns"].sum() or 1
    gemms = frame.filter((pl.col("category") == "gemm") & (pl.col("kind") == "kernel"))
    grouped = gemms.with_columns(op_name=pl.coalesce("model_name", "op_name")).group_by(
        _KEY, maintain_order=True
    )
    table = grouped.agg(
        *(
            pl.col(c).first()
            for c in (
                "gemm_m",
                "gemm_n",
                "gemm_k",
                "flops",
                "gemm_precision",
                "kernel_sm",
                "gpu_sm",
            )
        ),
        pl.col("kernel_align_elements").min(),
        pl.col("misaligned_dims").first(),
        dims_aligned=dims_aligned().first(),
        count_per_iter=pl.len() / n,
        us_per_iter=pl.col("dur_ns").sum() / 1e3 / n,
        share_of_gpu_activity_pct=pl.col("dur_ns").sum() / total_ns * 100,
        older=pl.col("older_arch").any(),
        narrow=pl.col("narrow_loads").any(),
    )
    causes = pl.concat_list(
        pl.when((pl.col("misaligned_dims").list.len() > 0) | pl.col("narrow")).then(
            pl.lit(ALIGNMENT)
        ),
        pl.when("older").then(pl.lit(ARCHITECTURE)),
        pl.when(pl.col("gemm_precision") == "fp32-cuda-cores").then(pl.lit(PRECISION)),
    ).list.drop_nulls()
    return (
        table.with_columns(causes=causes)
        .sort(["us_per_iter", *_KEY], descending=[True] + [False] * len(_KEY), nulls_last=True)
        .select(GEMM_COLUMNS)
    )
