"""The one place that chooses by output format: a registry of formats and of result renderers.

A format is one row of :data:`WRITERS`: how a result's JSON value, CSV table or markdown
becomes the text written. A result is one :class:`Forms`, defined beside its markdown renderer:
its markdown, its JSON value (a frame, a mapping or a list) and its CSV table (a frame or a
record). So a new format is one row here and a new result one ``Forms``; no renderer or
command compares format names (tests/test_layering.py checks it).

>>> TABLE.render(pl.DataFrame({"a": [1]}), "csv")
'a\\n1\\n'
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import polars as pl

from traceanalyze.errors import UsageError
from traceanalyze.names import with_readable_names
from traceanalyze.render.headings import heading
from traceanalyze.render.table import markdown_table, to_csv, to_json

R = TypeVar("R")
# A result's CSV: a frame (its table), a record (key,value rows), or text already written
# where the output is not one table (several records, one key/value block each).
CsvValue = pl.DataFrame | Mapping[str, Any] | str
Labelled = Sequence[tuple[str | None, R]]


def _itself(result: Any, **_options: Any) -> Any:
    return result


@dataclass(frozen=True)
class Forms(Generic[R]):
    """One result's renderers, one per form: ``markdown`` (for people), ``json`` (its JSON
    value) and ``csv`` (its table). Each is called with the result and the command's rendering
    options (``full_names``, ``top``, ...) and ignores those it has no use for."""

    markdown: Callable[..., str]
    json: Callable[..., Any] = _itself
    csv: Callable[..., CsvValue] = _itself
    # Formats this result cannot be written in, with the line saying what to use instead.
    refused: Mapping[str, str] = field(default_factory=dict)

    def render(self, result: R, fmt: str, **options: Any) -> str:
        """``result`` written in ``fmt`` (one of :data:`FORMATS`)."""
        if fmt in self.refused:
            raise UsageError(self.refused[fmt])
        return WRITERS[fmt](self, result, options)


def _csv_text(value: CsvValue) -> str:
    return value if isinstance(value, str) else to_csv(value)


# Format -> how a result's Forms become that format's text; its keys are --format's choices.
WRITERS: dict[str, Callable[[Forms[Any], Any, dict[str, Any]], str]] = {
    "md": lambda forms, result, options: forms.markdown(result, **options),
    "json": lambda forms, result, options: to_json(forms.json(result, **options)),
    "csv": lambda forms, result, options: _csv_text(forms.csv(result, **options)),
}
FORMATS = tuple(WRITERS)

# The format for people: a terminal's default, and what a notebook shows.
MARKDOWN = "md"
# Whether a format is read by people (markdown: it links the charts written beside its file
# and carries the warnings) rather than by programs (JSON, CSV).
FOR_PEOPLE: dict[str, bool] = {"md": True, "json": False, "csv": False}


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


# A frame as it is: JSON rows, CSV table, markdown table.
TABLE: Forms[pl.DataFrame] = Forms(markdown=shown_table)


def labelled_table(results: Labelled[R], table: Callable[[R], pl.DataFrame]) -> pl.DataFrame:
    """``table`` of each result in one frame, with a leading ``variant`` column for labelled
    ones (columns one result lacks are empty in its rows)."""
    frames = [
        table(r) if label is None else table(r).select(pl.lit(label).alias("variant"), pl.all())
        for label, r in results
    ]
    return pl.concat(frames, how="diagonal_relaxed")


def labelled(
    one: Forms[R],
    *,
    table: Callable[[R], pl.DataFrame],
    nested_markdown: Callable[..., str] | None = None,
    rows_as_json: bool = False,
) -> Forms[Labelled[R]]:
    """The forms of (label, result) pairs, one per trace (label None: a single trace) given
    those of one result: JSON one object for one trace, else a list of objects each with
    ``variant`` first (``rows_as_json``: the CSV's rows instead); CSV ``table`` of each, with
    a leading ``variant`` column for several; markdown one section per trace under a
    ``## label`` heading (none for a single unlabelled trace), written by
    ``nested_markdown(result, nested=..., **options)``, told whether it sits under one, else by
    ``one``'s markdown."""
    section = nested_markdown or (lambda r, nested, **options: one.markdown(r, **options))

    def as_json(results: Labelled[R], **options: Any) -> Any:
        if rows_as_json:
            return labelled_table(results, table)
        records = [one.json(r, **options) for _, r in results]
        records = [
            record if label is None else {"variant": label, **record}
            for (label, _), record in zip(results, records, strict=True)
        ]
        return records[0] if len(records) == 1 else records

    def as_markdown(results: Labelled[R], **options: Any) -> str:
        return "\n".join(
            (f"## {label}\n\n" if label is not None else "")
            + section(r, nested=label is not None, **options)
            for label, r in results
        )

    return Forms(
        markdown=as_markdown,
        json=as_json,
        csv=lambda results, **_: labelled_table(results, table),
        refused=one.refused,
    )
