"""Rendering `info` records."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from traceanalyze.render.table import markdown_record, records_csv, to_json


def render_info(records: Sequence[dict[str, Any]], fmt: str) -> str:
    if fmt == "json":
        return to_json(list(records))
    if fmt == "csv":
        return records_csv(records)  # one row per trace
    sections = [f"## {r['file']}\n\n{markdown_record(r)}" for r in records]
    return "\n".join(sections)
