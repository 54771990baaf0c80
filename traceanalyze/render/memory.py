"""Renderers for `memory`: a :class:`~traceanalyze.analyses.memory.MemoryResult` in, text or a
PNG memory curve out."""

from __future__ import annotations

from typing import Any

import polars as pl

from traceanalyze.analyses.memory import NO_MEMORY_EVENTS, MemoryResult
from traceanalyze.render.analyses import render_table
from traceanalyze.render.table import to_csv, to_json

# Markdown sections: (title, result attribute, line shown when it has no rows).
_SECTIONS = (
    ("Per iteration and device", "iterations", "No memory events inside the iterations."),
    ("Largest blocks live at each peak", "peak_blocks",
     "No block allocated inside the trace is live at a peak (the peak is made of memory "
     "allocated before the profiling window, or the trace has no addresses to pair frees)."),
    ("Top allocating ops", "top_ops", "No allocations inside the iterations."),
    ("Leak suspects", "leak_suspects",
     "None: no op's blocks of one size outlive their iteration in every counted iteration."),
)  # fmt: skip


def memory_record(result: MemoryResult) -> dict[str, Any]:
    """The JSON object of ``memory`` (stable keys: see the README)."""
    return {
        "events": result.events,
        "iterations": result.iterations.to_dicts(),
        "peak_blocks": result.peak_blocks.to_dicts(),
        "top_ops": result.top_ops.to_dicts(),
        "leak_suspects": result.leak_suspects.to_dicts(),
    }


def render_memory(results: list[tuple[str | None, MemoryResult]], fmt: str) -> str:
    """One trace as one object (JSON) or sections (markdown); several (variants) as a list of
    objects with ``variant``, or one heading per variant. CSV is the per-iteration table."""
    if fmt == "json":
        records = [_labelled(label, memory_record(r)) for label, r in results]
        return to_json(records[0] if len(records) == 1 else records)
    if fmt == "csv":
        frames = [
            r.iterations.select(pl.lit(label).alias("variant"), pl.all()) if label else r.iterations
            for label, r in results
        ]
        return to_csv(pl.concat(frames, how="diagonal_relaxed"))
    if len(results) == 1:
        return memory_markdown(results[0][1])
    return "\n".join(f"## {label}\n\n{memory_markdown(r, level=3)}" for label, r in results)


def _labelled(label: str | None, record: dict[str, Any]) -> dict[str, Any]:
    return record if label is None else {"variant": label, **record}


def memory_markdown(result: MemoryResult, level: int = 2) -> str:
    """Markdown sections, or the one line saying the trace has no memory events."""
    if result.empty:
        return NO_MEMORY_EVENTS + "\n"
    parts = []
    for title, attribute, empty in _SECTIONS:
        table = render_table(getattr(result, attribute), "md", empty=empty)
        parts.append(f"{'#' * level} {title}\n\n{table}")
    return "\n".join(parts)
