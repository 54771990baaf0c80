"""Rendering `info` records."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from traceanalyze.render.formats import Forms
from traceanalyze.render.table import markdown_record, records_csv

Records = Sequence[dict[str, Any]]


def info_markdown(records: Records) -> str:
    """One section per trace, headed by its file."""
    return "\n".join(f"## {r['file']}\n\n{markdown_record(r)}" for r in records)


# `info`: JSON a list of records (one per trace); CSV one row per trace; markdown sections.
INFO: Forms[Records] = Forms(
    markdown=info_markdown,
    json=list,
    csv=records_csv,
)
