"""One rule for commands that take several traces: how labelled results become one output.

JSON is one object for one trace, else a list of objects each with ``variant``; CSV is the
result's table, with a leading ``variant`` column for several; markdown is one section per
trace under a ``## label`` heading (none for a single unlabelled trace).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import polars as pl

from traceanalyze.render.table import to_csv, to_json

R = TypeVar("R")


def render_labelled(
    results: Sequence[tuple[str | None, R]],
    fmt: str,
    *,
    record: Callable[[R], dict[str, Any]],
    table: Callable[[R], pl.DataFrame],
    markdown: Callable[[R, bool], str],
) -> str:
    """``results`` as ``fmt``; ``markdown(result, nested)`` is told whether it sits under a
    variant's heading."""
    if fmt == "json":
        records = [
            record(r) if label is None else {"variant": label, **record(r)} for label, r in results
        ]
        return to_json(records[0] if len(records) == 1 else records)
    if fmt == "csv":
        frames = [
            table(r) if label is None else table(r).select(pl.lit(label).alias("variant"), pl.all())
            for label, r in results
        ]
        return to_csv(pl.concat(frames, how="diagonal_relaxed"))
    return "\n".join(
        (f"## {label}\n\n" if label is not None else "") + markdown(r, label is not None)
        for label, r in results
    )
