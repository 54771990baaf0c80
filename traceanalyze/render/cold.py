"""Renderers for the cold-start comparison: a :class:`ColdSet` in, a ``str`` out."""

from __future__ import annotations

import polars as pl

from traceanalyze.analyses.cold.caches import OUTCOMES
from traceanalyze.analyses.cold.context import UNKNOWN_CACHES
from traceanalyze.analyses.cold.rules import CAUSES
from traceanalyze.analyses.cold.variants import DEFINITIONS, ColdSet
from traceanalyze.names import with_readable_names
from traceanalyze.render.formats import Forms
from traceanalyze.render.headings import heading
from traceanalyze.render.table import markdown_table
from traceanalyze.units import duration

VIEWS = ("op", "cause", "call", "variant", "cache")
# Each view's table of a ColdSet (``variant``: the summary with break-even).
_VIEW_ATTRIBUTES = {"op": "rows", "cause": "causes", "call": "calls", "variant": "summary",
                    "cache": "caches"}  # fmt: skip
TOP_OPERATORS = 10
OUTSIDE_OPERATORS = "(outside operators)"
WHERE_COLUMNS = ("variant", "first_call_in", "cache_state", "cache_state_source", "cache_hits")
COST_COLUMNS = (
    "variant", "calls", "first_call_us", "steady_us", "steady_calls", "excess_us",
    "cpu_excess_us", "gpu_excess_us", "cudnn_planning_us", "top_cause",
)  # fmt: skip
CHECK_COLUMNS = (
    "variant", "timed_first_call_us", "timed_steady_us", "timed_excess_us",
    "timed_first_call_spread_pct", "excess_vs_timed_pct", "steady_vs_timed_pct",
)  # fmt: skip
PAYBACK_COLUMNS = (
    "variant", "advantage_us", "one_off_difference_us", "advantage_source", "break_even_calls",
    "break_even_note",
)  # fmt: skip
CACHE_COLUMNS = ("call", "event", "cache", "outcome", "count", "us")
PART_COLUMNS = (
    "side", "steady_call", "cause", "op_name", "first_call_us", "steady_us", "excess_us",
    "share_of_excess_pct", "break_even_calls",
)  # fmt: skip
CALL_COLUMNS = ("call", "name", "shape_index", "role", "cpu_us", "gpu_us", "wall_us")


def view_frame(result: ColdSet, view: str) -> pl.DataFrame:
    """The table one view shows: per cause and operator, per cause, per call, per variant or
    per cache event."""
    frame: pl.DataFrame = getattr(result, _VIEW_ATTRIBUTES[view])
    return frame


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


# `cold`: JSON and the tables the rows of ``view`` (default ``op``); markdown that table alone,
# or without ``view`` the whole comparison.
COLD: Forms[ColdSet] = Forms(
    markdown=cold_markdown,
    json=lambda result, **options: COLD.table(result, **options),  # noqa: PLW0108 (not yet bound)
    tables={view: _VIEW_ATTRIBUTES[view] for view in VIEWS},
    command="cold",
    choose="view",
)


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
    sources = summary["timed_source"].drop_nulls().unique(maintain_order=True).to_list()
    timed = f" ({'; '.join(sources)})" if sources else ""
    return "\n".join(
        [
            "**Where call 1 ran, and what the caches held**\n",
            _keyed(summary, WHERE_COLUMNS),
            "**One-off cost of the first call** (trace: wall time under the profiler)\n",
            _keyed(summary, COST_COLUMNS),
            f"**Checked against the capture's timing without the profiler**{timed}\n",
            _keyed(summary, CHECK_COLUMNS),
            f"**Paid back** (against `{result.baseline}`; per-call and one-off differences "
            "from one source)\n",
            _keyed(summary, PAYBACK_COLUMNS),
        ]
    )


def _variant_part(result: ColdSet, row: dict[str, object], full_names: bool, level: str) -> str:
    label = row["variant"]
    mine = pl.col("variant") == label
    parts = [f"{level}`{label}`\n"] if level else []
    parts.append(_headline(row, result.baseline))
    calls = result.calls.filter(mine) if result.calls.height else result.calls
    for compared in _compared(result.causes.filter(mine), calls):
        parts += _compared_part(result, compared, full_names)
    if calls.height:
        parts += ["**Calls**\n", _keyed(calls, CALL_COLUMNS)]
    caches = result.caches.filter(mine) if result.caches.height else result.caches
    if caches.height:
        parts += ["**Cache events** (call: the call each starts in)\n", _cache_table(caches)]
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


def _headline(row: dict[str, object], baseline: str | None) -> str:
    caches = _caches(row)
    where = f"call 1 ran in {row['first_call_in']}; " if row["first_call_in"] else ""
    if row["first_call_us"] is None:
        return f"No comparison: {row['note'] or row['status']}. {where}Caches: {caches}.\n"
    first, steady, excess = (_us(row, k) for k in ("first_call_us", "steady_us", "excess_us"))
    steady_calls = row["steady_calls"]
    paid = (
        f"paid back after {row['break_even_calls']:,} calls against `{baseline}` "
        f"({row['break_even_note']})"
        if row["break_even_calls"] is not None
        else f"break-even: {row['break_even_note']}"
    )
    return (
        f"{row['calls']} calls ({row['call_source']}); {where}caches: {caches}. Under the "
        f"profiler call 1 took {duration(first)} against {duration(steady)} for the median of "
        f"its {steady_calls} steady call{'' if steady_calls == 1 else 's'} (wall time): "
        f"{duration(excess)} of one-off work ({duration(_us(row, 'cpu_excess_us'))} on the "
        f"CPU, split below); {paid}.{_timed(row)}\n"
    )


def _caches(row: dict[str, object]) -> str:
    """The cache state, where it comes from and the hits the trace shows."""
    if row["cache_state"] is None:
        return UNKNOWN_CACHES
    source = "the trace's cache events" if row["cache_state_source"] == "trace" else "manifest"
    hits = f"; hits: {row['cache_hits']}" if row["cache_hits"] else ""
    return f"{row['cache_state']} ({source}{hits})"


def _timed(row: dict[str, object]) -> str:
    """The capture's timing without the profiler, where the manifest has it."""
    if row["timed_steady_us"] is None:
        return ""
    steady = duration(_us(row, "timed_steady_us"))
    if row["timed_excess_us"] is None:
        return (
            f" Timed without the profiler ({row['timed_source']}): {steady} per call; the "
            f"trace's steady call is {float(row['steady_vs_timed_pct']):+.1f}% of that."  # type: ignore[arg-type]
        )
    return (
        f" Timed without the profiler ({row['timed_source']}): "
        f"{duration(_us(row, 'timed_first_call_us'))} against {steady}, "
        f"{duration(_us(row, 'timed_excess_us'))} of one-off work."
    )


def _us(row: dict[str, object], key: str) -> float:
    value = row[key]
    assert isinstance(value, (int, float)), key
    return float(value)


def _cache_table(caches: pl.DataFrame) -> str:
    """The cache events of one variant, and what each event means."""
    meanings = caches.select("event", "cache", "outcome", "meaning").unique(maintain_order=True)
    # One line per distinct event kind (a handful).
    legend = "\n".join(
        f"- `{event}` ({cache}, {outcome}: {OUTCOMES[outcome]}): {meaning}."
        # one sentence per cache event kind seen: a handful of rows
        for event, cache, outcome, meaning in meanings.iter_rows()
    )
    return _keyed(caches, CACHE_COLUMNS) + "\n" + legend + "\n"


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
