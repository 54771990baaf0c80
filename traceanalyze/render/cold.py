"""Renderers for the cold-start comparison: a :class:`ColdSet` in, a ``str`` out."""

from __future__ import annotations

import polars as pl

from traceanalyze.analyses.cold.context import UNKNOWN_CACHES
from traceanalyze.analyses.cold.rules import CAUSES
from traceanalyze.analyses.cold.variants import DEFINITIONS, ColdSet
from traceanalyze.names import with_readable_names
from traceanalyze.render.formats import Forms
from traceanalyze.render.headings import heading
from traceanalyze.render.table import markdown_table
from traceanalyze.units import duration

VIEWS = ("op", "cause", "call", "variant")
TOP_OPERATORS = 10
OUTSIDE_OPERATORS = "(outside operators)"
COST_COLUMNS = (
    "variant", "cache_state", "calls", "first_call_us", "steady_us", "excess_us",
    "gpu_excess_us", "cudnn_planning_us", "top_cause",
)  # fmt: skip
CHECK_COLUMNS = (
    "variant", "timed_first_call_us", "timed_steady_us", "timed_excess_us",
    "timed_first_call_spread_pct", "excess_vs_timed_pct", "advantage_us", "advantage_source",
    "break_even_calls", "break_even_note",
)  # fmt: skip
PART_COLUMNS = (
    "side", "steady_call", "cause", "op_name", "first_call_us", "steady_us", "excess_us",
    "share_of_excess_pct", "break_even_calls",
)  # fmt: skip
CALL_COLUMNS = ("call", "name", "shape_index", "role", "cpu_us", "gpu_us", "wall_us")


def view_frame(result: ColdSet, view: str) -> pl.DataFrame:
    """The table one view shows: per cause and operator, per cause, per call or per variant."""
    frames = {"op": result.rows, "cause": result.causes, "call": result.calls}
    return frames.get(view, result.summary)


def cold_markdown(result: ColdSet, *, view: str | None = None, full_names: bool = False) -> str:
    """The table of ``view`` alone, or without ``view`` the whole comparison (per variant for a
    folder)."""
    if view is not None:
        return _keyed(view_frame(result, view), tuple(view_frame(result, view).columns))
    if result.summary.height == 1 and result.baseline is None:
        parts = [_variant_part(result, result.summary.row(0, named=True), full_names, level="")]
    else:
        rows = result.summary.to_dicts()
        parts = [_summary_tables(result)]
        parts += [_variant_part(result, row, full_names, level="### ") for row in rows]
    return "\n".join([*parts, _legend()])


def _view_rows(result: ColdSet, *, view: str | None = None, **_options: object) -> pl.DataFrame:
    return view_frame(result, view or "op")


# `cold`: JSON and CSV the rows of ``view`` (default ``op``); markdown that table alone, or
# without ``view`` the whole comparison.
COLD: Forms[ColdSet] = Forms(markdown=cold_markdown, json=_view_rows, csv=_view_rows)


def _legend() -> str:
    return "**Causes**\n\n" + "\n".join(f"- `{c}`: {d}." for c, d in CAUSES.items()) + "\n"


def cold_section(result: ColdSet) -> str:
    """The report's section: the summary tables, each variant's causes, the definitions."""
    parts = [
        "## Cold start\n",
        "Each variant's first call against its median steady call (calls found in the trace; "
        "the per-iteration figures above average over every call, the first included). "
        f"Break-even is against `{result.baseline}`.\n",
        _summary_tables(result),
    ]
    for row in result.summary.to_dicts():
        causes = result.causes.filter(pl.col("variant") == row["variant"])
        if causes.height:
            title = f"**`{row['variant']}` by cause** (each call compared, against its median "
            parts += [title + "steady call)\n", _parts_table(causes, False, ("call",))]
    parts.append("\n".join(f"- *{heading(k)}*: {v}." for k, v in DEFINITIONS.items()) + "\n")
    return "\n".join([*parts, _legend()])


def _summary_tables(result: ColdSet) -> str:
    summary = result.summary.filter(pl.col("status") == "ok")
    return "\n".join(
        [
            "**One-off cost of the first call** (trace)\n",
            _keyed(summary, COST_COLUMNS),
            f"**Checked against the capture's timing, and paid back** (baseline "
            f"`{result.baseline}`)\n",
            _keyed(summary, CHECK_COLUMNS),
        ]
    )


def _variant_part(result: ColdSet, row: dict[str, object], full_names: bool, level: str) -> str:
    label = row["variant"]
    mine = pl.col("variant") == label
    parts = [f"{level}`{label}`\n"] if level else []
    parts.append(_headline(row))
    calls = result.calls.filter(mine) if result.calls.height else result.calls
    for compared in _compared(result.causes.filter(mine), calls):
        parts += _compared_part(result, compared, full_names)
    if calls.height:
        parts += ["**Calls**\n", _keyed(calls, CALL_COLUMNS)]
    notes = [*result.notes.get(str(label), ()), *(n for n in (row["note"],) if n)]
    if notes:
        parts.append("\n".join(f"- {n}." for n in notes) + "\n")
    return "\n".join(parts)


def _compared(causes: pl.DataFrame, calls: pl.DataFrame) -> list[dict[str, object]]:
    """Each call compared with steady calls (call 1, each first call of a new shape)."""
    if not causes.height:
        return []
    keys = causes.select("variant", "rank", "call", "steady_calls").unique(maintain_order=True)
    return keys.join(calls.select("rank", "call", "role"), on=["rank", "call"]).to_dicts()


def _compared_part(result: ColdSet, compared: dict[str, object], full_names: bool) -> list[str]:
    key = (
        (pl.col("variant") == compared["variant"])
        & (pl.col("rank") == compared["rank"])
        & (pl.col("call") == compared["call"])
    )
    rows = result.rows.filter(key)
    top = rows.sort(pl.col("excess_us").abs(), descending=True).head(TOP_OPERATORS)
    steady = compared["steady_calls"]
    title = (
        f"Call {compared['call']} ({compared['role']}) against the median of its {steady} "
        f"steady call{'' if steady == 1 else 's'}"
    )
    return [
        f"**{title}, by cause**\n",
        _parts_table(result.causes.filter(key), full_names),
        f"**{title}, by cause and operator** (the {TOP_OPERATORS} largest differences)\n",
        _parts_table(top, full_names),
    ]


def _headline(row: dict[str, object]) -> str:
    caches = row["cache_state"] or UNKNOWN_CACHES
    if row["first_call_us"] is None:
        return f"No comparison: {row['note'] or row['status']}. Caches: {caches}.\n"
    first, steady, excess = (float(row[k]) for k in ("first_call_us", "steady_us", "excess_us"))  # type: ignore[arg-type]
    paid = (
        f"paid back after {row['break_even_calls']:,} calls"
        if row["break_even_calls"] is not None
        else f"break-even: {row['break_even_note']}"
    )
    timed = ""
    if row["timed_excess_us"] is not None:
        timed = (
            f" Timed without the profiler: {duration(float(row['timed_first_call_us']))} "  # type: ignore[arg-type]
            f"against {duration(float(row['timed_steady_us']))}, "  # type: ignore[arg-type]
            f"{duration(float(row['timed_excess_us']))} of one-off work."  # type: ignore[arg-type]
        )
    return (
        f"{row['calls']} calls ({row['call_source']}); caches: {caches}. The first call took "
        f"{duration(first)} on the CPU against {duration(steady)} for the median steady call: "
        f"{duration(excess)} of one-off work; {paid}.{timed}\n"
    )


def _parts_table(frame: pl.DataFrame, full_names: bool, first: tuple[str, ...] = ()) -> str:
    shown = (
        frame.with_columns(pl.col("op_name").fill_null(OUTSIDE_OPERATORS))
        if "op_name" in frame.columns
        else frame
    )
    if not full_names and "op_name" in shown.columns:
        shown = with_readable_names(shown, "op_name")
    return _keyed(shown, (*first, *PART_COLUMNS))


def _keyed(frame: pl.DataFrame, columns: tuple[str, ...]) -> str:
    """``columns`` of ``frame`` with readable headings; columns with no value left out."""
    kept = [c for c in columns if c in frame.columns and not frame[c].is_null().all()]
    if not frame.height or not kept:
        return "None.\n"
    return markdown_table(frame.select(kept).rename({c: heading(c) for c in kept}))
