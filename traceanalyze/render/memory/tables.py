"""Renderers for `memory`: a :class:`~traceanalyze.analyses.memory.usage.MemoryResult` in, text or a
PNG memory curve out."""

from __future__ import annotations

from typing import Any

import polars as pl

from traceanalyze.analyses.memory.diff import MemoryChange
from traceanalyze.analyses.memory.usage import NO_MEMORY_EVENTS, MemoryResult
from traceanalyze.render.formats import Forms, Labelled, figures_row, labelled, shown_table
from traceanalyze.tables import conform
from traceanalyze.units import byte_size

# Markdown sections: (title, result attribute, line shown when it has no rows).
_SECTIONS = (
    ("Per iteration and device", "iterations", "No memory events inside the iterations."),
    ("Largest blocks live at each peak", "peak_blocks",
     "No block allocated inside the trace is live at a peak (the peak is made of memory "
     "allocated before the profiling window, or the trace has no addresses to pair frees)."),
    ("Top allocating ops", "top_ops", "No allocations inside the iterations."),
    ("Leak suspects", "leak_suspects",
     "None: no device's allocated memory grows in every counted iteration, or no op's blocks "
     "of one size outlive their iteration in every one."),
)  # fmt: skip


MEMORY_TABLES = ("iterations", "peak_blocks", "top_ops", "leak_suspects")


def memory_record(result: MemoryResult) -> dict[str, Any]:
    """The JSON object of ``memory`` (stable keys: see the README)."""
    return {"events": result.events} | {
        name: conform(getattr(result, name), f"memory.{name}").to_dicts() for name in MEMORY_TABLES
    }


def memory_markdown(result: MemoryResult, level: int = 2) -> str:
    """Markdown sections, or the one line saying the trace has no memory events."""
    if result.empty:
        return NO_MEMORY_EVENTS + "\n"
    parts = []
    for title, attribute, empty in _SECTIONS:
        table = shown_table(getattr(result, attribute), empty=empty)
        parts.append(f"{'#' * level} {title}\n\n{table}")
    return "\n".join(parts)


# `memory`: one trace as one object (JSON) or sections (markdown); several (variants) as a list
# of objects with ``variant``, or one heading per variant. Tables: per iteration and device
# (the default), the blocks at each peak, the top ops, the leak suspects, the figures.
MEMORY: Forms[Labelled[MemoryResult]] = labelled(
    Forms(
        markdown=memory_markdown,
        json=lambda r, **_: memory_record(r),
        tables={
            **{name: name for name in MEMORY_TABLES},
            "figures": lambda r, **_: figures_row(r, ("events",)),
        },
        command="memory",
    ),
    nested_markdown=lambda r, nested, **_: memory_markdown(r, level=3 if nested else 2),
)


# Rows of the report's memory section: the largest blocks at the highest peak.
REPORT_BLOCKS = 5


def memory_section(result: MemoryResult | None) -> list[str]:
    """The report's memory part of a variant: the GPU's figures per iteration and the largest
    blocks live at its highest peak. Nothing for a trace without memory events: the compare
    table's empty memory columns say so once, not once per variant."""
    if result is None or result.empty:
        return []
    gpu = result.iterations.filter(pl.col("device_label") != "cpu")
    if not gpu.height:
        return ["**Memory**: the trace's memory events are all on the host (CPU).\n"]
    columns = ["iteration", "device_label", "start_allocated_bytes", "peak_allocated_bytes",
               "peak_increase_bytes", "peak_reserved_bytes", "outliving_bytes"]  # fmt: skip
    highest = gpu.sort("peak_increase_bytes", descending=True, nulls_last=True).row(0, named=True)
    blocks = result.peak_blocks.filter(
        (pl.col("device_label") == highest["device_label"])
        & (pl.col("iteration") == highest["iteration"])
    ).head(REPORT_BLOCKS)
    parts = ["**Memory** (GPU, per iteration)\n", shown_table(gpu.select(columns))]
    if blocks.height:
        title = (
            f"**Largest blocks live at the highest peak** (iteration {highest['iteration']}, "
            f"{highest['device_label']})\n"
        )
        parts += [title, shown_table(blocks.drop("iteration", "device_label"))]
    return parts


def memory_change_markdown(change: MemoryChange | None) -> list[str]:
    """explain's memory part: the change in the GPU's peak and the blocks behind it."""
    if change is None:
        return []
    before = change.base_peak_increase_bytes_per_iter
    after = change.new_peak_increase_bytes_per_iter
    delta = change.peak_increase_bytes_per_iter_delta
    if delta is None:
        missing = "BASE" if before is None else "NEW"
        return [f"**GPU memory**: {missing} has no GPU memory events, so no change is known.\n"]
    sign = "+" if delta >= 0 else "-"
    line = (
        f"**GPU memory**: the peak's increase over the iteration's start goes from "
        f"{byte_size(before or 0)} to {byte_size(after or 0)} per iteration "
        f"({sign}{byte_size(abs(delta))}).\n"
    )
    if not change.blocks.height:
        return [line, "The blocks live at the peak are the same.\n"]
    return [line, "**Blocks live at the GPU's peak that differ**\n",
            shown_table(change.blocks)]  # fmt: skip
