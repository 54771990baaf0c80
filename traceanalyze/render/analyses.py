"""Renderers for the single-trace analyses: each result's forms (see render/formats.py)."""

from __future__ import annotations

from typing import Any

import polars as pl

from traceanalyze.analyses.summary import Summary
from traceanalyze.render.formats import Forms, Labelled, shown_table
from traceanalyze.render.table import markdown_record, prose_number, to_csv


def _summaries_markdown(results: Labelled[Summary], **_options: Any) -> str:
    """One record as it is; several (one per variant) as one section per variant."""
    if len(results) == 1:
        return markdown_record(results[0][1])
    return "\n".join(f"## {label}\n\n{markdown_record(s)}" for label, s in results)


# `summary`: one record as it is; several (one per variant, each with its ``variant`` key) as a
# JSON list, one key/value CSV block each, or one markdown section each.
SUMMARIES: Forms[Labelled[Summary]] = Forms(
    markdown=_summaries_markdown,
    json=lambda results, **_: results[0][1] if len(results) == 1 else [s for _, s in results],
    csv=lambda results, **_: "".join(to_csv(s) for _, s in results),
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
CHECK: Forms[pl.DataFrame] = Forms(markdown=check_markdown)

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
    csv=lambda result, **_: result[0],
)
