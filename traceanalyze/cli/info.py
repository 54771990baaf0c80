"""`traceanalyze info`: what is in a trace."""

from __future__ import annotations

from pathlib import Path

import click

from traceanalyze import api
from traceanalyze.cli.options import Loader, Output, cache_options, output_options, table_option
from traceanalyze.render.info import INFO


@click.command()
@click.argument("traces", nargs=-1, required=True, type=click.Path(path_type=Path))
@table_option(INFO)
@output_options
@cache_options
def info(traces: tuple[Path, ...], table: str | None, out: Output, loader: Loader) -> None:
    """Device, versions, time span, event counts, iterations and linking of each TRACE.

    TRACE is a .json or .json.gz trace, a folder of the ranks of one job, or a folder of
    separate traces (a capture folder), which gives one record per trace.

    \b
    Example:
      traceanalyze info sample_traces/h200_default/sdpa_flash.json.gz
      traceanalyze info run/*.json.gz --format json
    """
    records = api.info_records(traces, loading=loader)
    out.write(INFO.render(records, out.format, table=table), inputs=traces)
