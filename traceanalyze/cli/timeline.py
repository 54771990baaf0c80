"""Where the time goes between kernels: `critical-path` (the chain of work that bounds a step)
and `comms` (the collectives)."""

from __future__ import annotations

from pathlib import Path

import click

from traceanalyze import api
from traceanalyze.cli.analyses import trace_argument
from traceanalyze.cli.options import (
    Loader,
    Output,
    cache_options,
    clock_align_option,
    iteration_options,
    output_options,
    table_option,
)
from traceanalyze.render.between.critical_path import COMMS, CRITICAL_PATH, critical_path_chart


@click.command(name="critical-path")
@trace_argument
@click.option("--top", type=click.IntRange(min=1), default=None, help="Only the first N items.")
@table_option(CRITICAL_PATH)
@output_options
@cache_options
@iteration_options
def critical_path(
    trace: Path, top: int | None, table: str | None, out: Output, loader: Loader
) -> None:
    """Per iteration, the chain of CPU ops, launches, GPU activities and sync waits that set
    its length (it equals the iteration's span), its time by kind, and for the longest items
    the slack: how much an iteration would shrink if the item took no time. With -o FILE.md a
    chart of the path over the longest iteration is written beside the file.

    \b
    Example:
      traceanalyze critical-path sample_traces/h200_default/naive.json.gz
      traceanalyze critical-path trace.json.gz --format json -o path.json
    """
    chart = out.chart_beside("path")
    path = api.critical_path(trace, loading=loader)
    text = CRITICAL_PATH.render(path, out.format, top=top, chart=chart, table=table)
    out.write(text, inputs=[trace])
    if chart is not None:
        out.write_beside(chart, critical_path_chart(path))


@click.command()
@trace_argument
@click.option(
    "--by",
    type=click.Choice(["call", "kind"]),
    default="call",
    show_default=True,
    help="One row per collective call, or per kind, size bucket and side (GPU or CPU).",
)
@click.option("--top", type=click.IntRange(min=1), default=None, help="Only the first N rows.")
@clock_align_option
@output_options
@cache_options
@iteration_options
def comms(
    trace: Path, by: str, top: int | None, clock_align: bool, out: Output, loader: Loader
) -> None:
    """Every collective call (NCCL/RCCL kernels, and Gloo collectives run on the CPU): its
    kind, dtype, group size, message bytes, time, and algorithm and bus bandwidth with
    nccl-tests' formulas; --by kind gives count, time per iteration and median bus bandwidth
    per kind and size bucket, against the GPU link's peak where it is known.

    \b
    Example:
      traceanalyze comms rank0.json.gz
      traceanalyze comms rank0.json.gz --by kind
      traceanalyze comms rank0.json.gz --format json -o comms.json
      traceanalyze comms run/ranks --clock-align
    """
    result = api.comms(trace, clock_align=clock_align, loading=loader)
    out.write(COMMS.render(result, out.format, by=by, top=top), inputs=[trace])


COMMANDS = (critical_path, comms)
