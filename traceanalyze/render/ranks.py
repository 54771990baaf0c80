"""Renderers for the `ranks` analysis: markdown for people, JSON (every table), CSV (the rank
table)."""

from __future__ import annotations

from typing import Any

import polars as pl

from traceanalyze.analyses.distributed.ranks import RANK_DEFINITIONS, RanksResult
from traceanalyze.analyses.step.definitions import DEFINITIONS
from traceanalyze.names import with_readable_names
from traceanalyze.render.formats import Forms
from traceanalyze.render.headings import heading
from traceanalyze.render.table import markdown_table
from traceanalyze.tables import conform

TOP_COLLECTIVES = 10


RANK_FIGURES = (
    "median_wall_us_per_iter", "straggler_pct", "stragglers", "clock_alignment",
    "collectives_matched", "median_start_spread_us", "max_start_spread_us", "notes",
)  # fmt: skip


def ranks_figures(result: RanksResult) -> pl.DataFrame:
    """The figures of the job as one row."""
    row = {
        "median_wall_us_per_iter": result.median_wall_us_per_iter,
        "straggler_pct": result.straggler_pct,
        "stragglers": result.stragglers,
        "clock_alignment": result.alignment,
        "collectives_matched": result.collectives.height,
        "median_start_spread_us": result.median_start_spread_us,
        "max_start_spread_us": result.max_start_spread_us,
        "notes": list(result.notes),
    }
    return pl.DataFrame([row], infer_schema_length=None)


def ranks_record(result: RanksResult) -> dict[str, Any]:
    """The JSON form (its keys are listed in the README under "Stable keys")."""
    figures = conform(ranks_figures(result), "ranks.figures").row(0, named=True)
    notes = figures.pop("notes")
    return (
        {"ranks": conform(result.ranks, "ranks.ranks").to_dicts()}
        | figures
        | {
            "collectives": conform(result.collectives, "ranks.collectives").to_dicts(),
            "notes": notes,
        }
    )


# The rank table's glossary: the step model's figures it states per rank (defined once, with
# the step model), then its own.
_DEFINED = {
    **{
        k: f"{DEFINITIONS[k]}, per rank"
        for k in ("wall_us_per_iter", "exposed_communication_us_per_iter")
    },
    **RANK_DEFINITIONS,
}


def ranks_markdown(result: RanksResult, *, full_names: bool = False, level: int = 2) -> str:
    """The rank table, the stragglers, the widest collective skews, notes and definitions;
    ``level`` is the heading level of the two parts."""
    mark = "#" * level
    parts = [
        f"{mark} Per rank\n",
        f"{_count(result.ranks.height, 'rank')}; per rank, means over its iterations.\n",
        _table(result.ranks),
        _stragglers(result),
        f"{mark} Collective skew\n",
        _skew(result, full_names),
        *(f"{note}\n" for note in result.notes),
        "\n".join(f"- *{heading(k)}*: {text}." for k, text in _DEFINED.items()) + "\n",
    ]
    return "\n".join(p for p in parts if p)


# `ranks`: JSON every table (:func:`ranks_record`); tables the ranks (the default), the
# collectives matched across ranks, the figures; markdown :func:`ranks_markdown`.
RANKS: Forms[RanksResult] = Forms(
    markdown=ranks_markdown,
    json=lambda result, **_: ranks_record(result),
    tables={
        "ranks": "ranks",
        "collectives": "collectives",
        "figures": lambda result, **_: ranks_figures(result),
    },
    command="ranks",
)


def _count(value: int, noun: str) -> str:
    return f"{value} {noun}" + ("" if value == 1 else "s")


def _table(frame: pl.DataFrame) -> str:
    return markdown_table(frame.rename({c: heading(c) for c in frame.columns}))


def _stragglers(result: RanksResult) -> str:
    median = result.median_wall_us_per_iter
    if not median:
        return "No step time on any rank: no stragglers to find.\n"
    limit = f"more than {result.straggler_pct:g}% over the median of {median:,.2f} µs"
    late = result.ranks.filter(pl.col("straggler")).select("rank", "wall_pct_over_median")
    if not late.height:
        return f"Stragglers (step time {limit}): none.\n"
    shown = ", ".join(f"rank {rank} (+{pct:.1f}%)" for rank, pct in late.rows())
    return f"Stragglers (step time {limit}): {shown}.\n"


def _skew(result: RanksResult, full_names: bool) -> str:
    skew = result.collectives
    if not skew.height:
        return "No collective ran on two or more ranks.\n"
    summary = (
        f"{skew.height} collectives matched on two or more ranks; start spread median "
        f"{result.median_start_spread_us:,.2f} µs, max {result.max_start_spread_us:,.2f} µs. The "
        f"{min(TOP_COLLECTIVES, skew.height)} widest:\n"
    )
    top = skew.head(TOP_COLLECTIVES)
    if not full_names:
        top = with_readable_names(top)
    return summary + "\n" + _table(top)
