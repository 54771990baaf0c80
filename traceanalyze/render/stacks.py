"""Renderers for `stacks`: :class:`~traceanalyze.analyses.stacks.StacksResult` in, text out.

JSON and the default table are the rows (one per user frame, with ``variant`` first for
several traces); the ``copies`` table and the markdown add the memory copies and sets by line;
markdown says how to record stacks where the trace has none."""

from __future__ import annotations

from traceanalyze.analyses.stacks import NO_STACKS, StacksResult
from traceanalyze.render.formats import Forms, Labelled, labelled, shown_table

NO_ROWS = "No GPU activity or CPU operator inside the counted iterations."
NO_COPIES = "No memory copies or sets inside the counted iterations."


def stacks_markdown(result: StacksResult, level: int = 2) -> str:
    """The rows, then the memory copies and sets by line; one line for a trace without stacks."""
    if result.empty:
        return NO_STACKS + "\n"
    copies = shown_table(result.copies, empty=NO_COPIES)
    return (
        shown_table(result.rows, empty=NO_ROWS)
        + f"\n{'#' * level} Memory copies and sets by line\n\n{copies}"
    )


# `stacks`: JSON the rows (``variant`` first for several traces); tables the rows (the
# default) and the copies by line; markdown one section per trace.
STACKS: Forms[Labelled[StacksResult]] = labelled(
    Forms(markdown=stacks_markdown, tables={"rows": "rows", "copies": "copies"}, command="stacks"),
    nested_markdown=lambda r, nested, **_: stacks_markdown(r, level=3 if nested else 2),
    rows_as_json=True,
)
