"""`roofline` and `explain`: how close ops run to the GPU's limits, and why two traces differ."""

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
from traceanalyze.render.perf import EXPLAIN, ROOFLINE
from traceanalyze.render.waterfall import waterfall

positive = click.FloatRange(min=0, min_open=True)


@click.command()
@trace_argument
@click.option(
    "--peak-tflops",
    type=positive,
    default=None,
    help="Peak TFLOP/s to use for every data type instead of the GPU's table entry.",
)
@click.option(
    "--peak-tbps",
    type=positive,
    default=None,
    help="Peak memory bandwidth in TB/s instead of the GPU's table entry.",
)
@click.option("--top", type=click.IntRange(min=1), default=None, help="Only the first N rows.")
@click.option("--full-names", is_flag=True, help="Show kernel names in full in markdown.")
@table_option(ROOFLINE)
@output_options
@cache_options
@iteration_options
def roofline(
    trace: Path,
    peak_tflops: float | None,
    peak_tbps: float | None,
    top: int | None,
    full_names: bool,
    table: str | None,
    out: Output,
    loader: Loader,
) -> None:
    """FLOPs and bytes of each op from its recorded shapes, the kernel time it launched, the
    TFLOP/s and TB/s it reached and its % of the roofline, with a verdict; what is not
    modelled, and each kernel's waves. Needs a trace recorded with record_shapes=True.

    \b
    Example:
      traceanalyze roofline trace.json.gz --top 10
      traceanalyze roofline trace.json.gz --peak-tflops 989.4 --peak-tbps 4.8 --format json
    """  # fmt: skip
    results = api.labelled(
        api.roofline(trace, peak_tflops=peak_tflops, peak_tbps=peak_tbps, loading=loader)
    )
    text = ROOFLINE.render(results, out.format, top=top, full_names=full_names, table=table)
    out.write(text, inputs=[trace])


@click.command()
@click.argument("base", type=click.Path(path_type=Path))
@click.argument("new", type=click.Path(path_type=Path))
@table_option(EXPLAIN)
@output_options
@cache_options
@iteration_options
def explain(base: Path, new: Path, table: str | None, out: Output, loader: Loader) -> None:
    """Why NEW's GPU time per iteration differs from BASE's: the change in GPU span split
    into parts that add up exactly (kernels by launching op and category, memory copies and
    sets by cause, stream overlap, idle gaps), with the CPU side beside it. With -o FILE.md a
    waterfall chart is written beside the file.

    \b
    Example:
      traceanalyze explain sample_traces/h200_default/naive.json.gz \\
          sample_traces/h200_default/naive_inplace.json.gz
    """
    chart = out.chart_beside("waterfall")
    result = api.explain(base, new, loading=loader)
    text = EXPLAIN.render(result, out.format, charts=[chart] if chart else [], table=table)
    out.write(text, inputs=[base, new])
    if chart is not None:
        out.write_beside(chart, waterfall(result))


COMMANDS = (roofline, explain)
