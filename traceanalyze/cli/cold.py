"""`cold` (first call against steady calls, by cause) and `graphs` (CUDA graph replays)."""

from __future__ import annotations

from pathlib import Path

import click

from traceanalyze import api
from traceanalyze.cli.analyses import _table_command, trace_argument
from traceanalyze.cli.options import Loader, Output, cache_options, output_options
from traceanalyze.render.cold import COLD, VIEWS


@click.command()
@trace_argument
@click.option(
    "--by",
    "view",
    type=click.Choice(VIEWS),
    default=None,
    help="One row per what: cause and operator (JSON/CSV default), cause, call, or variant "
    "(the summary with break-even). Markdown without --by shows them all.",
)
@click.option(
    "--baseline",
    default=None,
    help="Variant whose steady time the break-even is against. [default: naive if present, "
    "else the first variant; none for a single trace]",
)
@click.option("--full-names", is_flag=True, help="Show operator names in full in markdown.")
@output_options
@cache_options
def cold(
    trace: Path,
    view: str | None,
    baseline: str | None,
    full_names: bool,
    out: Output,
    loader: Loader,
) -> None:
    """One-off work: the first call against the median steady call, CPU and GPU time split by
    cause (cuDNN plan build, cuBLAS init, Triton compile and autotuning, Inductor/Dynamo
    compile, lazy CUDA init, allocator growth, other) and operator.

    Calls are the call<i> annotations of `capture --cold`, else profiler steps, else repeated
    annotations or operator sequences. On a capture folder each variant is compared with the
    manifest's wall-clock timing and gets the calls after which its steady advantage over the
    baseline pays the one-off cost back; every figure says which cache state it is for.

    \b
    Example:
      traceanalyze cold traces/cold/sdpa_cudnn.json.gz
      traceanalyze cold traces/cold --by variant --format json
    """
    result = api.cold(trace, baseline=baseline, loading=loader)
    out.write(COLD.render(result, out.format, view=view, full_names=full_names), inputs=[trace])


graphs = _table_command(
    "graphs",
    """CUDA graph replays: per graph and position, the replayed kernel (or copy), the op
    captured there when the trace also holds the capture, replays and time per iteration.

    \b
    Example:
      traceanalyze graphs traces/graph/sdpa_flash.json.gz
    """,
    empty="No CUDA graph replays (cudaGraphLaunch) in this trace.",
)

COMMANDS = (cold, graphs)
