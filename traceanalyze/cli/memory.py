"""`memory`: allocated bytes per iteration and device, the blocks at the peak, the top ops."""

from __future__ import annotations

from pathlib import Path

import click

from traceanalyze import api
from traceanalyze.cli.analyses import trace_argument
from traceanalyze.cli.options import (
    Loader,
    Output,
    cache_options,
    iteration_options,
    output_options,
    table_option,
)
from traceanalyze.render.memory.chart import memory_chart
from traceanalyze.render.memory.tables import MEMORY


@click.command()
@trace_argument
@table_option(MEMORY)
@output_options
@cache_options
@iteration_options
def memory(trace: Path, table: str | None, out: Output, loader: Loader) -> None:
    """Per iteration and device: allocated bytes at the start, the peak and its increase over
    the start, the peak reserved, allocations that outlive the iteration; the largest blocks
    live at each peak (op, size, recorded shapes, lifetime), the top allocating ops and leak
    suspects. Needs a trace recorded with profile_memory=True. With -o FILE.md the memory
    curve is written beside the file as FILE_memory.png.

    \b
    Example:
      traceanalyze memory trace.json.gz
      traceanalyze memory trace.json.gz --format json -o memory.json
      traceanalyze memory trace.json.gz -o memory.md
    """
    chart = out.chart_beside("memory")
    results = api.labelled(api.memory(trace, loading=loader))
    out.write(MEMORY.render(results, out.format, table=table), inputs=[trace])
    data = memory_chart(results) if chart is not None else None
    if chart is not None and data is not None:
        out.write_beside(chart, data)


COMMANDS = (memory,)
