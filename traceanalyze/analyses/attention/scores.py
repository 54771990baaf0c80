"""The bytes a call writes into tensors of the scores' size (the memory wall).

For calls whose ops are visible (composed attention, SDPA's math backend): each op that
launched GPU work for the call writes one tensor (``OUTPUTS`` says which: a GEMM's product, a
cast in its target dtype, a bool tensor, the largest input's shape and dtype by default); the
ones with as many elements as the scores count, in the dtype they write. A fused kernel keeps
the scores on chip: 0.
"""

from __future__ import annotations

import polars as pl

from traceanalyze.analyses.attention.recorded import (
    concrete,
    decoded,
    dim,
    dtype,
    element_bytes,
    numel,
)
from traceanalyze.analyses.attention.rules import COMPOSED, OUTPUTS, SCALAR_TYPES

WRITE_COLUMNS: dict[str, pl.DataType] = {"call_id": pl.Int64(), "scores_bytes": pl.Int64()}


def score_writes(cpu: pl.DataFrame, calls: pl.DataFrame, activities: pl.DataFrame) -> pl.DataFrame:
    """``call_id`` -> ``scores_bytes`` for the calls of ``calls`` (with ``implementation`` and
    ``scores_numel``) whose implementation writes the scores; 0 for fused implementations with
    known shapes; null where the shapes are unknown."""
    # Only GPU work is counted: a call that ran on the CPU wrote no GPU memory (null).
    on_gpu = pl.col("scores_numel").is_not_null() & (pl.col("gpu_ns").fill_null(0) > 0)
    writing = calls.filter(pl.col("implementation").is_in(list(COMPOSED)))
    fused = calls.filter(~pl.col("implementation").is_in(list(COMPOSED))).select(
        "call_id", scores_bytes=pl.when(on_gpu).then(pl.lit(0))
    )
    launching = (
        activities.filter(pl.col("kind") != "memset")
        .join(writing.select("call_id", "scores_numel"), on="call_id")
        .select("call_id", "op_id", "scores_numel")
        .drop_nulls()
        .unique()
    )
    ops = decoded(
        cpu.select("op_id", "name", "input_dims", "input_types", "concrete_inputs").filter(
            pl.col("op_id").is_in(launching["op_id"].implode())
        )
    ).with_columns(**_written())
    bytes_ = (
        launching.join(ops.select("op_id", "out_numel", "out_bytes", "extra_bytes"), on="op_id")
        .filter(pl.col("out_numel") == pl.col("scores_numel"))
        .group_by("call_id")
        .agg(scores_bytes=(pl.col("out_bytes") + pl.col("extra_bytes")).sum())
    )
    composed = writing.select("call_id", "scores_numel", "gpu_ns").join(
        bytes_, on="call_id", how="left"
    )
    written = composed.select(
        "call_id", scores_bytes=pl.when(on_gpu).then(pl.col("scores_bytes").fill_null(0))
    )
    return pl.concat([written, fused], how="vertical_relaxed").select(
        [pl.col(c).cast(t) for c, t in WRITE_COLUMNS.items()]
    )


def _largest() -> tuple[pl.Expr, pl.Expr]:
    """The elements and dtype of the largest tensor input (the first of equals)."""
    sizes = pl.col("dims").list.eval(pl.element().list.eval(pl.element().product()).list.first())
    index = sizes.list.arg_max()
    return sizes.list.max(), dtype(index)


def _written() -> dict[str, pl.Expr]:
    """``out_numel`` and ``out_bytes`` of the tensor each op writes, ``extra_bytes`` for a
    dropout's keep-mask."""
    kind = pl.col("name").replace_strict(
        {name: out.kind for name, out in OUTPUTS.items()}, default="like"
    )
    cast_at = pl.col("name").replace_strict(
        {name: out.cast_position for name, out in OUTPUTS.items()}, default=None,
        return_dtype=pl.Int64,
    )  # fmt: skip
    like_numel, like_dtype = _largest()
    bias = pl.col("name") == "aten::baddbmm"
    a, b = pl.when(bias).then(1).otherwise(0), pl.when(bias).then(2).otherwise(1)
    gemm_numel = numel(a) // dim(a, -1) * dim(b, -1)
    cast_dtype = concrete(cast_at).replace_strict(dict(SCALAR_TYPES), default=None)
    out_numel = (
        pl.when(kind == "gemm").then(gemm_numel)
        .when(kind == "none").then(pl.lit(None, pl.Int64))
        .otherwise(like_numel)
    )  # fmt: skip
    out_dtype = (
        pl.when(kind == "gemm").then(dtype(a))
        .when(kind == "bool").then(pl.lit("bool"))
        .when(kind == "cast").then(pl.coalesce(cast_dtype, like_dtype))
        .when((kind == "half_to_float") & (concrete(cast_at) == "True")).then(pl.lit("fp32"))
        .otherwise(like_dtype)
    )  # fmt: skip
    return {
        "out_numel": out_numel,
        "out_bytes": out_numel * element_bytes(out_dtype),
        "extra_bytes": pl.when(kind == "dropout").then(like_numel).otherwise(0),
    }
