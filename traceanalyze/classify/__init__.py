"""Kernel classification: the taxonomy's rules (data) and the columnar classifier."""

from traceanalyze.classify.classify import (
    category_expr,
    classify,
    gemm_precision_expr,
    op_ids_are_rows,
)
from traceanalyze.classify.rules import CATEGORIES

__all__ = [
    "CATEGORIES",
    "category_expr",
    "classify",
    "gemm_precision_expr",
    "op_ids_are_rows",
]
