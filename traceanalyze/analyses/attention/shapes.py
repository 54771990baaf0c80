"""Each call's shapes: from the recorded inputs of its op (``SHAPE_FAMILIES``), else from
what its kernels' names say (``KERNEL_SHAPE_RULES``).

Layouts: ``bhsd`` q is [batch, heads, seq, dim]; ``bshd`` [batch, seq, heads, dim], or
[tokens, heads, dim] with cumulative sequence lengths (nested/varlen inputs); ``thd``
[tokens, heads, dim]. A nested (jagged) tensor records no dims and no type: ``nested``.
"""

from __future__ import annotations

from dataclasses import fields

import polars as pl

from traceanalyze.analyses.attention.recorded import concrete, decoded, dims, dtype
from traceanalyze.analyses.attention.rules import (
    KERNEL_SHAPE_RULES,
    SHAPE_FAMILIES,
    SHAPE_FAMILY_PATTERNS,
    STEP_LENGTH_PATTERNS,
    ShapeFamily,
    ascii_regex,
)

SHAPE_COLUMNS: dict[str, pl.DataType] = {
    "call_id": pl.Int64(),
    "batch": pl.Int64(),
    "heads_q": pl.Int64(),
    "heads_kv": pl.Int64(),
    "seq_q": pl.Int64(),
    "seq_kv": pl.Int64(),
    "head_dim": pl.Int64(),
    "head_dim_v": pl.Int64(),
    "tokens_q": pl.Int64(),
    "tokens_kv": pl.Int64(),  # a varlen call's key tokens where k holds them (not a cache)
    "dtype": pl.String(),
    "causal": pl.Boolean(),
    "mask": pl.String(),
    "mask_dims": pl.List(pl.Int64()),
    "dropout": pl.Float64(),
    "enable_gqa": pl.Boolean(),
    "nested": pl.Boolean(),
    "varlen": pl.Boolean(),
    "blocks_q": pl.Int64(),
    "blocks_kv": pl.Int64(),
    "shapes_recorded": pl.Boolean(),
}
_POSITIONS = ("q", "k", "v", "mask", "dropout", "causal", "scale", "gqa", "max_q", "max_kv",
              "cu_seq_q")  # fmt: skip
_MASK_KINDS = {"bool": "bool", "bf16": "float", "fp16": "float", "fp32": "float", "fp64": "float"}


def family_key(name: pl.Expr) -> pl.Expr:
    """The ``SHAPE_FAMILIES`` key of an op name (null: the op records no attention shapes)."""
    key: pl.Expr = pl.lit(None, pl.String)
    for pattern, family in reversed(SHAPE_FAMILY_PATTERNS):
        key = pl.when(name.str.contains(ascii_regex(pattern))).then(pl.lit(family)).otherwise(key)
    return pl.when(name.is_in(list(SHAPE_FAMILIES))).then(name).otherwise(key)


def has_family(name: pl.Expr) -> pl.Expr:
    return family_key(name).is_not_null()


def _family_table() -> pl.DataFrame:
    rows = []
    for key, family in SHAPE_FAMILIES.items():
        row = {f.name: getattr(family, f.name) for f in fields(ShapeFamily)}
        blocks = row.pop("block_mask")
        rows.append({"family": key, **row, "num_blocks": blocks and blocks[0],
                     "block_indices": blocks and blocks[1]})  # fmt: skip
    schema: dict[str, pl.DataType] = {
        "family": pl.String(),
        "layout": pl.String(),
        **{p: pl.Int64() for p in _POSITIONS},
        "direction": pl.String(),
        "num_blocks": pl.Int64(),
        "block_indices": pl.Int64(),
    }
    return pl.DataFrame(rows, schema=schema)


def op_shapes(cpu: pl.DataFrame, calls: pl.DataFrame) -> pl.DataFrame:
    """SHAPE_COLUMNS for the calls with a ``shape_op_id``."""
    wanted = calls.select("call_id", op_id="shape_op_id").drop_nulls()
    if not wanted.height:
        return pl.DataFrame(schema=SHAPE_COLUMNS)
    rows = decoded(
        cpu.select("op_id", "name", "input_dims", "input_types", "concrete_inputs").join(
            wanted, on="op_id"
        )
    ).with_columns(family=family_key(pl.col("name")))
    rows = rows.join(_family_table(), on="family", how="left")
    return rows.select("call_id", **_layout_columns(), **_argument_columns()).select(
        list(SHAPE_COLUMNS)
    )


def _int(text: pl.Expr) -> pl.Expr:
    return text.str.strip_chars().cast(pl.Int64, strict=False)


def _bhsd_value_dim(v: pl.Expr, k: pl.Expr) -> pl.Expr:
    """v's head size in the bhsd layout: [.., seq_kv, dim], or [.., dim, seq_kv] where the
    kernel takes its third input transposed (fp8 flex on an H200 recorded q, k [8, 16, 1024,
    64] and [8, 16, 64, 1024]: fp8 matrix products want that operand K-major), told by its
    second-last dimension not being the keys' sequence."""
    transposed = v.list.get(2) != k.list.get(2)
    return pl.when(transposed).then(v.list.get(2)).otherwise(v.list.get(3))


def _layout_columns() -> dict[str, pl.Expr]:
    """Batch, heads, sequences and head sizes by the family's layout."""
    q, k, v = dims(pl.col("q")), dims(pl.col("k")), dims(pl.col("v"))
    layout = pl.col("layout")
    four = q.list.len() == 4
    bhsd, bshd = (layout == "bhsd") & four, (layout == "bshd") & four
    packed = ((layout == "bshd") & (q.list.len() == 3)) | (layout == "thd")
    cu_batch = dims(pl.col("cu_seq_q")).list.get(0, null_on_oob=True) - 1
    max_q, max_kv = _int(concrete(pl.col("max_q"))), _int(concrete(pl.col("max_kv")))

    def pick(when_bhsd: pl.Expr, when_bshd: pl.Expr, when_packed: pl.Expr) -> pl.Expr:
        return (
            pl.when(bhsd).then(when_bhsd).when(bshd).then(when_bshd).when(packed).then(when_packed)
        )

    seq_q = pick(q.list.get(2), q.list.get(1), max_q)
    batch = pick(q.list.get(0), q.list.get(0), cu_batch)
    blocks = dims(pl.col("num_blocks"))
    indices = dims(pl.col("block_indices"))
    return {
        "batch": batch,
        "heads_q": pick(q.list.get(1), q.list.get(2), q.list.get(-2)),
        "heads_kv": pick(k.list.get(1), k.list.get(2), k.list.get(-2)),
        "seq_q": seq_q,
        "seq_kv": pick(k.list.get(2), k.list.get(1), max_kv),
        "head_dim": pick(q.list.get(3), q.list.get(3), q.list.get(-1)),
        "head_dim_v": pick(_bhsd_value_dim(v, k), v.list.get(3), v.list.get(-1)),
        "tokens_q": pl.when(packed).then(q.list.get(0)).otherwise(batch * seq_q),
        # flash/efficient varlen: k is [key tokens, heads, dim]; thd ops' k is a KV cache or
        # the step's new keys, neither the keys attended to.
        "tokens_kv": pl.when(packed & (layout == "bshd")).then(k.list.get(0)),
        "varlen": packed,
        "nested": (q.list.len() == 0)
        & (pl.col("types").list.get(pl.col("q"), null_on_oob=True) == ""),
        "blocks_q": blocks.list.get(-1, null_on_oob=True),
        "blocks_kv": indices.list.get(-1, null_on_oob=True),
        "shapes_recorded": q.list.len() > 0,
    }


def _argument_columns() -> dict[str, pl.Expr]:
    """dtype, causal, mask, dropout and enable_gqa from the recorded arguments."""
    mask_type = dtype(pl.col("mask"))
    is_true = {name: concrete(pl.col(name)) == "True" for name in ("causal", "gqa")}
    block = pl.col("num_blocks").is_not_null()
    recorded = pl.col("types").list.get(pl.col("mask"), null_on_oob=True).is_not_null()
    mask = (
        pl.when(block).then(pl.lit("block"))
        # The op takes no mask argument (flash, vLLM's attention op): none, recorded or not.
        .when(pl.col("mask").is_null()).then(pl.lit("none"))
        # It takes one but the trace did not record its arguments: unknown.
        .when(~recorded).then(pl.lit(None, pl.String))
        .otherwise(mask_type.replace_strict(_MASK_KINDS, default="none"))
    )  # fmt: skip
    return {
        "dtype": dtype(pl.col("q")),
        "causal": pl.when(pl.col("causal").is_not_null()).then(is_true["causal"]),
        "mask": pl.when(pl.col("family").is_not_null()).then(mask),
        "mask_dims": pl.when(mask_type.is_not_null()).then(dims(pl.col("mask"))),
        "dropout": concrete(pl.col("dropout")).cast(pl.Float64, strict=False),
        "enable_gqa": pl.when(pl.col("gqa").is_not_null()).then(is_true["gqa"]),
    }


# The columns kernel names can say (KERNEL_SHAPE_RULES' ``column``).
KERNEL_SAID = ("head_dim", "head_dim_v", "gqa_ratio", "causal", "dtype")


def step_lengths(region: pl.Expr) -> dict[str, pl.Expr]:
    """``step_sq``, ``step_sqsq`` and ``step_sqsk``: the sums over the step's sequences its
    annotation (``region``) writes (STEP_LENGTH_PATTERNS), over every group; null where it
    writes none."""
    sums: dict[str, pl.Expr] = {}
    for index, name in ((1, "step_sq"), (3, "step_sqsq"), (4, "step_sqsk")):
        found = [
            region.str.extract(ascii_regex(pattern), index).cast(pl.Int64, strict=False)
            for pattern in STEP_LENGTH_PATTERNS
        ]
        any_found = pl.any_horizontal(f.is_not_null() for f in found)
        sums[name] = pl.when(any_found).then(pl.sum_horizontal(found))
    return sums


def kernel_shapes(activities: pl.DataFrame) -> pl.DataFrame:
    """Per call: ``k_`` + each of KERNEL_SAID where its kernels' names say it (the first
    kernel that says each)."""
    names = activities["name"].unique().to_frame("name")
    said = names.with_columns(**{column: _said(column) for column in KERNEL_SAID})
    return (
        activities.select("call_id", "name", "ts_ns")
        .join(said, on="name")
        .sort("ts_ns")
        .group_by("call_id")
        .agg(**{f"k_{column}": pl.col(column).drop_nulls().first() for column in KERNEL_SAID})
    )


def _said(column: str) -> pl.Expr:
    name = pl.col("name")
    value: pl.Expr = pl.lit(None, pl.String)
    for rule in reversed([r for r in KERNEL_SHAPE_RULES if r.column == column]):
        found = name.str.extract(ascii_regex(rule.pattern), 1)
        got = pl.lit(rule.value) if rule.value is not None else found
        value = pl.when(found.is_not_null()).then(got).otherwise(value)
    if column in ("head_dim", "head_dim_v", "gqa_ratio"):
        return value.cast(pl.Int64, strict=False)
    if column == "causal":
        return pl.when(value.is_not_null()).then(value.str.to_lowercase() == "true")
    return value
