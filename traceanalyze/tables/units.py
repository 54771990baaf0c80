"""A column's unit, read from its name: units are in the names (``_us``, ``_pct``, ``_bytes``,
``_per_iter``), so the rule is a table of name parts, not a second place to keep in step.

>>> unit_of("gpu_busy_us_per_iter", pl.Float64())
'µs per iteration'
>>> unit_of("share_of_gpu_activity_pct", pl.Float64())
'%'
>>> unit_of("name", pl.String())
''
"""

from __future__ import annotations

import polars as pl

# A word of a column's name (split at "_") -> the unit it means; the first found wins.
UNIT_WORDS: dict[str, str] = {
    "us": "µs",
    "ms": "ms",
    "ns": "ns",
    "pct": "%",
    "bytes": "bytes",
    "gbps": "GB/s",
    "tbps": "TB/s",
    "tflops": "TFLOP/s",
    "flops": "FLOP",
    "speedup": "ratio",
}
# Names whose unit the words above would get wrong.
UNIT_NAMES: dict[str, str] = {
    "intensity": "FLOP/byte",
    "relative_error": "ratio",
}
PER_ITERATION = "per_iter"


def unit_of(name: str, dtype: pl.DataType) -> str:
    """The unit of column ``name`` ('' for text, flags and plain counts; ``dtype`` says a
    column of text has none whatever its name)."""
    if not dtype.is_numeric() and not isinstance(dtype, (pl.List, pl.Struct)):
        return ""
    if name in UNIT_NAMES:
        return UNIT_NAMES[name]
    base = name.rsplit(".", 1)[-1]  # a struct's field: its own name says
    words = base.split("_")
    unit = next((UNIT_WORDS[w] for w in words if w in UNIT_WORDS), "")
    if PER_ITERATION in base:
        return f"{unit} per iteration".strip()
    return unit
