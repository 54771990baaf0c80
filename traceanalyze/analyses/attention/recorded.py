"""The recorded inputs of a few ops (``record_shapes``), decoded into typed lists.

Only rows whose text has the expected shape are decoded (the roofline's strict patterns), so
odd text leaves one op without shapes instead of failing the column.
"""

from __future__ import annotations

import polars as pl

from traceanalyze.analyses.roofline.formulas import SHAPES_PATTERN, STRINGS_PATTERN
from traceanalyze.analyses.roofline.ops import ELEMENT_TYPES

DTYPES = {name: short for name, (short, _) in ELEMENT_TYPES.items()}
ELEMENT_BYTES = {short: size for short, size in ELEMENT_TYPES.values()}


def decoded(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` (cpu rows) plus ``dims`` (List[List[Int64]]), ``types`` and ``concrete``
    (List[String]); each null where the trace has none or its text is not readable."""
    dims_ok = pl.col("input_dims").str.contains(SHAPES_PATTERN)
    types_ok = pl.col("input_types").str.contains(STRINGS_PATTERN)
    concrete_ok = pl.col("concrete_inputs").str.contains(STRINGS_PATTERN)
    return frame.with_columns(
        dims=pl.when(dims_ok)
        .then(pl.col("input_dims"))
        .str.json_decode(pl.List(pl.List(pl.Int64))),
        types=pl.when(types_ok).then(pl.col("input_types")).str.json_decode(pl.List(pl.String)),
        concrete=pl.when(concrete_ok)
        .then(pl.col("concrete_inputs"))
        .str.json_decode(pl.List(pl.String)),
    )


def dims(position: int | pl.Expr) -> pl.Expr:
    """The recorded dims of input ``position`` (null when absent)."""
    return pl.col("dims").list.get(position, null_on_oob=True)


def dim(position: int | pl.Expr, axis: int) -> pl.Expr:
    """One dimension (negative: from the end) of input ``position``."""
    return dims(position).list.get(axis, null_on_oob=True)


def ndim(position: int | pl.Expr) -> pl.Expr:
    return dims(position).list.len()


def numel(position: int | pl.Expr) -> pl.Expr:
    """Elements of input ``position`` (null where it recorded no dims: not a tensor)."""
    shape = dims(position)
    return pl.when(shape.list.len() > 0).then(shape.list.eval(pl.element().product()).list.first())


def dtype(position: int | pl.Expr) -> pl.Expr:
    """The short dtype (bf16, fp32, ...) of input ``position`` (null: not a known tensor)."""
    kind = pl.col("types").list.get(position, null_on_oob=True)
    return kind.replace_strict(DTYPES, default=None, return_dtype=pl.String)


def concrete(position: int | pl.Expr | None) -> pl.Expr:
    """The concrete value (text) of input ``position``; null where the op has no such input."""
    if position is None:
        return pl.lit(None, pl.String)
    return pl.col("concrete").list.get(position, null_on_oob=True)


def element_bytes(short: pl.Expr) -> pl.Expr:
    """Bytes per element of a short dtype."""
    return short.replace_strict(ELEMENT_BYTES, default=None, return_dtype=pl.Int64)
