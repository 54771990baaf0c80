"""The tables the commands write, each with one declared schema: its columns in order, each
with a dtype and a unit. JSON, CSV, Parquet and the library's DataFrames all follow it, on
every trace, with zero rows too, so tables from many traces concatenate.

A table is named by its command and view: ``kernels`` has the views ``kernel`` and ``op``
(``--by``), ``idle`` the tables ``causes``, ``by_stream``, ... (``--table``); a command with
one table is named by the command alone. The schemas themselves are data
(:mod:`traceanalyze.tables.declared`); :func:`conform` makes a frame follow one.

>>> conform(pl.DataFrame({"name": ["k"], "count": [3]}), "graphs").schema["count"]
Int64
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl

from traceanalyze.errors import AnalysisError, UsageError
from traceanalyze.tables.declared import DECLARED, Declared
from traceanalyze.tables.units import unit_of

# The column a folder of variants adds in front of each table: which trace the row is of.
VARIANT = "variant"
# The "option" of a table `sql` queries: it is named in the query's FROM.
FROM = "FROM"


@dataclass(frozen=True)
class Column:
    """One column of a table: its name (the JSON key), dtype and unit (from its name)."""

    name: str
    dtype: pl.DataType
    unit: str


@dataclass(frozen=True)
class Table:
    """A table a command writes: ``command``, ``view`` ('' for a command's only table), the
    option that picks it (``--by`` or ``--table``), what a row is, and its columns."""

    command: str
    view: str
    option: str
    doc: str
    columns: tuple[Column, ...]

    @property
    def name(self) -> str:
        return table_name(self.command, self.view)

    @property
    def schema(self) -> pl.Schema:
        return pl.Schema({c.name: c.dtype for c in self.columns})

    @property
    def selected_by(self) -> str:
        """How to get this table: the command and option (``idle --table syncs``), or for a
        table SQL reads, a query (``sql TRACE "SELECT * FROM gpu"``)."""
        if self.option == FROM:
            return f'{self.command} TRACE "SELECT * FROM {self.view}"'
        chosen = f" {self.option} {self.view}" if self.option else ""
        return f"{self.command}{chosen}"


def table_name(command: str, view: str) -> str:
    return f"{command}.{view}" if view else command


def _table(declared: Declared) -> Table:
    columns = tuple(
        Column(name, dtype, unit_of(name, dtype)) for name, dtype in declared.columns.items()
    )
    return Table(declared.command, declared.view, declared.option, declared.doc, columns)


TABLES: dict[str, Table] = {t.name: t for t in map(_table, DECLARED)}


def commands() -> list[str]:
    """Every command that writes tables, in the order they are declared."""
    return list(dict.fromkeys(t.command for t in TABLES.values()))


def tables_of(command: str) -> list[Table]:
    """The tables of ``command``, its default first."""
    found = [t for t in TABLES.values() if t.command == command]
    if not found:
        raise UsageError(
            f"no command {command!r} writes tables", None, f"Use one of: {', '.join(commands())}."
        )
    return found


def declared(name: str) -> Table:
    """The table ``name`` (``kernels.op``, ``idle.causes``, ``graphs``)."""
    try:
        return TABLES[name]
    except KeyError:
        raise UsageError(f"no table {name!r} is declared", None, _nearest(name)) from None


def _nearest(name: str) -> str:
    """The fix for an unknown table name: a command's own tables (``kernels`` ->
    ``kernels.kernel``, ``kernels.op``), else the closest names, else every table."""
    command = name.partition(".")[0]
    own = [t for t in TABLES if t.partition(".")[0] == command]
    close = own or difflib.get_close_matches(name, TABLES, n=5, cutoff=0.6)
    if close:
        return f"Did you mean {' or '.join(close)}?"
    return f"The tables are {', '.join(TABLES)}."


def conform(frame: pl.DataFrame, name: str) -> pl.DataFrame:
    """``frame`` as table ``name`` declares it: its columns in order, each cast to its dtype,
    a declared column the frame lacks all null; a leading ``variant`` column (a folder of
    variants) is kept. A column the table does not declare is an error: a table's columns
    never depend on the trace."""
    table = declared(name)
    schema = table.schema
    variant = VARIANT in frame.columns and VARIANT not in schema
    extra = [c for c in frame.columns if c not in schema and not (variant and c == VARIANT)]
    if extra:
        raise AnalysisError(
            f"table {name} has undeclared columns {extra}",
            fix="Declare them in traceanalyze/tables/declared.py",
        )
    lead = [pl.col(VARIANT).cast(pl.String)] if variant else []
    return frame.select(
        *lead,
        *(
            _cast(frame.schema[c], dtype, c) if c in frame.columns else pl.lit(None, dtype).alias(c)
            for c, dtype in schema.items()
        ),
    )


def _cast(have: pl.DataType, want: pl.DataType, name: str) -> pl.Expr:
    column = pl.col(name)
    if have == want:
        return column
    if isinstance(want, pl.Struct) and isinstance(have, pl.Struct):
        # Fields by name (a cast would pair them by position): missing ones are null.
        present = {f.name: f.dtype for f in have.fields}
        return pl.struct(
            column.struct.field(f.name).cast(f.dtype).alias(f.name)
            if f.name in present
            else pl.lit(None, f.dtype).alias(f.name)
            for f in want.fields
        ).alias(name)
    return column.cast(want)


def empty(name: str) -> pl.DataFrame:
    """Table ``name`` with no rows."""
    return pl.DataFrame(schema=declared(name).schema)


def csv_schema(name: str, *, variant: bool = False) -> dict[str, pl.DataType]:
    """The schema of table ``name``'s CSV as Polars reads it back: a struct's fields as
    ``column.field`` columns, a list as one text field (its items joined by ``;``)."""
    flat: dict[str, pl.DataType] = {VARIANT: pl.String()} if variant else {}
    for column, dtype in declared(name).schema.items():
        flat |= _flat(column, dtype)
    return flat


def _flat(column: str, dtype: Any) -> dict[str, pl.DataType]:
    if isinstance(dtype, pl.Struct):
        return {k: v for f in dtype.fields for k, v in _flat(f"{column}.{f.name}", f.dtype).items()}
    if isinstance(dtype, (pl.List, pl.Array)):
        return {column: pl.String()}
    return {column: dtype if isinstance(dtype, pl.DataType) else dtype()}


def schema_rows(tables: Sequence[Table]) -> pl.DataFrame:
    """The schema of ``tables`` as a table: one row per column (what `schema` writes)."""
    rows = [
        {
            "table": t.name,
            "selected_by": t.selected_by,
            "column": c.name,
            "dtype": str(c.dtype),
            "unit": c.unit,
        }
        for t in tables
        for c in t.columns
    ]
    return conform(pl.DataFrame(rows, schema=declared("schema").schema), "schema")


def table_docs() -> Mapping[str, str]:
    """Each table's one-line description, by name."""
    return {name: t.doc for name, t in TABLES.items()}
