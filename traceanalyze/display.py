"""How a result shows itself in a notebook, a REPL or a log: a short ``repr`` and, in Jupyter,
the command's own markdown (and that markdown as HTML).

Results live in ``analyses/`` and must not import ``render/``; the facade
(:mod:`traceanalyze.api`) registers each result type's markdown renderer here instead, once.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from dataclasses import is_dataclass
from typing import Any

import polars as pl

# Result type -> its markdown, as the command writes it. Filled by traceanalyze.api.
MARKDOWN: dict[type, Callable[[Any], str]] = {}
# Result type -> one of its command's tables (None: the default) as a DataFrame. Filled by
# traceanalyze.api.
FRAMES: dict[type, Callable[[Any, str | None], pl.DataFrame]] = {}
_LONGEST_TEXT = 40  # characters of a text field shown in a repr before "..."


def markdown_of(result: object) -> str:
    """``result`` as the command's markdown, by the renderer registered for its type."""
    for kind in type(result).__mro__:
        if kind in MARKDOWN:
            return MARKDOWN[kind](result)
    raise TypeError(f"no markdown renderer is registered for {type(result).__name__}")


class ShortRepr:
    """A mixin for frozen dataclasses (declared with ``repr=False``): a one-line ``repr``
    naming each field's shape, never a whole table."""

    def __repr__(self) -> str:
        names: list[str] = list(getattr(self, "__dataclass_fields__", {}))
        parts = (f"{name}={short(getattr(self, name))}" for name in names)
        return f"{type(self).__name__}({', '.join(parts)})"


class Shown(ShortRepr):
    """A mixin for frozen result dataclasses (declared with ``repr=False``): a one-line
    ``repr``, Jupyter's table display, and the command's tables as DataFrames."""

    def to_frame(self, table: str | None = None) -> pl.DataFrame:
        """One of the command's tables (``table``: its --table or --by name; None: the
        default, what ``--format csv`` writes), as its schema declares it."""
        for kind in type(self).__mro__:
            if kind in FRAMES:
                return FRAMES[kind](self, table)
        raise TypeError(f"{type(self).__name__} has no tables")

    def _repr_markdown_(self) -> str:
        return markdown_of(self)

    def _repr_html_(self) -> str:
        return markdown_html(markdown_of(self))


def short(value: Any) -> str:
    """A field's value in a few characters: a frame's shape, a collection's length."""
    if isinstance(value, pl.DataFrame):
        return f"<{value.height}x{value.width} DataFrame>"
    if isinstance(value, (tuple, list, dict)):
        return f"<{len(value)} {type(value).__name__}>" if value else repr(value)
    if isinstance(value, str) and len(value) > _LONGEST_TEXT:
        return repr(value[: _LONGEST_TEXT - 3] + "...")
    if is_dataclass(value) and not isinstance(value, type):
        return f"<{type(value).__name__}>"
    return repr(value)


def markdown_html(text: str) -> str:
    """The subset of markdown the renderers write (headings, pipe tables, paragraphs, lists)
    as HTML: enough for a notebook to draw the tables."""
    out: list[str] = []
    table: list[str] = []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            table.append(line)
            continue
        if table:
            out.append(_table_html(table))
            table = []
        if line.startswith("#"):
            level = min(len(line) - len(line.lstrip("#")), 6)
            out.append(f"<h{level}>{html.escape(line.lstrip('#').strip())}</h{level}>")
        elif line.strip():
            out.append(f"<p>{html.escape(line)}</p>")
    return "\n".join(out)


def _table_html(lines: list[str]) -> str:
    def cells(line: str) -> list[str]:
        return [html.escape(c.strip()) for c in line.strip().strip("|").split("|")]

    header, *rows = [ln for ln in lines if not set(ln.replace(" ", "")) <= set("|-:")]
    head = "".join(f"<th>{c}</th>" for c in cells(header))
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in cells(r)) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
