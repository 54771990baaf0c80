"""Renderers for `audit`: markdown for people, JSON (``ok``, ``checks``, ``error_bars``), its
tables (the checks, the error bars, the clock offsets, the verdict)."""

from __future__ import annotations

from typing import Any

import polars as pl

from traceanalyze.analyses.audit import DEFINITIONS, Audit
from traceanalyze.analyses.audit.figures import FIGURES
from traceanalyze.render.formats import Forms, labelled
from traceanalyze.render.headings import heading
from traceanalyze.render.table import markdown_table, number_cell
from traceanalyze.tables.definitions import COLUMN_DEFINITIONS

# The rows people read: one per finding, its figures and its first examples.
SHOWN = (
    "check", "finding", "severity", "count", "affected_us_per_iter", "figures", "moved_pct",
    "detail",
)  # fmt: skip


def audit_record(result: Audit) -> dict[str, Any]:
    """The JSON form: ``ok``, ``checks`` (one object per finding; the clock_skew rows carry
    ``offsets_us``: rank -> µs) and ``error_bars`` (figure -> ± per iteration)."""
    rows = result.checks.to_dicts()
    for row in rows:
        row["offsets_us"] = (
            {str(rank): us for rank, us in result.offsets_us.items()}
            if row["check"] == "clock_skew" and result.offsets_us
            else None
        )
    return {"ok": result.ok, "checks": rows, "error_bars": result.error_bars}


# `count` is defined once for every table that has it (tables/definitions.py).
_DEFINED = {"count": COLUMN_DEFINITIONS["count"], **DEFINITIONS}


def audit_markdown(result: Audit, *, nested: bool = False, **_options: Any) -> str:
    """The verdict, one row per finding, the error bars, the clock offsets, the definitions."""
    shown = result.checks.select(SHOWN).with_columns(pl.col("figures").list.join(", "))
    parts = [
        _verdict(result),
        markdown_table(shown.rename({c: heading(c) for c in shown.columns})),
        _error_bars(result),
        _offsets(result),
        "\n".join(f"- *{heading(k)}*: {text}." for k, text in _DEFINED.items()) + "\n",
    ]
    return "\n".join(p for p in parts if p)


def _verdict(result: Audit) -> str:
    severities = result.checks["severity"]
    if result.ok:
        return "**ok**: no warning and no error (info rows: what the profiler does by design).\n"
    errors, warnings = int((severities == "error").sum()), int((severities == "warning").sum())
    said = [f"{errors} error{'s' if errors != 1 else ''}"] if errors else []
    said += [f"{warnings} warning{'s' if warnings != 1 else ''}"] if warnings else []
    return f"**not ok**: {' and '.join(said)}.\n"


def _error_bars(result: Audit) -> str:
    if not result.error_bars:
        return ""
    items = [
        f"`{figure}` ±{number_cell(amount)} {FIGURES[figure]}"
        for figure, amount in result.error_bars.items()
    ]
    return "Error bars (per iteration, from the warnings and errors): " + "; ".join(items) + ".\n"


def _offsets(result: Audit) -> str:
    if not result.offsets_us:
        return ""
    items = [f"rank {rank} {us:+,.3f} µs" for rank, us in sorted(result.offsets_us.items())]
    return "Clock offsets (against the lowest rank): " + ", ".join(items) + ".\n"


def _error_bars_table(result: Audit, **_: object) -> pl.DataFrame:
    """One row per figure the warnings and errors move: its ± per iteration."""
    return pl.DataFrame(
        {
            "figure": list(result.error_bars),
            "error_bar_per_iter": list(result.error_bars.values()),
        },
        schema={"figure": pl.String, "error_bar_per_iter": pl.Float64},
    )


def _offsets_table(result: Audit, **_: object) -> pl.DataFrame:
    """One row per rank of a job: its clock's offset against the lowest rank's."""
    ranks = sorted(result.offsets_us)
    return pl.DataFrame(
        {"rank": ranks, "offset_us": [result.offsets_us[r] for r in ranks]},
        schema={"rank": pl.Int32, "offset_us": pl.Float64},
    )


# `audit`: JSON ``ok``, ``checks``, ``error_bars`` (stable keys); tables the checks (the
# default), the error bars, the clock offsets and the verdict.
ONE: Forms[Audit] = Forms(
    markdown=audit_markdown,
    json=lambda r, **_: audit_record(r),
    tables={
        "checks": "checks",
        "error_bars": _error_bars_table,
        "offsets": _offsets_table,
        "figures": lambda r, **_: pl.DataFrame({"ok": [r.ok]}),
    },
    command="audit",
)
# `audit` of a trace, a folder of ranks (one result) or a capture folder (one per variant).
AUDIT = labelled(ONE, nested_markdown=audit_markdown)
