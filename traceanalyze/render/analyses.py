"""Renderers for the single-trace analyses: a result in, a ``str`` out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl

from traceanalyze.names import with_readable_names
from traceanalyze.render.headings import heading
from traceanalyze.render.table import (
    markdown_record,
    markdown_table,
    prose_number,
    to_csv,
    to_json,
)


def render_table(
    frame: pl.DataFrame, fmt: str, *, full_names: bool = False, empty: str = "No rows."
) -> str:
    """A result table: markdown (readable kernel names unless ``full_names``; ``empty``, a line
    saying why, instead of a table without rows), JSON or CSV."""
    if fmt == "json":
        return to_json(frame)
    if fmt == "csv":
        return to_csv(frame)
    if not frame.height:
        return empty + "\n"
    shown = frame if full_names else with_readable_names(frame)
    return markdown_table(shown.rename({c: heading(c) for c in shown.columns}))


def render_record(record: Mapping[str, Any], fmt: str) -> str:
    if fmt == "json":
        return to_json(record)
    if fmt == "csv":
        return to_csv(record)
    return markdown_record(record)


def render_records(records: Sequence[Mapping[str, Any]], fmt: str) -> str:
    """One record as it is; several (one per variant) as a JSON list, or one markdown section
    per variant."""
    if len(records) == 1:
        return render_record(records[0], fmt)
    if fmt == "json":
        return to_json(records)
    if fmt == "csv":
        return "".join(to_csv(r) for r in records)
    return "\n".join(f"## {r['variant']}\n\n{markdown_record(r)}" for r in records)


def render_check(results: pl.DataFrame, fmt: str) -> str:
    if fmt != "md":
        return render_table(results, fmt)
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


def render_iterations(table: pl.DataFrame, notes: list[str], fmt: str) -> str:
    """The `iterations` table; in markdown its notes follow it as a list."""
    if fmt != "md":
        return render_table(table, fmt)
    listed = "".join(f"- {line}\n" for line in notes)
    return render_table(table, fmt) + ("\n" + listed if listed else "")
