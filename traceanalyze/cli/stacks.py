"""`stacks`: GPU and CPU time by the user's own Python lines (traces recorded with_stack)."""

from __future__ import annotations

from pathlib import Path

import click

from traceanalyze import api
from traceanalyze.classify import CATEGORIES
from traceanalyze.cli.analyses import trace_argument
from traceanalyze.cli.options import (
    Loader,
    Output,
    cache_options,
    iteration_options,
    output_options,
    table_option,
)
from traceanalyze.render.stacks import STACKS


@click.command()
@trace_argument
@click.option(
    "--full-stack", is_flag=True, help="Name the whole chain of user frames, outermost first."
)
@click.option(
    "--category",
    type=click.Choice(CATEGORIES),
    default=None,
    help="Only the GPU activities of one category (e.g. memcpy: which lines copy).",
)
@click.option(
    "--exclude",
    "exclude",
    multiple=True,
    metavar="PREFIX",
    help="Also leave out frames whose file starts with PREFIX (e.g. transformers/); repeatable.",
)
@table_option(STACKS)
@output_options
@cache_options
@iteration_options
def stacks(
    trace: Path,
    full_stack: bool,
    category: str | None,
    exclude: tuple[str, ...],
    table: str | None,
    out: Output,
    loader: Loader,
) -> None:
    """GPU activity time, kernels and CPU operator time per iteration by the innermost Python
    frame of your own code (outside torch, the standard library and installed packages), with
    its share of the GPU activity; the memory copies and sets by line. Needs a trace recorded
    with torch.profiler.profile(with_stack=True); without stacks it says so (exit status 0).

    \b
    Example:
      traceanalyze stacks trace.json.gz
      traceanalyze stacks trace.json.gz --full-stack --format json -o stacks.json
      traceanalyze stacks trace.json.gz --category memcpy
    """
    result = api.stacks(
        trace, full_stack=full_stack, category=category, exclude=exclude, loading=loader
    )
    out.write(STACKS.render(api.labelled(result), out.format, table=table), inputs=[trace])


COMMANDS = (stacks,)
