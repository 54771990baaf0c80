"""`annotate`: a copy of a trace with the analysis inside, for Perfetto and chrome://tracing."""

from __future__ import annotations

from pathlib import Path

import click

from traceanalyze import api
from traceanalyze.cli.analyses import trace_argument
from traceanalyze.cli.options import Loader, Output, cache_options
from traceanalyze.load.annotated import write_annotated
from traceanalyze.render.annotate import activity_args, added_events

SUFFIXES = (".json", ".json.gz")


@click.command()
@trace_argument
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path, dir_okay=False),
    required=True,
    help="The annotated copy: .json, or .json.gz (gzipped). Never one of the inputs.",
)
@click.option("--force", is_flag=True, help="Overwrite the -o file if it exists.")
@cache_options
def annotate(trace: Path, output: Path, force: bool, loader: Loader) -> None:
    """Write a copy of TRACE (left untouched) that opens in Perfetto or chrome://tracing with
    the analysis inside: each kernel, memcpy and memset gains traceanalyze.* args (category,
    launch_op, iteration, theoretical_occupancy_pct, roofline figures of its op); each memory
    copy or set gets an arrow from the op that launched it, named by its op chain; counter
    tracks show GPU busy per stream, memory allocated (traces with [memory] events) and the
    critical path; a global marker per finding of the report's first section.

    \b
    Example:
      traceanalyze annotate sample_traces/h200_default/naive.json.gz -o naive_annotated.json.gz
    """
    if not output.name.endswith(SUFFIXES):
        raise click.UsageError(f"-o {output}: write a .json or .json.gz file.")
    if trace.is_dir():
        raise click.UsageError(f"{trace} is a folder; annotate one trace file at a time.")
    out = Output("json", output, force)
    out.check_free(output)  # before the slow part
    annotation = api.annotate(trace, loading=loader)
    members, events = activity_args(annotation), added_events(annotation)
    count = out.write_with(
        lambda path: write_annotated(trace, path, members, events), inputs=[trace]
    )
    click.echo(
        f"wrote {output} ({count} GPU activities annotated, {events.len()} events added)", err=True
    )
