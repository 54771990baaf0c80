"""Renderers for the single-trace analyses: a result in, a ``str`` out."""

from __future__ import annotations

from typing import Any

import polars as pl

from traceanalyze.names import with_readable_names
from traceanalyze.render.table import markdown_record, markdown_table, to_csv, to_json


def render_table(frame: pl.DataFrame, fmt: str, *, full_names: bool = False) -> str:
    """A result table: markdown (readable kernel names unless ``full_names``), JSON or CSV."""
    if fmt == "json":
        return to_json(frame)
    if fmt == "csv":
        return to_csv(frame)
    return markdown_table(frame if full_names else with_readable_names(frame))


def render_record(record: dict[str, Any], fmt: str) -> str:
    if fmt == "json":
        return to_json(record)
    if fmt == "csv":
        return to_csv(record)
    return markdown_record(record)


def render_check(results: pl.DataFrame, fmt: str) -> str:
    if fmt != "md":
        return render_table(results, fmt)
    lines = [
        f"{'held  ' if held else 'BROKEN'}  {expectation}   (measured {measured:g})"
        for expectation, measured, held in results.rows()
    ]
    broken = int((~results["held"]).sum())
    verdict = "all expectations held" if broken == 0 else f"{broken} of {results.height} broken"
    return "\n".join([*lines, verdict]) + "\n"
