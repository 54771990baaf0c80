"""Rendering `info` records."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import polars as pl

from traceanalyze.render.formats import Forms
from traceanalyze.render.table import markdown_record

Records = Sequence[dict[str, Any]]
# Whose trace a row of `info`'s tables is: the variant of a capture folder, and the file.
_WHOSE = ("variant", "file")


def info_markdown(records: Records, **_options: Any) -> str:
    """One section per trace, headed by its file."""
    return "\n".join(f"## {r['file']}\n\n{markdown_record(r)}" for r in records)


def info_traces(records: Records, **_options: Any) -> pl.DataFrame:
    """One row per trace: every key but ``event_counts`` (whose keys are data: its own
    table); ``iteration_source`` as text."""
    rows = [
        {k: str(v) if k == "iteration_source" else v for k, v in r.items() if k != "event_counts"}
        for r in records
    ]
    return pl.DataFrame(rows, infer_schema_length=None)


def info_event_counts(records: Records, **_options: Any) -> pl.DataFrame:
    """One row per trace and event category, the most frequent first."""
    rows = [
        {**{k: r[k] for k in _WHOSE if k in r}, "category": category, "events": count}
        for r in records
        for category, count in r["event_counts"].items()
    ]
    return pl.DataFrame(rows, infer_schema_length=None)


def info_json(records: Records, **_options: Any) -> list[dict[str, Any]]:
    """A list of records, each of its declared types (``event_counts`` a mapping of
    category -> events, whose keys are data)."""
    rows = INFO.table(records).to_dicts()
    return [
        {key: record[key] if key == "event_counts" else row[key] for key in record}
        for row, record in zip(rows, records, strict=True)
    ]


# `info`: JSON a list of records (one per trace); tables one row per trace (the default) and
# one per trace and event category; markdown sections.
INFO: Forms[Records] = Forms(
    markdown=info_markdown,
    json=info_json,
    tables={"traces": info_traces, "event_counts": info_event_counts},
    command="info",
)
