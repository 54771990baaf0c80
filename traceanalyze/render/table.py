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

from traceanalyze.units import byte_size, duration

FORMATS = ("md", "json", "csv")


def markdown_table(frame: pl.DataFrame, digits: int = 2) -> str:
    """A GitHub-flavoured markdown table for people: numbers right-aligned, floats rounded,
    byte counts in KiB/MiB/GiB, columns of whole numbers without decimals."""
    if not frame.width:
        return "_(no columns)_\n"
    header = "| " + " | ".join(frame.columns) + " |"
    align = "|" + "|".join(_alignment(dtype) for dtype in frame.dtypes) + "|"
    formats = [_column_format(frame[c], digits) for c in frame.columns]
    rows = [
        "| " + " | ".join(fmt(value) for fmt, value in zip(formats, row, strict=True)) + " |"
        for row in frame.rows()  # rendering the (small) result for people, not analysing
    ]
    if not rows:  # a table of blanks reads like a result; say there is none
        return "No rows.\n"
    return "\n".join([header, align, *rows]) + "\n"


def markdown_record(record: Mapping[str, Any], digits: int = 2) -> str:
    """A two-column key/value markdown table; nested mappings are written inline."""
    lines = ["| key | value |", "|---|---|"]
    lines += [f"| {key} | {_record_cell(key, value, digits)} |" for key, value in record.items()]
    return "\n".join(lines) + "\n"


def to_json(value: pl.DataFrame | Mapping[str, Any] | Sequence[Any]) -> str:
    if isinstance(value, pl.DataFrame):
        value = value.to_dicts()
    return json.dumps(value, indent=2, default=_json_default, allow_nan=False) + "\n"


def to_csv(value: pl.DataFrame | Mapping[str, Any]) -> str:
    if isinstance(value, pl.DataFrame):
        flat = value.select(_flat(c, t) for c, t in value.schema.items())
        return flat.write_csv()
    buffer = io.StringIO()
    buffer.write("key,value\n")
    for key, item in value.items():
        buffer.write(f"{_csv_field(key)},{_csv_field(_cell(item, 6))}\n")
    return buffer.getvalue()


def _flat(column: str, dtype: pl.DataType) -> pl.Expr:
    """A CSV-ready column: lists joined with ";", structs as JSON text."""
    if isinstance(dtype, pl.List):
        return pl.col(column).list.eval(pl.element().cast(pl.String)).list.join(";")
    if isinstance(dtype, pl.Struct):
        return pl.col(column).struct.json_encode()
    return pl.col(column)


def _record_cell(key: str, value: Any, digits: int) -> str:
    """A record's value; a long time in microseconds also in a readable unit."""
    whole = isinstance(value, float) and value.is_integer() and abs(value) < 1e15
    text = _cell(round(value) if whole else value, digits)
    if "_us" in key and isinstance(value, (int, float)) and abs(value) >= 1000:
        text += f" ({duration(float(value))})"
    return text


def _column_format(column: pl.Series, digits: int) -> Any:
    """How one column's cells are written."""
    if "bytes" in column.name and column.dtype.is_numeric():
        return lambda value: "" if value is None else byte_size(float(value))
    if column.dtype.is_float():
        known = column.drop_nulls().drop_nans()
        if known.len() and (known == known.round(0)).all() and known.abs().max() < 1e15:  # type: ignore[operator]
            return lambda value: _cell(value if value is None else round(value), digits)
    return lambda value: _cell(value, digits)


def _alignment(dtype: pl.DataType) -> str:
    return "---:" if dtype.is_numeric() else "---"


def _cell(value: Any, digits: int) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        if math.isnan(value):
            return ""
        if abs(value) >= 1e15:
            return f"{value:.3e}"
        # Below 1, significant digits: 0.0964 ms or a 3.59e-03 error must not read as 0.00.
        return f"{value:,.{digits}f}" if abs(value) >= 1 or value == 0 else f"{value:.3g}"
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
