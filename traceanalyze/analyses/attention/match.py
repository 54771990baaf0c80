"""Rule tables applied to names: each distinct name is matched once, then joined back.

A trace's frames repeat a few thousand names hundreds of thousands of times; matching the
distinct names keeps the regexes off the big frames.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import polars as pl

from traceanalyze.analyses.attention.rules import HostRule, KernelRule, OpRule, ascii_regex

OP_RULE_COLUMNS: dict[str, pl.DataType] = {
    "implementation": pl.String(),
    "direction": pl.String(),
    "specificity": pl.Int32(),
    "role": pl.String(),
}
KERNEL_RULE_COLUMNS: dict[str, pl.DataType] = {
    "k_implementation": pl.String(),
    "k_direction": pl.String(),
    "k_specificity": pl.Int32(),
    "k_role": pl.String(),
}


def first_rule(
    names: pl.Series,
    patterns: Sequence[str],
    values: Sequence[dict[str, Any]],
    schema: dict[str, pl.DataType],
) -> pl.DataFrame:
    """One row per distinct name of ``names`` that a pattern matches: ``name`` and the values
    of the first matching pattern (columns ``schema``)."""
    distinct = names.drop_nulls().unique().to_frame("name")
    index = pl.lit(None, pl.Int32)
    for i in reversed(range(len(patterns))):  # the first pattern of the table wins
        hit = pl.col("name").str.contains(ascii_regex(patterns[i]))
        index = pl.when(hit).then(pl.lit(i, pl.Int32)).otherwise(index)
    matched = distinct.with_columns(rule=index).drop_nulls("rule")
    table = pl.DataFrame(
        [{"rule": i, **row} for i, row in enumerate(values)],
        schema={"rule": pl.Int32(), **schema},
    )
    return matched.join(table, on="rule", how="left").drop("rule")


def matches(pattern: str, column: str = "name") -> pl.Expr:
    """Whether ``column`` matches ``pattern`` (a rule table's regex)."""
    return pl.col(column).str.contains(ascii_regex(pattern))


def name_mask(frame: pl.DataFrame, pattern: str) -> pl.Series:
    """Per row of ``frame``: whether its name matches ``pattern``, matched once per distinct
    name (a cpu frame repeats a few hundred names over ~10^5 rows)."""
    names = frame["name"].unique().to_frame()
    hits = names.filter(matches(pattern))["name"]
    return frame["name"].is_in(hits.implode()).fill_null(False)


def op_rules(names: pl.Series, rules: Sequence[OpRule]) -> pl.DataFrame:
    """Distinct op names with their rule: implementation, direction (backward where the rule
    or the name says so), specificity, role."""
    values = [
        {
            "implementation": r.implementation,
            "direction": r.direction,
            "specificity": r.specificity,
            "role": r.role,
        }
        for r in rules
    ]
    found = first_rule(names, [r.pattern for r in rules], values, OP_RULE_COLUMNS)
    backward = pl.col("name").str.contains(r"(?i)backward|_bwd|grad$")
    return found.with_columns(
        direction=pl.coalesce(
            "direction", pl.when(backward).then(pl.lit("backward")).otherwise(pl.lit("forward"))
        )
    )


def kernel_rules(names: pl.Series, rules: Sequence[KernelRule]) -> pl.DataFrame:
    """Distinct kernel names with their rule (``k_`` columns)."""
    values = [
        {
            "k_implementation": r.implementation,
            "k_direction": r.direction,
            "k_specificity": r.specificity,
            "k_role": r.role,
        }
        for r in rules
    ]
    return first_rule(names, [r.pattern for r in rules], values, KERNEL_RULE_COLUMNS)


def host_kinds(names: pl.Series, rules: Sequence[HostRule]) -> pl.DataFrame:
    """Distinct names with the host-cost kind of the first matching rule."""
    return first_rule(
        names,
        [r.pattern for r in rules],
        [{"kind": r.kind} for r in rules],
        {"kind": pl.String()},
    )
