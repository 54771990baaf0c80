"""Renderers for tables (Polars frames) and records (dicts): markdown, JSON and CSV.

Pure: a value in, a ``str`` out. Machine-readable output keeps keys and column names exactly
as the analyses name them; markdown rounds floats for people.

CSV is for machines and sheets: plain numbers (``1075.585667``, full precision, no thousands
separator; a float column's whole numbers as ``3.0``, so it reads back as floats on every
trace), ``true``/``false``, an empty field for a missing value. A table's columns depend on
the table alone, never on the data (its declared schema: :mod:`traceanalyze.tables`): a
frame's struct column ``c`` becomes the columns ``c.<field>`` (its fields are part of its
type), and a list column is one field, its items joined by ``;`` (``cudaLaunchKernel;
cudaGraphLaunch``), never ``c.0``, ``c.1`` for as many items as one trace happens to have.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl

from traceanalyze.units import byte_size, duration

# The most decimal places a number is written with; smaller magnitudes read as 0.000000.
_MAX_DECIMALS = 6
# Control characters (C0, DEL, C1) in names (a kernel or op name is whatever the program
# said) are written as \xNN: raw, an ESC or a NUL would drive the terminal or end the text.
# Line breaks and tabs are left to the format (CSV quotes them; markdown makes them spaces).
_ESCAPED = {
    code: f"\\x{code:02x}"
    for code in (*range(0x20), *range(0x7F, 0xA0))
    if chr(code) not in "\n\r\t"
}
# Joins a list's items in one CSV field (a comma would need quoting in every sheet).
LIST_SEPARATOR = ";"


def markdown_table(frame: pl.DataFrame, digits: int = 2, *, units: bool = True) -> str:
    """A GitHub-flavoured markdown table for people: numbers right-aligned, floats rounded,
    byte counts in KiB/MiB/GiB, columns of whole numbers without decimals. ``units=False``
    reads nothing into the column names (a SQL query's own columns: no byte sizes, shares
    rounded like any number), so a column is written as the plain number it holds."""
    if not frame.width:
        return "_(no columns)_\n"
    header = "| " + " | ".join(frame.columns) + " |"
    align = "|" + "|".join(_alignment(dtype) for dtype in frame.dtypes) + "|"
    formats = [_column_format(frame[c], digits, units=units) for c in frame.columns]
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
    lines += [
        f"| {_cell(key, digits)} | {_record_cell(key, value, digits)} |"
        for key, value in record.items()
    ]
    return "\n".join(lines) + "\n"


def to_json(value: pl.DataFrame | Mapping[str, Any] | Sequence[Any]) -> str:
    """JSON with null where a figure is missing or not a number (NaN and infinities are not
    JSON)."""
    if isinstance(value, pl.DataFrame):
        value = value.to_dicts()
    return json.dumps(_finite(value), indent=2, default=_json_default, allow_nan=False) + "\n"


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value


def to_csv(frame: pl.DataFrame) -> str:
    """A table as CSV: struct columns as ``column.field`` columns, lists as one field; every
    value written in its column's type (a float column's whole numbers as ``3.0``), so that a
    column reads back as one type whatever the trace."""
    flat = _flat_columns(frame)
    # Missing is an empty field: NaN (0/0 somewhere) is missing too, not the text "NaN".
    floats = [c for c, t in flat.schema.items() if t.is_float()]
    return flat.with_columns(pl.col(floats).fill_nan(None), _escaped(pl.col(pl.String))).write_csv()


def to_parquet(frame: pl.DataFrame) -> bytes:
    """A table as a Parquet file's bytes (its schema inside, nested columns as they are)."""
    buffer = io.BytesIO()
    frame.write_parquet(buffer)
    return buffer.getvalue()


def _record_cell(key: str, value: Any, digits: int) -> str:
    """A record's value; a long time in microseconds also in a readable unit."""
    whole = isinstance(value, float) and value.is_integer() and abs(value) < 1e15
    text = _cell(round(value) if whole else value, digits)
    if "_us" in key and isinstance(value, (int, float)) and abs(value) >= 1000:
        text += f" ({duration(float(value))})"
    return text


def _column_format(column: pl.Series, digits: int, *, units: bool = True) -> Any:
    """How one column's cells are written: one number format for the whole column (no ``1``
    beside ``1.00``, no ``0.404`` beside ``1.13``); ``units``: byte counts and shares known
    by their column's name."""
    if units and "bytes" in column.name and column.dtype.is_numeric():
        return lambda value: "" if value is None else byte_size(float(value))
    if column.dtype.is_float():
        known = column.drop_nulls().drop_nans()
        share = units and _is_share(
            column.name
        )  # always ``digits`` places, even when all are whole
        whole = known.len() and (known == known.round(0)).all() and known.abs().max() < 1e15  # type: ignore[operator]
        if whole and not share:
            return lambda value: _cell(value if value is None else round(value), digits)
        smallest = None if share else known.abs().filter(known != 0).min()
        places = _decimals(smallest, digits)  # type: ignore[arg-type]
        return lambda value: _cell(value, digits) if value is None else _fixed(value, places)
    return lambda value: _cell(value, digits)


def _decimals(smallest: float | None, digits: int) -> int:
    """Decimal places that show ``smallest`` (the column's smallest non-zero magnitude) with
    two significant digits, ``digits`` at least and ``_MAX_DECIMALS`` at most: 0.095 beside
    1.06 makes the column 1.061 and 0.095, a 0.40 speed-up keeps two places."""
    if smallest is None or smallest >= 1:
        return digits
    return min(max(digits, 1 - math.floor(math.log10(smallest))), _MAX_DECIMALS)


def _is_share(name: str) -> bool:
    """Shares and percentages are rounded alike everywhere: ``digits`` places, whatever the
    smallest share in the column."""
    return "pct" in name or "%" in name or "share" in name


def _fixed(value: float, places: int) -> str:
    """A number in fixed notation with thousands separators (never 1.2e+15 nor 3.6e-03)."""
    return "" if math.isnan(value) else f"{value:,.{places}f}"


def _flat_columns(frame: pl.DataFrame) -> pl.DataFrame:
    """Struct columns as one column per field, list columns as one field, until none is
    nested."""
    columns: list[pl.Expr] = []
    for column, dtype in frame.schema.items():
        if isinstance(dtype, pl.Struct):
            columns += [
                pl.col(column).struct.field(f.name).alias(f"{column}.{f.name}")
                for f in dtype.fields
            ]
        elif isinstance(dtype, (pl.List, pl.Array)):
            columns.append(_list_field(column, dtype))
        else:
            columns.append(pl.col(column))
    flat = frame.select(columns)
    return flat if flat.schema == frame.schema else _flat_columns(flat)


def _list_field(column: str, dtype: pl.List | pl.Array) -> pl.Expr:
    """A list column as one string field, its items joined (struct items as JSON)."""
    nested = isinstance(dtype.inner, pl.Struct)
    item = pl.element().struct.json_encode() if nested else pl.element().cast(pl.String)
    items = pl.col(column).cast(pl.List(dtype.inner)).list.eval(item)
    return items.list.join(LIST_SEPARATOR).alias(column)


def _alignment(dtype: pl.DataType) -> str:
    return "---:" if dtype.is_numeric() else "---"


def number_cell(value: float, digits: int = 2) -> str:
    """A number as the markdown tables write it (a sentence quoting a table says the same)."""
    return _cell(value, digits)


def prose_number(value: float) -> str:
    """A figure in a sentence: a whole number as an integer with thousands separators
    (``1,234,567 kernels``, never ``1.23457e+06``), any other as the tables write it."""
    return f"{round(value):,}" if float(value).is_integer() else number_cell(value)


def _cell(value: Any, digits: int) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        if math.isnan(value):
            return ""
        # Below 1, two significant digits: 0.096 ms or a 0.0036 error must not read as
        # 0.00. Fixed notation always: a sheet or a reader takes 1.2e+15 for a typo.
        return _fixed(value, _decimals(abs(value) or None, digits))
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, Mapping):
        return ", ".join(f"{k}: {_cell(v, digits)}" for k, v in _whole_counts(value).items())
    if isinstance(value, (list, tuple)):
        return ", ".join(_cell(v, digits) for v in value)
    text = str(value).translate(_ESCAPED).replace("|", "\\|")
    return text.replace("\r\n", " ").replace("\n", " ").replace("\r", " ").replace("\t", " ")


def _whole_counts(mapping: Mapping[Any, Any]) -> Mapping[Any, Any]:
    """A mapping whose numbers are all whole (counts per iteration that came out even:
    ``gemm: 2.0``) with them as integers (``gemm: 2``, never ``2.00``); any other as it is,
    so one map keeps one number format."""
    numbers = [v for v in mapping.values() if isinstance(v, float)]
    if not numbers or not all(
        math.isfinite(v) and v.is_integer() and abs(v) < 1e15 for v in numbers
    ):
        return mapping
    return {k: round(v) if isinstance(v, float) else v for k, v in mapping.items()}


def _escaped(text: pl.Expr) -> pl.Expr:
    """String columns with their control characters written as ``\\xNN``."""
    return text.str.replace_many([chr(c) for c in _ESCAPED], list(_ESCAPED.values()))


def _json_default(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return str(value)
