"""The bytes a call writes into tensors of the scores' size (the memory wall).

For calls whose ops are visible (composed attention, SDPA's math backend): each op that
launched GPU work for the call writes one tensor (``OUTPUTS`` says which: a GEMM's product, a
cast in its target dtype, a bool tensor, the largest input's shape and dtype by default); the
ones with as many elements as the scores count, in the dtype they write (an in-place op
its first input's; an out-of-place one its tensor inputs' promotion). A fused kernel keeps
the scores on chip: 0.
"""

from __future__ import annotations

import polars as pl

from traceanalyze.analyses.attention.recorded import (
    DTYPES,
    concrete,
    decoded,
    dim,
    dtype,
    element_bytes,
    numel,
)
from traceanalyze.analyses.attention.rules import COMPOSED, OUTPUTS, SCALAR_TYPES

WRITE_COLUMNS: dict[str, pl.DataType] = {"call_id": pl.Int64(), "scores_bytes": pl.Int64()}
# Floating dtypes by width, for PyTorch's type promotion of an out-of-place element-wise op's
# tensor inputs (the widest wins; fp16 with bf16 gives fp32).
FLOAT_WIDTH = {"fp8": 1, "fp16": 2, "bf16": 2, "fp32": 4, "fp64": 8}


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
    )
    ops = ops.join(_promoted(ops), on="op_id", how="left").with_columns(**_written())
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


def _promoted(ops: pl.DataFrame) -> pl.DataFrame:
    """``op_id`` -> ``promoted``: the floating dtype an out-of-place element-wise op writes,
    PyTorch's promotion over its inputs that are tensors with dims (GPT-2's bf16 scores plus
    its fp32 mask write fp32 scores); null where no such input is floating. A handful of ops
    per call: the launching ops of composed calls only."""
    inputs = (
        ops.select("op_id", "dims", "types")
        .drop_nulls()
        .filter(pl.col("dims").list.len() == pl.col("types").list.len())
        .explode("dims", "types")
        .filter(pl.col("dims").list.len() > 0)
        .with_columns(short=pl.col("types").replace_strict(DTYPES, default=None))
        .filter(pl.col("short").is_in(list(FLOAT_WIDTH)))
    )
    width = pl.col("short").replace_strict(FLOAT_WIDTH, return_dtype=pl.Int64)
    mixed_half = pl.col("short").is_in(["fp16"]).any() & pl.col("short").is_in(["bf16"]).any()
    return inputs.group_by("op_id").agg(
        promoted=pl.when(mixed_half)
        .then(pl.lit("fp32"))
        .otherwise(pl.col("short").sort_by(width, descending=True).first())
    )


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
        .when(kind == "half_to_float").then(like_dtype)
        # In place (add_, masked_fill_, copy_): self's dtype; else the inputs' promotion.
        .when(pl.col("name").str.ends_with("_")).then(dtype(0))
        .otherwise(pl.coalesce(pl.col("promoted"), like_dtype))
    )  # fmt: skip
    return {
        "out_numel": out_numel,
        "out_bytes": out_numel * element_bytes(out_dtype),
        "extra_bytes": pl.when(kind == "dropout").then(like_numel).otherwise(0),
    }
