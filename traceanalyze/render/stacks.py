"""Renderers for `stacks`: :class:`~traceanalyze.analyses.stacks.StacksResult` in, text out.

JSON and CSV are the rows (one per user frame, with ``variant`` first for several traces);
markdown adds the memory copies and sets by line, or says how to record stacks."""

from __future__ import annotations

import polars as pl

from traceanalyze.analyses.stacks import NO_STACKS, StacksResult
from traceanalyze.render.analyses import render_table

NO_ROWS = "No GPU activity or CPU operator inside the counted iterations."
NO_COPIES = "No memory copies or sets inside the counted iterations."


def render_stacks(results: list[tuple[str | None, StacksResult]], fmt: str) -> str:
    """``results`` as ``fmt`` (see the module docstring)."""
    if fmt in ("json", "csv"):
        frames = [
            r.rows if label is None else r.rows.select(pl.lit(label).alias("variant"), pl.all())
            for label, r in results
        ]
        return render_table(pl.concat(frames, how="diagonal_relaxed"), fmt)
    return "\n".join(
        (f"## {label}\n\n" if label is not None else "")
        + stacks_markdown(result, level=3 if label is not None else 2)
        for label, result in results
    )


def stacks_markdown(result: StacksResult, level: int = 2) -> str:
    """The rows, then the memory copies and sets by line; one line for a trace without stacks."""
    if result.empty:
        return NO_STACKS + "\n"
    copies = render_table(result.copies, "md", empty=NO_COPIES)
    return (
        render_table(result.rows, "md", empty=NO_ROWS)
        + f"\n{'#' * level} Memory copies and sets by line\n\n{copies}"
    )
