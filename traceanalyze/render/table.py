"""Renderers for tables (Polars frames) and records (dicts): markdown, JSON and CSV.

Pure: a value in, a ``str`` out. Machine-readable output keeps keys and column names exactly
as the analyses name them; markdown rounds floats for people.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl

FORMATS = ("md", "json", "csv")


def markdown_table(frame: pl.DataFrame, digits: int = 2) -> str:
    """A GitHub-flavoured markdown table; numbers right-aligned, floats rounded."""
    if not frame.width:
        return "_(no columns)_\n"
    header = "| " + " | ".join(frame.columns) + " |"
    align = "|" + "|".join(_alignment(dtype) for dtype in frame.dtypes) + "|"
    rows = ["| " + " | ".join(_cell(value, digits) for value in row) + " |" for row in frame.rows()]
    if not rows:
        rows = ["| " + " | ".join("" for _ in frame.columns) + " |"]
    return "\n".join([header, align, *rows]) + "\n"


def markdown_record(record: Mapping[str, Any], digits: int = 2) -> str:
    """A two-column key/value markdown table; nested mappings are written inline."""
    lines = ["| key | value |", "|---|---|"]
    lines += [f"| {key} | {_cell(value, digits)} |" for key, value in record.items()]
    return "\n".join(lines) + "\n"


def to_json(value: pl.DataFrame | Mapping[str, Any] | Sequence[Any]) -> str:
    if isinstance(value, pl.DataFrame):
        value = value.to_dicts()
    return json.dumps(value, indent=2, default=_json_default, allow_nan=False) + "\n"


def to_csv(value: pl.DataFrame | Mapping[str, Any]) -> str:
    if isinstance(value, pl.DataFrame):
        flat = value.select(
            pl.col(c).cast(pl.String) if isinstance(t, (pl.List, pl.Struct)) else pl.col(c)
            for c, t in value.schema.items()
        )
        return flat.write_csv()
    buffer = io.StringIO()
    buffer.write("key,value\n")
    for key, item in value.items():
        buffer.write(f"{_csv_field(key)},{_csv_field(_cell(item, 6))}\n")
    return buffer.getvalue()


def _alignment(dtype: pl.DataType) -> str:
    return "---:" if dtype.is_numeric() else "---"


def _cell(value: Any, digits: int) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        if math.isnan(value):
            return ""
        return f"{value:,.{digits}f}" if abs(value) < 1e15 else f"{value:.3e}"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, Mapping):
        return ", ".join(f"{k}: {_cell(v, digits)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return ", ".join(_cell(v, digits) for v in value)
    return str(value).replace("|", "\\|").replace("\n", " ")


def _csv_field(text: str) -> str:
    if any(ch in text for ch in ',"\n'):
        return '"' + text.replace('"', '""') + '"'
    return text


def _json_default(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return str(value)
