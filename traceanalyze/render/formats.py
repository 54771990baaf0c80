"""The one place that chooses by output format: a registry of formats and of result renderers.

A format is one row of :data:`WRITERS`: how a result's JSON value, tables or markdown become
the text (or bytes) written. A result is one :class:`Forms`, defined beside its markdown
renderer: its markdown, its JSON value (a frame, a mapping or a list) and its named tables,
each following the schema its command declares (:mod:`traceanalyze.tables`), which CSV and
Parquet write. So a new format is one row here and a new result one ``Forms``; no renderer or
command compares format names (tests/test_layering.py checks it).

>>> TABLE.render(pl.DataFrame({"a": [1]}), "csv")
'a\\n1\\n'
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import polars as pl

from traceanalyze.errors import UsageError
from traceanalyze.names import with_readable_names
from traceanalyze.render.headings import heading
from traceanalyze.render.table import markdown_table, to_csv, to_json, to_parquet
from traceanalyze.tables import VARIANT, conform, table_name

R = TypeVar("R")
Labelled = Sequence[tuple[str | None, R]]
# Where a result's table comes from: the name of its frame attribute, or a function of the
# result and the rendering options.
TableSource = str | Callable[..., pl.DataFrame]


def _itself(result: Any, **_options: Any) -> Any:
    return result


def _one_table() -> dict[str, TableSource]:
    return {"": _itself}


@dataclass(frozen=True)
class Forms(Generic[R]):
    """One result's renderers: ``markdown`` (for people), ``json`` (its JSON value) and its
    ``tables`` (view -> the table; the first is the default), which CSV and Parquet write and
    JSON writes where a table is chosen. Tables follow the schemas ``command`` declares
    (:mod:`traceanalyze.tables`). ``choose`` is the rendering option that names the table
    (``table`` for --table, ``by`` for --by). Each renderer is called with the result and the
    command's rendering options (``full_names``, ``top``, ...) and ignores those it has no
    use for."""

    markdown: Callable[..., str]
    json: Callable[..., Any] = _itself
    tables: Mapping[str, TableSource] = field(default_factory=_one_table)
    command: str = ""
    choose: str = "table"
    # Formats this result cannot be written in, with the line saying what to use instead.
    refused: Mapping[str, str] = field(default_factory=dict)
    # The forms of one result, where these are of (label, result) pairs (:func:`labelled`).
    each: Forms[Any] | None = None

    def render(self, result: R, fmt: str, **options: Any) -> str | bytes:
        """``result`` written in ``fmt`` (one of :data:`FORMATS`)."""
        if fmt in self.refused:
            raise UsageError(self.refused[fmt])
        return WRITERS[fmt](self, result, options)

    def view(self, options: Mapping[str, Any]) -> str:
        """The view ``options`` choose (the default where they choose none)."""
        chosen = options.get(self.choose)
        if chosen is None:
            return next(iter(self.tables))
        if chosen not in self.tables:
            raise UsageError(
                f"{self.command or 'this result'} has no table {chosen!r}",
                None,
                f"Use one of: {', '.join(self.tables)}.",
            )
        return str(chosen)

    def table(self, result: R, **options: Any) -> pl.DataFrame:
        """The table ``options`` choose, as its schema declares it."""
        view = self.view(options)
        source = self.tables[view]
        frame = getattr(result, source) if isinstance(source, str) else source(result, **options)
        return conform(frame, table_name(self.command, view)) if self.command else frame

    def chosen(self, options: Mapping[str, Any]) -> bool:
        """Whether ``options`` name a table with --table (JSON then writes that table)."""
        return self.choose == "table" and options.get("table") is not None


def _whole(options: dict[str, Any]) -> dict[str, Any]:
    """``options`` for the markdown of a whole answer: without --table's None (no table
    chosen), which the answers' markdown functions do not take."""
    return {k: v for k, v in options.items() if not (k == "table" and v is None)}


def _json(forms: Forms[Any], result: Any, options: dict[str, Any]) -> str:
    if forms.chosen(options):
        return to_json(forms.table(result, **options))
    return to_json(forms.json(result, **options))


# Format -> how a result's Forms become that format's text (bytes for Parquet); its keys are
# --format's choices.
WRITERS: dict[str, Callable[[Forms[Any], Any, dict[str, Any]], str | bytes]] = {
    "md": lambda forms, result, options: (
        shown_table(forms.table(result, **options), **options)
        if forms.chosen(options)
        else forms.markdown(result, **_whole(options))
    ),
    "json": _json,
    "csv": lambda forms, result, options: to_csv(forms.table(result, **options)),
    "parquet": lambda forms, result, options: to_parquet(forms.table(result, **options)),
}
FORMATS = tuple(WRITERS)

# The format for people: a terminal's default, and what a notebook shows.
MARKDOWN = "md"
# Whether a format is read by people (markdown: it links the charts written beside its file
# and carries the warnings) rather than by programs (JSON, CSV, Parquet).
FOR_PEOPLE: dict[str, bool] = {"md": True, "json": False, "csv": False, "parquet": False}
# Whether a format is written as bytes, which only a file can take.
BINARY: dict[str, bool] = {"md": False, "json": False, "csv": False, "parquet": True}


def refusal(forms: Forms[Any], fmt: str) -> str | None:
    """Why ``forms``' result cannot be written as ``fmt`` (None: it can)."""
    return forms.refused.get(fmt)


def shown_table(
    frame: pl.DataFrame, *, full_names: bool = False, empty: str = "No rows.", **_options: Any
) -> str:
    """A result table for people: readable kernel names unless ``full_names``, headings from
    the keys; ``empty``, a line saying why, instead of a table without rows."""
    if not frame.height:
        return empty + "\n"
    shown = frame if full_names else with_readable_names(frame)
    return markdown_table(shown.rename({c: heading(c) for c in shown.columns}))


# A frame as it is: JSON rows, CSV table, markdown table (no declared schema: a frame the
# library already conformed, or one a caller built).
TABLE: Forms[pl.DataFrame] = Forms(markdown=shown_table)


def query_table(frame: pl.DataFrame, **_options: Any) -> str:
    """A SQL query's result for people: its columns under the query's own names and its
    values as they are (numbers with thousands separators, floats rounded), never a heading
    or unit read into a column the user named (``count(*) AS bytes`` is a count, not a size).
    A text ``name`` column is shortened like every table's kernel names (CSV, JSON and
    Parquet keep them whole)."""
    if not frame.height:
        return "No rows.\n"
    names = frame.schema.get("name") == pl.String
    return markdown_table(with_readable_names(frame) if names else frame, units=False)


# A SQL query's result: JSON rows, CSV table, markdown with the query's column names.
QUERY: Forms[pl.DataFrame] = Forms(markdown=query_table)


def table_forms(command: str, views: Sequence[str]) -> Forms[pl.DataFrame]:
    """The forms of a table command's frame (its ``--by`` view already chosen)."""
    return Forms(
        markdown=shown_table,
        tables={view: _itself for view in views},
        command=command,
        choose="by",
    )


def figures_row(result: Any, names: Sequence[str]) -> pl.DataFrame:
    """One row of ``result``'s scalar fields ``names`` (a result's ``figures`` table): text
    for enumerations, lists for tuples (a result's notes)."""
    return pl.DataFrame([{n: _plain(getattr(result, n)) for n in names}], infer_schema_length=None)


def _plain(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return str(value)
    return list(value) if isinstance(value, tuple) else value


def labelled_table(results: Labelled[R], table: Callable[[R], pl.DataFrame]) -> pl.DataFrame:
    """``table`` of each result in one frame, with a leading ``variant`` column for labelled
    ones."""
    frames = [
        table(r) if label is None else table(r).select(pl.lit(label).alias(VARIANT), pl.all())
        for label, r in results
    ]
    return pl.concat(frames, how="diagonal_relaxed")


def labelled(
    one: Forms[R],
    *,
    nested_markdown: Callable[..., str] | None = None,
    rows_as_json: bool = False,
) -> Forms[Labelled[R]]:
    """The forms of (label, result) pairs, one per trace (label None: a single trace) given
    those of one result: JSON one object for one trace, else a list of objects each with
    ``variant`` first (``rows_as_json``: the default table's rows instead); each table the
    result's table of each trace, with a leading ``variant`` column for several; markdown one
    section per trace under a ``## label`` heading (none for a single unlabelled trace),
    written by ``nested_markdown(result, nested=..., **options)``, told whether it sits under
    one, else by ``one``'s markdown."""
    section = nested_markdown or (lambda r, nested, **options: one.markdown(r, **options))

    def as_json(results: Labelled[R], **options: Any) -> Any:
        if rows_as_json:
            return labelled_table(results, lambda r: one.table(r, **options))
        records = [one.json(r, **options) for _, r in results]
        records = [
            record if label is None else {VARIANT: label, **record}
            for (label, _), record in zip(results, records, strict=True)
        ]
        return records[0] if len(records) == 1 else records

    def as_markdown(results: Labelled[R], **options: Any) -> str:
        return "\n".join(
            (f"## {label}\n\n" if label is not None else "")
            + section(r, nested=label is not None, **options)
            for label, r in results
        )

    def stacked(view: str) -> Callable[..., pl.DataFrame]:
        return lambda results, **options: labelled_table(
            results, lambda r: one.table(r, **{**options, one.choose: view})
        )

    return Forms(
        markdown=as_markdown,
        json=as_json,
        tables={view: stacked(view) for view in one.tables},
        command=one.command,
        choose=one.choose,
        refused=one.refused,
        each=one,
    )
