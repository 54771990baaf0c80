"""`attention`: every attention call in a trace, what ran, how well, and why not faster."""

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
from traceanalyze.render.attention import ATTENTION


@click.command()
@trace_argument
@click.option(
    "--cudnn-version",
    default=None,
    metavar="X.Y.Z",
    help="The cuDNN the trace ran with (traces do not record it; a capture manifest does): "
    "newer than 9.15, PyTorch prefers cuDNN's SDPA on sm90/sm100.",
)
@click.option("--full-names", is_flag=True, help="Show kernel names in full in markdown.")
@table_option(ATTENTION)
@output_options
@cache_options
@iteration_options
def attention(
    trace: Path,
    cudnn_version: str | None,
    full_names: bool,
    table: str | None,
    out: Output,
    loader: Loader,
) -> None:
    """One row per attention call site and shape, per iteration: the implementation (composed,
    an SDPA backend, flex, a library), kernels, GPU and CPU µs, FLOPs, TFLOP/s and % of peak,
    the bytes of scores written, and for SDPA why not a faster backend; composed attention
    found in the CPU op tree; the host cost of attention libraries. Findings first.

    \b
    Example:
      traceanalyze attention trace.json.gz
      traceanalyze attention sample_traces/h200_default --format json -o attention.json
    """
    results = api.labelled(api.attention(trace, cudnn_version=cudnn_version, loading=loader))
    out.write(
        ATTENTION.render(results, out.format, full_names=full_names, table=table), inputs=[trace]
    )


COMMANDS = (attention,)
