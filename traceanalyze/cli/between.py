"""Time between kernels: `streams`, `launches` and `idle`."""

from __future__ import annotations

from pathlib import Path

import click

from traceanalyze import api
from traceanalyze.analyses.between.idle import LARGEST_GAPS
from traceanalyze.cli.analyses import _table_command, trace_argument
from traceanalyze.cli.options import (
    Loader,
    Output,
    cache_options,
    iteration_options,
    output_options,
    table_option,
)
from traceanalyze.render.between.idle import IDLE

streams = _table_command(
    "streams",
    """Each GPU stream per iteration: kernels, copies and sets, activity, busy, span and idle
    time (a stream's own gaps; `idle` splits the device's idle time). --by iteration gives one
    row per stream and iteration.

    \b
    Example:
      traceanalyze streams ../shared/traces/public/hta_nccl_a100.json.gz
    """,
    empty="No GPU activity inside the iterations: no streams to list.",
)
launches = _table_command(
    "launches",
    """Whether launches keep up: per kernel name (or category) the launch call's CPU time, the
    launch delay (kernel start minus launch call start) and the queue of work ahead of it on
    its stream (median, p90, max), and the short kernels (GPU time under their own launch
    call's CPU time). --by outlier lists single launches delayed far beyond their name's median.

    \b
    Example:
      traceanalyze launches sample_traces/h200_default/sdpa_math.json.gz --top 10
      traceanalyze launches trace.json.gz --by category --format json
    """,
    empty="No GPU activity launched inside the iterations by a call in the trace.",
)


@click.command()
@trace_argument
@click.option(
    "--largest",
    type=click.IntRange(min=0),
    default=LARGEST_GAPS,
    show_default=True,
    help="How many of the longest gaps to show.",
)
@click.option("--full-names", is_flag=True, help="Show kernel names in full in markdown.")
@table_option(IDLE)
@output_options
@cache_options
@iteration_options
def idle(
    trace: Path, largest: int, full_names: bool, table: str | None, out: Output, loader: Loader
) -> None:
    """Why the GPU sits idle inside the iterations: the idle time per iteration split into
    causes that add up to it (sync, host wait, launch overhead, other), per stream, and the
    largest gaps with the CPU ops during them.

    \b
    Example:
      traceanalyze idle sample_traces/h200_default/naive.json.gz
      traceanalyze idle trace.json.gz --format json -o idle.json
    """
    results = api.labelled(api.idle(trace, largest=largest, loading=loader))
    text = IDLE.render(results, out.format, full_names=full_names, table=table)
    out.write(text, inputs=[trace])


COMMANDS = (streams, launches, idle)
