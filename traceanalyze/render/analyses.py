"""Renderers for the single-trace analyses: each result's forms (see render/formats.py)."""

from __future__ import annotations

from typing import Any

import polars as pl

from traceanalyze.analyses.summary import Summary
from traceanalyze.render.formats import Forms, Labelled, labelled, shown_table
from traceanalyze.render.table import markdown_record, prose_number
from traceanalyze.tables import VARIANT, conform


def summary_row(summary: Summary) -> pl.DataFrame:
    """The summary as one row of its table: every key but ``launch_apis`` and
    ``audit_warnings`` (whose keys are data: their own tables) and ``variant`` (the labelled
    forms add it), the fixed mappings as struct columns."""
    record = {k: str(v) if k == "iteration_source" else v for k, v in summary.items()}
    for key in ("launch_apis", "audit_warnings", VARIANT):
        record.pop(key, None)
    return pl.DataFrame([record], infer_schema_length=None)


def summary_json(summary: Summary) -> dict[str, Any]:
    """The JSON object: the keys in the record's order, each value of its declared type."""
    row = conform(summary_row(summary), "summary.figures").row(0, named=True)
    row |= {
        "launch_apis": summary.launch_apis,
        "audit_warnings": summary.audit_warnings,
        VARIANT: summary.variant,
    }
    return {key: row[key] for key in summary}


def launch_api_rows(summary: Summary) -> pl.DataFrame:
    """``launch_apis`` as rows: each launch API with its launches per iteration."""
    apis = summary.launch_apis
    return pl.DataFrame(
        {"launch_api": list(apis), "launches_per_iter": list(apis.values())},
        schema={"launch_api": pl.String, "launches_per_iter": pl.Float64},
    )


def audit_warning_rows(summary: Summary) -> pl.DataFrame:
    """``audit_warnings`` as rows: each audit finding (check/finding) that moves the figures,
    with its warning (none where the trace was not audited or nothing was found)."""
    warnings = summary.audit_warnings or {}
    return pl.DataFrame(
        {"finding": list(warnings), "warning": list(warnings.values())},
        schema={"finding": pl.String, "warning": pl.String},
    )


def summary_markdown(summary: Summary, **_options: Any) -> str:
    """The record for people: categories the trace has, largest first; spreads shown only
    where the steps differ."""
    shown = dict(summary)
    for key in ("category_us", "category_count"):
        present = {k: v for k, v in shown[key].items() if v}
        shown[key] = dict(sorted(present.items(), key=lambda kv: -kv[1]))
    shown["spread_per_iter"] = {k: v for k, v in summary.spread_per_iter.items() if v is not None}
    return markdown_record(shown)


# `summary`: one record as it is; several (one per variant, each with its ``variant`` key) as a
# JSON list, one row each in its tables, or one markdown section each.
SUMMARIES: Forms[Labelled[Summary]] = labelled(
    Forms(
        markdown=summary_markdown,
        json=lambda s, **_: summary_json(s),
        tables={
            "figures": lambda s, **_: summary_row(s),
            "launch_apis": lambda s, **_: launch_api_rows(s),
            "audit_warnings": lambda s, **_: audit_warning_rows(s),
        },
        command="summary",
    ),
)


def check_markdown(results: pl.DataFrame, **_options: Any) -> str:
    """One line per expectation, held or BROKEN, with the measured value; then the verdict."""
    variants = results["variant"] if "variant" in results.columns else None
    lines = [
        f"{'held  ' if held else 'BROKEN'}  "
        + (f"{variants[i]}: " if variants is not None else "")
        + f"{expectation}   "
        + (
            "(no value in this trace)"
            if measured is None
            else f"(measured {prose_number(measured)})"
        )
        for i, (expectation, measured, held) in enumerate(
            results.select("expectation", "measured", "held").rows()
        )
    ]
    broken = int((~results["held"]).sum())
    verdict = "all expectations held" if broken == 0 else f"{broken} of {results.height} broken"
    return "\n".join([*lines, verdict]) + "\n"


# `check`: the table of expectations; in markdown one line each.
CHECK: Forms[pl.DataFrame] = Forms(markdown=check_markdown, command="check")

IterationTable = tuple[pl.DataFrame, list[str]]


def iterations_markdown(result: IterationTable, **_options: Any) -> str:
    """The `iterations` table, its notes following it as a list."""
    table, notes = result
    listed = "".join(f"- {line}\n" for line in notes)
    return shown_table(table) + ("\n" + listed if listed else "")


# `iterations`: the table and its notes (markdown only: JSON and CSV are the table).
ITERATIONS: Forms[IterationTable] = Forms(
    markdown=iterations_markdown,
    json=lambda result, **_: result[0],
    tables={"": lambda result, **_: result[0]},
    command="iterations",
)
